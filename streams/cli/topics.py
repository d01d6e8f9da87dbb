"""``streams topics create|describe|roll|grow``: the project's topics, topic-per-bucket housekeeping, growth.

The work is in :mod:`streams.kafka.admin` and :mod:`streams.kafka.maps`, the
arithmetic of a grow in :mod:`streams.core.routing.growth`; this module parses flags,
reads the clock and prints. ``roll`` exits 1 when it kept an expired topic that was
not safe to delete (after doing everything else; 0 with ``--dry-run``), so a cron job
notices a worker that falls behind. ``grow`` prints its plan, then (unless
``--dry-run``) publishes routing map v1 from the settings if the routing-maps topic is
empty, adds the partitions (stage-1 changelog first) and publishes the new map; a
run stopped half-way can be run again with the same count (topics already at the
count are left alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import orjson

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    duration_ms,
    kafka_client_config,
    positive_int,
    print_json,
    print_table,
)
from streams.cli.options import add_setting_flags, resolve_settings
from streams.cli.replay import instant_ms
from streams.core.config import ProducerSettings, TopicNames, WorkerSettings, load
from streams.core.errors import ConfigError, HotKeyNoticeError, RoutingMapError
from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.growth import SYNTHETIC_KEYS, GrowthPlan, plan_growth, sketch_weights
from streams.core.routing.router import BUCKET_PLACEHOLDER, RoutingMap
from streams.core.simulate import read_keys
from streams.core.time.buckets import TimeBuckets
from streams.core.validate import require_duration
from streams.kafka.admin import (
    RollResult,
    TopicInfo,
    TopicNotFoundError,
    add_partitions,
    describe_topics,
    ensure_topics,
    list_topic_names,
    project_topic_specs,
    roll_bucket_topics,
)
from streams.kafka.maps import publish_map, read_maps
from streams.kafka.replay import read_topic

NAME = "topics"
_ROLES = tuple(f.name for f in dataclasses.fields(TopicNames))

_EPILOG = """\
examples:
  streams topics create --partitions 12 --retention 7d
  streams topics describe --json
  streams topics describe some-topic other-topic
  streams topics roll --template 'events.{bucket}' --bucket-width 1h --ahead 2 --retention 1d --dry-run
  streams topics grow --partitions 16 --dry-run

