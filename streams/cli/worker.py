"""``streams worker``: start a faust worker of :mod:`streams.app`, configured by flags.

The same as ``faust -A streams.app worker -l info --without-web`` with the settings
in ``STREAMS_*`` variables: each flag sets its variable (``--partitions 24`` sets
``STREAMS_PARTITIONS=24``, ``--balance-enabled false`` or ``--no-balance`` sets
``STREAMS_BALANCE_ENABLED=false``), the settings are validated here, the cluster is
checked once, and then this process *becomes* the faust worker (``os.execve`` of the
``faust`` script next to this Python): signals (Ctrl-C, SIGTERM from a supervisor)
reach faust directly and its exit status is the command's. ``--dry-run`` prints
every setting with where its value came from (flag, env, file, default).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    kafka_client_config,
    kafka_resolved,
    print_json,
)
from streams.cli.options import add_setting_flags, flag_values, resolve_settings
from streams.core.config import (
    KafkaSettings,
    Resolved,
    TopicNames,
    WorkerSettings,
    env_var,
    load,
    scrub,
    setting_name,
)
from streams.core.errors import StreamsError
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.kafka.admin import TopicNotFoundError, topic_partitions

NAME = "worker"
_WORKER_FIELDS = frozenset(f.name for f in dataclasses.fields(WorkerSettings))
APP = "streams.app"
LOGLEVELS = ("crit", "error", "warn", "info", "debug")
_DURATIONS = ("allowed_delay", "idle_timeout", "retention")

_EPILOG = """\
examples:
  streams worker
  streams worker --bootstrap-server broker:9092 --partitions 24 --bucket-width 5m --grace 30s --metrics-port 9108
  streams worker --app-id streams-eu --events-topic eu.events -l debug
  streams worker --dry-run --partitions 4          # print the environment and command, start nothing
  streams worker -- --blocking-timeout 5           # anything after -- goes to 'faust worker'

  streams worker --dry-run --balance-enabled false --dedup-ids no   # booleans: true/false, yes/no, 1/0, on/off
  streams worker --no-balance --no-balance-moves

