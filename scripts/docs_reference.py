"""The generated pages of the docs site: the settings reference and the CLI reference.

Used as an MkDocs hook (``hooks:`` in mkdocs.yml): :func:`on_files` adds the pages
to the build (and :func:`on_page_content` drops the Sphinx roles of docstrings), so they are made from the code on every ``make docs`` and never
committed. ``python scripts/docs_reference.py settings|cli`` prints one page.

The settings page is built from the settings dataclasses in
:mod:`streams.core.config` with the project's own naming helpers (``setting_name``,
``env_var``, ``flag``) and from the ``streams`` parser (which commands take each
flag), so names, defaults and flags cannot drift from the code. What each setting
means is written here, in :data:`MEANINGS`; a settings field without a meaning, or
a meaning for a field that no longer exists, fails the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Iterator

from streams.core.config import (
    SOURCE_ORDER,
    KafkaSettings,
    ProducerSettings,
    TopicNames,
    WorkerSettings,
    env_var,
    flag,
    setting_name,
)

SECTIONS = {KafkaSettings: "kafka", TopicNames: "topics", ProducerSettings: "producer", WorkerSettings: "worker"}

#: (settings class, field) -> what the setting means. Every field of every settings class must be here.
MEANINGS: dict[tuple[type, str], str] = {
    (KafkaSettings, "bootstrap_servers"): "The cluster's bootstrap servers, `host:port[,host:port...]`.",
    (KafkaSettings, "client_properties"): "librdkafka properties passed as they are (`security.protocol`, `sasl.*`, "
        "`ssl.*`, ...): a TOML table, `key=value` lines, or one `STREAMS_KAFKA_<PROPERTY>` variable each "
        "(dots as underscores). Credentials are never printed.",
    (TopicNames, "events"): "The events topic, or a template with `{bucket}` (`events.{bucket}`) for a topic per bucket.",
    (TopicNames, "hot_keys"): "The compacted key directory: the decider's placements (moves and splits) that producers follow.",
    (TopicNames, "sketches"): "The one-partition topic the workers publish their load summaries on for the decider.",
    (TopicNames, "partials"): "Stage 1's partial aggregates per (bucket, key, source partition), read by stage 2.",
    (TopicNames, "aggregates"): "The compacted, exact per-(bucket, key) aggregates.",
    (TopicNames, "bucket_closed"): "One record per closed bucket and source partition.",
    (TopicNames, "late_events"): "Events that arrived after their bucket closed (bounded copy of the original); `streams replay late` reads them.",
    (TopicNames, "dead_letters"): "Records that could not be processed, each naming the field that made it one (bounded copy of the original).",
    (TopicNames, "routing_maps"): "The compacted, one-partition history of routing maps (partition count and placement per first bucket).",
    (TopicNames, "id_leases"): "The single-partition `LogAppendTime` topic through which Snowflake producers lease fleet-unique worker IDs.",
    (ProducerSettings, "partitions"): "Partition count of the routing map; must be the events topic's.",
    (ProducerSettings, "placement"): "How a key's hash picks its partition: `mod` (Kafka's rule) or `jump` (jump consistent hash: growth moves 1/(N+1) of keys).",
    (ProducerSettings, "hash"): "The key hash: `murmur2` (Kafka's) or `xxh3`.",
    (ProducerSettings, "bucket_width"): "Time-bucket width (`30s`, `1m`, `1h`, `1d`, ...); buckets are UTC-aligned.",
    (ProducerSettings, "grace"): "How long after its end a bucket still accepts events.",
    (ProducerSettings, "serializer"): "Payload format of events: `json` (orjson) or `avro` (fastavro).",
    (ProducerSettings, "id_kind"): "Event IDs the producer stamps: `uuid7` (RFC 9562) or `snowflake` (64-bit, leased worker ID).",
    (ProducerSettings, "snowflake_worker"): "Snowflake worker ID: -1 leases a free fleet-unique one; an explicit ID is leased too, and refused while another producer holds it.",
    (ProducerSettings, "id_lease"): "Length of a Snowflake worker-ID lease (renewed every 10 s by default; at most 10 minutes).",
    (ProducerSettings, "id_lease_reuse_delay"): "How long a lapsed worker ID rests before another producer may take it; must cover twice the clock skew between machines.",
    (WorkerSettings, "app_id"): "The worker fleet's name: consumer groups (`<app_id>-events`, `<app_id>`, `<app_id>-decider`) and changelog topics derive from it.",
    (WorkerSettings, "partitions"): "Partition count of the events topic the workers create topics with and plan over.",
    (WorkerSettings, "bucket_width"): "Time-bucket width; must be the producers'.",
    (WorkerSettings, "grace"): "A bucket closes when the low watermark passes its end plus this.",
    (WorkerSettings, "allowed_delay"): "A partition's watermark is its max event time minus this.",
    (WorkerSettings, "idle_timeout"): "A partition silent this long, and known to be caught up, stops holding buckets open.",
    (WorkerSettings, "watermark_agreement"): "How many records of a partition must reach an event time before its watermark moves there (2: one record with a bad clock cannot close buckets early).",
    (WorkerSettings, "dedup_ids"): "Count an event once per (bucket, source partition) while the bucket is open, by its identity (ID, key, time, value); a colliding ID with other content is counted, and counted as a collision.",
    (WorkerSettings, "retention"): "How long after its end a bucket's late events are still *late* (replayable) rather than *too old*; stage 2 keeps merged buckets this long, and `replay late` skips older buckets.",
    (WorkerSettings, "serializer"): "Payload format of events: `json` or `avro`; must be the producers'.",
    (WorkerSettings, "placement"): "The producers' placement (names each key's hash home for the decider).",
    (WorkerSettings, "hash"): "The producers' hash.",
    (WorkerSettings, "hot_window_s"): "The measurement window of key and partition loads, in seconds; the decider waits a window after each change.",
    (WorkerSettings, "hot_min_window_events"): "Events a window must hold before the decider trusts it.",
    (WorkerSettings, "balance_enabled"): "Whether the decider publishes placements at all (`--no-balance`: every key on its hash partition, Kafka's rule).",
    (WorkerSettings, "balance_moves"): "Whether a key may be moved whole to a partition its hash does not name (false: split only).",
    (WorkerSettings, "balance_target"): "Act when a partition's load is above this times the mean by more than counting noise explains.",
    (WorkerSettings, "balance_aim"): "Plans evict keys from partitions above this times the mean (at most the target).",
    (WorkerSettings, "balance_min_rate"): "Never place keys under this many events/s.",
    (WorkerSettings, "balance_max_keys"): "Heaviest keys considered per round.",
    (WorkerSettings, "balance_max_changes"): "Keys whose placement may change per round.",
    (WorkerSettings, "balance_hold_s"): "A placement stays at least this many seconds before it changes or is retired.",
    (WorkerSettings, "balance_confidence"): "The chance (0.5 to 0.999999) that a stream truly at the target triggers nothing in a window: a partition counts as hot only when its load is above the target by more than this much counting noise explains.",
    (WorkerSettings, "balance_evidence_windows"): "How many unchanged windows of partition counts (1 to 1000) the trigger adds up, so a small real imbalance shows after a few windows.",
    (WorkerSettings, "balance_propagation_s"): "Seconds after a directory change during which traffic may still be routed the old way (the notice's trip to the producers, records on their way): the decider trusts no window that begins sooner.",
    (WorkerSettings, "sketch_capacity"): "Capacity of each worker's frequent-items sketch.",
    (WorkerSettings, "metrics_port"): "Serve Prometheus metrics on `http://0.0.0.0:PORT/metrics` (0: off).",
    (WorkerSettings, "session_timeout_s"): "Consumer group session timeout, in seconds.",
    (WorkerSettings, "group_protocol"): "Consumer group protocol: `consumer` (KIP-848, incremental), `classic`, or `auto` (KIP-848 where the cluster offers it).",
    (WorkerSettings, "tick"): "How often each loop closes due buckets, persists and commits.",
    (WorkerSettings, "broker_outage_timeout"): "How long the worker waits out an unreachable cluster before it stops.",
    (WorkerSettings, "instance"): "This worker's name in summaries and notices (empty: host, pid and a random suffix).",
}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the ``streams`` command by its command line (``""`` the top level, ``"topics grow"``)."""
    from streams.cli import build_parser

    top, _ = build_parser()
    found = {"": top}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}".strip()] = sub
                    walk(sub, f"{prefix}{name} ")

    walk(top, "")
    return found