Topic names come from the settings: --<role>-topic, else $STREAMS_<ROLE>_TOPIC, else
[topics] <role>_topic in the --config file, else the defaults. hot-keys, aggregates
and routing-maps are compacted; the others use the delete policy.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``topics`` and its ``create``, ``describe``, ``roll`` and ``grow`` subcommands to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="create, describe, roll and grow the project's topics",
        description="Create the project's topics with the right configs, describe them, roll "
                    "topic-per-bucket topics (create ahead, delete expired ones once consumed), or grow the "
                    "events topic under a new routing map.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    actions = parser.add_subparsers(dest="topics_command", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create", help="create the project's topics that do not exist yet",
        description="Create the project's topics that do not exist yet; existing ones are left as they are.",
        epilog="example:\n  streams topics create --partitions 24 --retention 3d --events-topic my.events",
        formatter_class=HelpFormatter)
    add_kafka_arguments(create)
    create.add_argument("--partitions", type=positive_int, metavar="N",
                        help="partitions of data topics (default: 12, or $STREAMS_PARTITIONS)")
    create.add_argument("--control-partitions", type=positive_int, default=1, metavar="N",
                        help="partitions of control topics: sketches, hot-keys, bucket-closed, "
                             "dead-letters (default: 1)")
    create.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                        help="replicas per partition (default: -1, the broker's default)")
    create.add_argument("--retention", type=duration_ms, metavar="DURATION",
                        help="retention.ms of delete-policy topics, e.g. 7d (default: the broker's)")
    _add_name_arguments(create)
    create.add_argument("--json", action="store_true", help="print the result as JSON")

    describe = actions.add_parser(
        "describe", help="show partitions, cleanup.policy and retention of topics",
        description="Show partitions, replication, cleanup.policy and retention of the project's topics, "
                    "or of the topics named.",
        epilog="examples:\n  streams topics describe\n  streams topics describe my.events --json",
        formatter_class=HelpFormatter)
    add_kafka_arguments(describe)
    describe.add_argument("names", nargs="*", metavar="TOPIC", help="topics to describe (default: the project's)")
    _add_name_arguments(describe)
    describe.add_argument("--json", action="store_true", help="print the result as JSON")

    roll = actions.add_parser(
        "roll", help="create the next bucket topics and delete expired ones",
        description="One step of the bucket roller for topic-per-bucket mode: create the topics of the "
                    "current bucket and the next --ahead, delete those whose bucket ended more than "
                    "--retention ago, but only once the bucket is closed (end + --grace) and the worker group "
                    "has consumed every partition to its end; a topic kept for either reason is listed with "
                    "the reason, and roll then exits with status 1 after doing the rest (with --dry-run: 0). "
                    "Only topics matching the template exactly are touched.",
        epilog="example:\n  streams topics roll --template 'events.{bucket}' --bucket-width 5m --ahead 3 "
               "--retention 2h --dry-run",
        formatter_class=HelpFormatter)
    add_kafka_arguments(roll)
    roll.add_argument("--template", metavar="TEMPLATE",
                      help="topic template holding {bucket} (default: the events topic, if it holds one)")
    roll.add_argument("--bucket-width", metavar="WIDTH", help="bucket width, e.g. 1m, 1h, 1d (default: 1m)")
    roll.add_argument("--ahead", type=int, default=2, metavar="N",
                      help="bucket topics to create beyond the current one (default: 2)")
    roll.add_argument("--retention", type=duration_ms, metavar="DURATION",
                      help="delete a bucket's topic this long after the bucket ends (default: 1h)")
    roll.add_argument("--partitions", type=positive_int, metavar="N", help="partitions of new topics (default: 12)")
    roll.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                      help="replicas per partition (default: -1, the broker's default)")
    roll.add_argument("--grace", type=duration_ms, metavar="DURATION",
                      help="a bucket closes this long after it ends; its topic is never deleted before (default: "
                           "the worker's grace, 10s)")
    roll.add_argument("--group", metavar="GROUP",
                      help="consumer group that must have consumed a topic to its end before it is deleted "
                           "(default: stage 1's group, <app_id>-events: streams-worker-events)")
    roll.add_argument("--now", type=instant_ms, metavar="TIME",
                      help="plan as if the clock read TIME: epoch ms or ISO 8601, e.g. 2026-12-02T11:00:00Z "
                           "(default: now)")
    roll.add_argument("--dry-run", action="store_true", help="list what would be created and deleted; change nothing")
    roll.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_name_arguments(roll, ("events", "routing_maps"))
    _add_grow_parser(actions)
    return parser


def _add_grow_parser(actions: argparse._SubParsersAction) -> None:
    grow = actions.add_parser(
        "grow", help="add partitions to the events topic and switch the routing map at a later bucket",
        description="Grow a keyed events topic without a reshuffle: add partitions to the events topic and to "
                    "the worker's stage-1 changelog (one request, changelog first), then publish routing map "
                    "version + 1 with the new count, in force from the first bucket starting at or after now + "
                    "--lead. With a topic template ({bucket}) the map and the changelog change: 'topics roll' creates later "
                    "bucket topics with the new count. The routing-maps topic starts with version 1 from the "
                    "settings if it is empty. Refused: a count that is not above the current one; 'mod' placement "
                    "without --allow-reshuffle (it moves about 1 - gcd(n, m)/m of the keys, 'jump' 1 - n/m). "
                    "--dry-run prints the plan and changes nothing (exit 0; the plan says if the real run "
                    "would be refused).",
        epilog="examples:\n  streams topics grow --partitions 16 --dry-run\n"
               "  streams topics grow --partitions 16 --keys keys.txt --lead 5m",
        formatter_class=HelpFormatter)
    add_kafka_arguments(grow)
    grow.add_argument("--partitions", type=positive_int, required=True, metavar="N",
                      help="the new partition count (more than the current one)")
    grow.add_argument("--lead", type=duration_ms, metavar="DURATION",
                      help="the new map applies from the first bucket starting at least this long from now "
                           "(default: one bucket width + grace; at least grace + 1s)")
    grow.add_argument("--bucket-width", metavar="WIDTH", help="the producers' bucket width (default: 1m)")
    grow.add_argument("--keys", metavar="FILE",
                      help="a key sample, one key per line (repeats weigh the traffic figure); default: the heavy "
                           "keys of the latest hot-key sketches, else a synthetic uniform sample")
    grow.add_argument("--allow-reshuffle", action="store_true",
                      help="grow a 'mod' placement anyway (most keys move partition, and their state with them)")
    grow.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    grow.add_argument("--json", action="store_true", help="print the plan as JSON")
    _add_name_arguments(grow, ("events", "routing_maps", "sketches"))