Each setting flag sets the STREAMS_<NAME> variable the app reads (--balance-target is
STREAMS_BALANCE_TARGET, --events-topic is STREAMS_EVENTS_TOPIC); settings not given
come from the environment, then from the TOML file in --config / $STREAMS_CONFIG,
then the defaults. --dry-run shows each value and where it came from. Run one worker
per process; start more (anywhere) with the same --app-id to share the partitions.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``worker`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="start a faust worker (stage-1 and stage-2 aggregation, hot-key decider)",
        description="Start a faust worker of streams.app: it creates the project's topics if missing, "
                    "aggregates events per (bucket, key), routes late events and dead letters, merges "
                    "partials exactly, and decides hot keys. Runs until Ctrl-C or SIGTERM.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_kafka_arguments(parser)
    if "instance" not in _WORKER_FIELDS:  # a setting once WorkerSettings has it: its flag comes from there
        parser.add_argument("--instance", metavar="NAME",
                            help="this worker's name in hot-key sketches ($STREAMS_INSTANCE; default: host-pid-random)")
    add_setting_flags(parser.add_argument_group("worker settings (WorkerSettings)"), WorkerSettings)
    add_setting_flags(parser.add_argument_group("topic names (TopicNames)"), TopicNames)
    faust = parser.add_argument_group("faust")
    faust.add_argument("-l", "--loglevel", choices=LOGLEVELS, default="info", help="log level (default: info)")
    faust.add_argument("-f", "--logfile", metavar="FILE", help="log to this file (default: stderr)")
    faust.add_argument("-D", "--datadir", metavar="DIR", help="faust's data directory (default: <app-id>-data)")
    faust.add_argument("--web-port", type=int, metavar="PORT",
                       help="serve faust's web views on this port (default: no web server)")
    faust.add_argument("--dry-run", action="store_true",
                       help="print every setting with its source, the environment and the faust command; "
                            "start nothing")
    faust.add_argument("--json", action="store_true", help="with --dry-run: print them as JSON")
    faust.add_argument("faust_args", nargs=argparse.REMAINDER, metavar="-- FAUST_ARGS",
                       help="more 'faust worker' options, after --")
    return parser


def run(args: argparse.Namespace) -> int:
    """Validate, check the cluster, then exec faust (never returns unless --dry-run).

    Raises ConfigError / InvalidBucketError for a bad setting, StreamsError for an
    unreachable cluster, OSError if faust cannot be started.
    """
    env = environment(args)
    command = faust_command(args)
    if args.dry_run:
        # What the worker will run with: the STREAMS_* variables it inherits plus those the flags set.
        seen = {k: v for k, v in os.environ.items() if k.startswith("STREAMS_")} | env
        shown = {k: scrub(v) for k, v in sorted(seen.items())}  # no credential, whatever variable carries it
        settings = {section: scrub_record(resolved.to_record(cls))
                    for section, cls, resolved in resolved_settings(args, seen)}
        if args.json:
            print_json({"settings": settings, "env": shown, "command": [scrub(c) for c in command]})
        else:
            for section, record in settings.items():
                print(f"[{section}]")
                for name, entry in record.items():
                    where = entry["source"] + (f" {entry['from']}" if entry["from"] else "")
                    print(f"  {name} = {entry['value']!r}  ({where})")
            print(scrub(" ".join([f"{k}={shlex.quote(v)}" for k, v in shown.items()]
                                 + [shlex.quote(c) for c in command])))
        return 0
    os.environ.update(env)  # what the worker will see: check the cluster with exactly that
    try:
        topic_partitions(kafka_client_config(args), load(TopicNames).events, timeout_s=args.timeout)
    except TopicNotFoundError:
        pass  # the worker creates the project's topics
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached


def environment(args: argparse.Namespace) -> dict[str, str]:
    """The ``STREAMS_*`` variables the flags set, after checking the settings they make.

    Raises ConfigError or InvalidBucketError naming the first bad setting.
    """
    env: dict[str, str] = {}
    if args.bootstrap_server:
        env[env_var("bootstrap_servers")] = args.bootstrap_server
    if getattr(args, "config", None):  # main() has put it in os.environ too, which faust inherits
        env["STREAMS_CONFIG"] = args.config
    if getattr(args, "instance", None):
        env["STREAMS_INSTANCE"] = args.instance
    for cls in (WorkerSettings, TopicNames):
        for field, value in flag_values(args, cls).items():
            env[env_var(setting_name(cls, field))] = str(value).lower() if isinstance(value, bool) else str(value)
    merged = {**os.environ, **env}
    settings = {cls: resolved.settings for _, cls, resolved in resolved_settings(args, merged)}[WorkerSettings]
    TimeBuckets(settings.bucket_width, settings.grace)
    for name in _DURATIONS:
        parse_duration(getattr(settings, name), name)
    return env


def resolved_settings(args: argparse.Namespace, env: dict[str, str]) -> list[tuple[str, type, Resolved]]:
    """The worker's settings (kafka, topics, worker) from the file, ``env`` and the flags, with their sources."""
    return [("kafka", KafkaSettings, kafka_resolved(args, env)),
            ("topics", TopicNames, resolve_settings(args, TopicNames, env)),
            ("worker", WorkerSettings, resolve_settings(args, WorkerSettings, env))]


def scrub_record(record: dict[str, Any]) -> dict[str, Any]:
    """A settings record with every remembered credential scrubbed from its text."""
    return {name: {k: scrub(v) if isinstance(v, str) else v for k, v in entry.items()}
            for name, entry in record.items()}


def faust_command(args: argparse.Namespace) -> list[str]:
    """``[faust, -A, streams.app, worker, ...]``: the faust script of this Python's environment."""
    faust = Path(sys.executable).parent / "faust"
    if not faust.exists():
        found = shutil.which("faust")
        if found is None:
            raise StreamsError(f"cannot find the faust command (not at {faust}, not on PATH): "
                               "install faust-streaming in this environment")
        faust = Path(found)
    command = [str(faust), "-A", APP]
    if args.datadir:
        command += ["--datadir", args.datadir]
    command += ["worker", "--loglevel", args.loglevel]
    if args.logfile:
        command += ["--logfile", args.logfile]
    command += ["--with-web", "--web-port", str(args.web_port)] if args.web_port else ["--without-web"]
    extra: list[Any] = list(args.faust_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return command + [str(a) for a in extra]