def _check_meanings() -> None:
    fields = {(cls, f.name) for cls in SECTIONS for f in dataclasses.fields(cls)}
    missing = sorted(f"{cls.__name__}.{name}" for cls, name in fields - MEANINGS.keys())
    stale = sorted(f"{cls.__name__}.{name}" for cls, name in MEANINGS.keys() - fields)
    if missing or stale:
        raise SystemExit(f"scripts/docs_reference.py MEANINGS: missing {missing}, no such setting {stale}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def settings_page() -> str:
    """The settings reference, as Markdown."""
    _check_meanings()
    parsers = _parsers()
    lines = [
        "# Settings reference",
        "",
        "<!-- generated by scripts/docs_reference.py from streams/core/config.py; do not edit -->",
        "",
        "Every setting has one name, used in the TOML file (in its table), as an environment",
        "variable `STREAMS_<NAME>` and as the flag `--<name-with-dashes>`. Each command reads,",
        "later winning: " + ", ".join(f"**{s}**" for s in SOURCE_ORDER).replace("**default**", "the **default**")
        + " (the TOML file is named by `--config` or `STREAMS_CONFIG`).",
        "Boolean flags take `true/false`, `yes/no`, `1/0`, `on/off`, or `--no-<name>`.",
        "`streams worker --dry-run [--json]` prints every setting with its value and where it came from.",
        "",
        "Under each flag are the commands that take it; a setting without a flag is read from",
        "the file and the environment only.",
        "",
    ]
    defaults_of = {cls: cls() for cls in SECTIONS}
    for cls, section in SECTIONS.items():
        doc = (cls.__doc__ or "").strip().split("\n", 1)[0]
        lines += [f"## `[{section}]`: {cls.__name__}", "", doc, "",
                  "| setting (TOML key) | environment and flag | default | meaning |",
                  "| --- | --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            name = setting_name(cls, f.name)
            option = flag(name)
            commands = [cmd for cmd, parser in parsers.items() if cmd and option in parser._option_string_actions]
            flag_cell = f"`{option}`<br><small>{', '.join(commands)}</small>" if commands else "no flag"
            default = getattr(defaults_of[cls], f.name)
            default_cell = '`""`' if default == "" else f"`{default}`"
            lines.append(f"| <a id=\"{section}-{name}\"></a>**{name}**<br>`[{section}] {name}` | "
                         f"`{env_var(name)}`<br>{flag_cell} | {_cell(default_cell)} | {_cell(MEANINGS[(cls, f.name)])} |")
        lines.append("")
    lines += ["Librdkafka properties: `STREAMS_KAFKA_<PROPERTY>`, dots as underscores "
              "(`STREAMS_KAFKA_SASL_PASSWORD` is `sasl.password`); see "
              "[Secured clusters](../how-to/secured-clusters.md).", ""]
    return "\n".join(lines)


def _help(parser: argparse.ArgumentParser) -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def cli_page() -> str:
    """The CLI reference: ``streams --help`` and every subcommand's help, as Markdown."""
    lines = ["# CLI reference", "",
             "<!-- generated by scripts/docs_reference.py from the streams parser; do not edit -->", "",
             "The `streams` command's own help, for the command and each subcommand. Errors are one",
             "line on stderr and exit status 1 (`--debug` shows the traceback); usage errors exit 2;",
             "credentials are never printed. Settings flags are described in the",
             "[settings reference](settings.md).", ""]
    for command, parser in _parsers().items():
        title = f"streams {command}".strip()
        lines += [f"## `{title}`", "", "```text", _help(parser).rstrip(), "```", ""]
    return "\n".join(lines)


PAGES = {"reference/settings.md": settings_page, "reference/cli.md": cli_page}


def on_files(files, config):  # noqa: ANN001, ANN201 - MkDocs hook signature
    """MkDocs hook: add the generated pages to the build."""
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files


#: A Sphinx role left in rendered docstring text: ``:func:`name``` renders as ``:func:<code>name</code>``.
_SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):<code>~?")


def on_page_content(html, page, config, files):  # noqa: ANN001, ANN201 - MkDocs hook signature
    """MkDocs hook: docstrings use Sphinx roles (``:func:`x```); show the name as code, without the role."""
    return _SPHINX_ROLE.sub("<code>", html)


def _main(argv: list[str]) -> Iterator[str]:
    for name in argv or ["settings", "cli"]:
        yield PAGES[f"reference/{name}.md"]()


if __name__ == "__main__":
    for page in _main(sys.argv[1:]):
        print(page)