def _add_name_arguments(parser: argparse.ArgumentParser, roles: tuple[str, ...] = _ROLES) -> None:
    add_setting_flags(parser.add_argument_group("topic names (default: from the settings)"), TopicNames, roles)


def _names(args: argparse.Namespace) -> TopicNames:
    return resolve_settings(args, TopicNames).settings  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; raises TopicAdminError / ConfigError for what goes wrong."""
    return {"create": _create, "describe": _describe, "roll": _roll, "grow": _grow}[args.topics_command](args)


def _create(args: argparse.Namespace) -> int:
    names = _names(args)
    partitions = args.partitions or load(ProducerSettings).partitions
    specs = project_topic_specs(names, partitions=partitions, control_partitions=args.control_partitions,
                                replication_factor=args.replication_factor, retention_ms=args.retention)
    templates = [getattr(names, r) for r in _ROLES if BUCKET_PLACEHOLDER in getattr(names, r)]
    results = ensure_topics(kafka_client_config(args), specs, timeout_s=args.timeout)
    if args.json:
        print_json({
            "topics": [{"name": s.name, "role": s.role, "created": r.created, "partitions": r.partitions,
                        "config": dict(s.config)} for s, r in zip(specs, results)],
            "skipped_templates": templates,
        })
        return 0
    rows = [(s.name, s.role, r.partitions, s.config["cleanup.policy"], "created" if r.created else "exists")
            for s, r in zip(specs, results)]
    note = (f"templates are created bucket by bucket with 'streams topics roll': {', '.join(templates)}"
            if templates else "")
    print_table("topics", ["topic", "role", "partitions", "cleanup.policy", "result"], rows, note=note)
    return 0


def _describe(args: argparse.Namespace) -> int:
    if args.names:
        wanted: dict[str, str] = dict.fromkeys(args.names, "")
    else:
        names = _names(args)
        wanted = {getattr(names, r): r for r in _ROLES if BUCKET_PLACEHOLDER not in getattr(names, r)}
    infos = describe_topics(kafka_client_config(args), wanted, timeout_s=args.timeout)
    if args.json:
        print_json({"topics": [info.to_record() for info in infos]})
        return 0
    rows = [(i.name, i.role or "-", "yes" if i.exists else "no", i.partitions, i.replication_factor,
             i.cleanup_policy, _human_ms(i.retention_ms)) for i in infos]
    print_table("topics", ["topic", "role", "exists", "partitions", "replicas", "cleanup.policy", "retention"], rows)
    return 0


def _roll(args: argparse.Namespace) -> int:
    names = _names(args)
    template = args.template or names.events
    if BUCKET_PLACEHOLDER not in template:
        raise ConfigError(f"give --template: the events topic {template!r} holds no {BUCKET_PLACEHOLDER}")
    settings = load(ProducerSettings, **_width(args))
    worker = load(WorkerSettings)
    buckets = TimeBuckets(settings.bucket_width, grace=worker.grace if args.grace is None else args.grace)
    retention_ms = args.retention
    if retention_ms is None:
        retention_ms = require_duration("retention (from the worker settings)", worker.retention)
    group = args.group or worker.events_group
    config = kafka_client_config(args)
    result = roll_bucket_topics(config, template, buckets, ahead=args.ahead, retention_ms=retention_ms,
                                partitions=args.partitions or settings.partitions,
                                maps=_history(config, names.routing_maps, buckets, args.timeout, missing_ok=True),
                                group=group, replication_factor=args.replication_factor, now_ms=args.now,
                                dry_run=args.dry_run, timeout_s=args.timeout)
    refused = result.plan.refused
    if args.json:
        record: dict[str, Any] = result.to_record()
        record.update(bucket_width=settings.bucket_width, retention_ms=retention_ms, grace_ms=buckets.grace_ms,
                      ahead=args.ahead)
        print_json(record)
    else:
        _print_roll(args, result, f"roll {template} ({settings.bucket_width} buckets, {args.ahead} ahead, "
                                  f"retention {_human_ms(retention_ms)}, grace {_human_ms(buckets.grace_ms)})")
    if refused and not args.dry_run:
        print(f"streams: error: refused to delete {len(refused)} expired topic(s) that are not safe to delete yet: "
              + "; ".join(f"{r.topic}: {', '.join(r.reasons)}" for r in refused), file=sys.stderr)
        return 1
    return 0


def _print_roll(args: argparse.Namespace, result: RollResult, title: str) -> None:
    parts = result.partitions
    if args.dry_run:
        rows = [(name, f"would create ({parts[name]} partitions)") for name in result.plan.create]
        rows += [(name, "would delete") for name in result.plan.delete]
    else:
        rows = [(name, f"created ({parts[name]} partitions)" if name in result.created else "already there")
                for name in result.plan.create]
        rows += [(name, "deleted" if name in result.deleted else "already gone") for name in result.plan.delete]
    rows += [(r.topic, "kept: " + "; ".join(r.reasons)) for r in result.plan.refused]
    if rows:
        print_table(title + (" - dry run" if args.dry_run else ""), ["topic", "action"], rows)
    else:
        print(f"{title}: nothing to do\n")


def _human_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 0:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


# --- grow -------------------------------------------------------------------------------------------

#: How far back grow looks for hot-key sketch summaries.
SKETCH_LOOKBACK_MS = 300_000


def _history(config: dict[str, Any], topic: str, buckets: TimeBuckets, timeout_s: float, *,
             missing_ok: bool = False) -> list[RoutingMap]:
    try:
        return read_maps(config, topic, timeout_s=timeout_s, bucket_width_ms=buckets.width_ms)
    except TopicNotFoundError:
        if missing_ok:
            return []
        raise TopicNotFoundError(f"the routing-maps topic {topic!r} does not exist: create it with "
                                 "'streams topics create'") from None


def _grow(args: argparse.Namespace) -> int:
    names, producer, worker = _names(args), load(ProducerSettings, **_width(args)), load(WorkerSettings)
    config, buckets = kafka_client_config(args), TimeBuckets(producer.bucket_width, grace=producer.grace)
    per_bucket = BUCKET_PLACEHOLDER in names.events
    changelog = worker.stage1_changelog
    history = _history(config, names.routing_maps, buckets, args.timeout)
    # Stage 1 writes each change to the changelog partition of its source partition, so the
    # changelog grows with the events topic, and with a template ahead of the bucket topics to come.
    infos = {i.name: i for i in describe_topics(config, [changelog] if per_bucket else [changelog, names.events],
                                                timeout_s=args.timeout)}
    if not per_bucket and not infos[names.events].exists:
        raise TopicNotFoundError(f"the events topic {names.events!r} does not exist")
    topic_count = producer.partitions if per_bucket else infos[names.events].partitions
    current = max(history, key=lambda m: m.version) if history else RoutingMap(
        version=1, partitions=topic_count, topic=names.events, placement=producer.placement, hash=producer.hash)
    now = int(time.time() * 1000)
    keys, weights, other, sources = _samples(args, config, names.sketches, now)
    plan = plan_growth(current, args.partitions, now_ms=now, buckets=buckets, lead_ms=args.lead, keys=keys,
                       weights=weights, other_weight=other)
    if not per_bucket and topic_count > args.partitions:
        raise RoutingMapError(f"cannot grow {names.events!r} to {args.partitions} partitions: it has {topic_count} "
                              "already, and Kafka cannot remove partitions")
    grown = {name: max(args.partitions, info.partitions or 0) for name, info in infos.items() if info.exists}
    refusal = None
    if current.placement == "mod" and not args.allow_reshuffle:
        refusal = (f"refusing to grow {current.topic!r}: placement 'mod' moves about {plan.expected_fraction:.0%} "
                   f"of the keys from {current.partitions} to {args.partitions} partitions ({plan.key_fraction:.1%} "
                   "of the sample), and their state with them; give --allow-reshuffle to do it anyway")
    if not args.dry_run and refusal is None:
        if not history:
            publish_map(config, names.routing_maps, current, events_partitions=None if per_bucket else topic_count,
                        bucket_width_ms=buckets.width_ms, now_ms=now, timeout_s=args.timeout)
        if grown:
            add_partitions(config, grown, timeout_s=args.timeout)
        publish_map(config, names.routing_maps, plan.new, events_partitions=None if per_bucket else args.partitions,
                    bucket_width_ms=buckets.width_ms, timeout_s=args.timeout)
    notes = [f"{changelog} does not exist: skipped" if changelog not in grown else "",
             "a topic template: the existing bucket topics keep their count ('topics roll' creates later ones with "
             f"{args.partitions} partitions)" if per_bucket else "",
             "" if history else "the routing-maps topic was empty: v1 comes from the settings"]
    _print_grow(args, plan, infos, grown, sources, [n for n in notes if n], refusal, buckets, now)
    if refusal is not None and not args.dry_run:
        print(f"streams: error: {refusal}", file=sys.stderr)
        return 1
    return 0


def _width(args: argparse.Namespace) -> dict[str, str]:
    return {"bucket_width": args.bucket_width} if args.bucket_width else {}


def _samples(args: argparse.Namespace, config: dict[str, Any], sketches: str, now_ms: int
             ) -> tuple[list[str] | None, dict[str, float] | None, float, tuple[str, str]]:
    """The key sample, the traffic weights, the unexplained rate, and where the key and traffic figures come from."""
    if args.keys:
        found = read_keys(args.keys)
        counts = Counter(found.keys)
        return (list(counts), dict(counts), 0.0,
                (f"keys file {found.source} ({len(counts):,} distinct keys)", "occurrences in the keys file"))
    # Look before reading: asking for one missing topic's metadata may make the broker create it.
    records = (read_topic(config, sketches, start_ms=now_ms - SKETCH_LOOKBACK_MS, timeout_s=args.timeout)
               if sketches in list_topic_names(config, timeout_s=args.timeout) else [])
    summaries = []
    for msg in records:
        try:
            summaries.append(SketchSummary.from_record(orjson.loads(msg.value())))
        except (orjson.JSONDecodeError, HotKeyNoticeError, TypeError, ValueError):
            continue  # not a summary: the decider skips it too
    rates, rest = sketch_weights(summaries)
    if not rates:
        return None, None, 0.0, (f"synthetic uniform sample of {SYNTHETIC_KEYS:,} keys",
                                 f"no producer traffic known: no worker published a hot-key sketch on {sketches!r} "
                                 "in the last 5 minutes (give --keys FILE to weigh a sample of your keys)")
    return (list(rates), rates, rest,
            (f"heavy keys of the latest hot-key sketches ({len(rates):,} keys)",
             f"hot-key sketch rates ({sum(rates.values()) + rest:,.0f} events/s; the rate of unlisted keys "
             "counted at the uniform expectation)"))


def _print_grow(args: argparse.Namespace, plan: GrowthPlan, infos: dict[str, TopicInfo], grown: dict[str, int],
                sources: tuple[str, str], notes: list[str], refusal: str | None, buckets: TimeBuckets,
                now_ms: int) -> None:
    current, new = plan.current, plan.new
    topics = [(name, infos[name].partitions, total) for name, total in grown.items()]
    now = buckets.bucket_of(now_ms)
    since = (f"{_utc(current.first_bucket_ms)}" if current.first_bucket_ms else
             f"always (no map published: v{current.version} from the settings)")
    if args.json:
        print_json({"dry_run": args.dry_run, "refused": refusal, "current": current.to_record(), "new": new.to_record(),
                    "effective_bucket": plan.effective_label, "effective_ms": new.first_bucket_ms,
                    "lead_ms": plan.lead_ms, "sampled_keys": plan.sampled_keys, "moved_keys": plan.moved_keys,
                    "key_fraction": plan.key_fraction, "key_source": sources[0],
                    "traffic_fraction": plan.traffic_fraction, "traffic_source": sources[1],
                    "expected_fraction": plan.expected_fraction, "now_bucket": now.label, "now_ms": now_ms,
                    "would_be_refused": refusal is not None,
                    "topics": [{"name": n, "partitions": old, "new_partitions": total} for n, old, total in topics],
                    "notes": notes})
        return
    traffic = sources[1] if plan.traffic_fraction is None else f"{plan.traffic_fraction:.1%} ({sources[1]})"
    rows = [("routing map", f"v{current.version}", f"v{new.version}"),
            ("partitions", current.partitions, new.partitions),
            ("placement/hash", f"{current.placement}/{current.hash}", f"{new.placement}/{new.hash}"),
            ("bucket now", f"{now.label} ({_utc(now.start_ms)})", ""),
            ("first bucket", since, f"{plan.effective_label} ({_utc(new.first_bucket_ms)}, "
                                    f"lead {_human_ms(plan.lead_ms)})"),
            *[(f"topic {name}", old, total) for name, old, total in topics],
            ("keys moved", "", f"{plan.key_fraction:.1%} ({plan.moved_keys:,} of {plan.sampled_keys:,}: "
                               f"{sources[0]})"),
            ("traffic moved", "", traffic),
            ("uniform expectation", "", f"{plan.expected_fraction:.1%} of keys move")]
    title = f"grow {current.topic} from {current.partitions} to {new.partitions} partitions"
    status = " - dry run" if args.dry_run else " - refused" if refusal else ""
    if args.dry_run and refusal:
        notes = [f"a real run would be refused: {refusal}", *notes]
    print_table(title + status, ["", "current", "new"], rows, note="\n".join(notes))


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
