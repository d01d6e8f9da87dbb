"""``streams topics create|describe|roll``: the project's topics, and topic-per-bucket housekeeping.

The work is in :mod:`streams.kafka.admin`; this module parses flags and prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    duration_ms,
    kafka_client_config,
    positive_int,
    print_json,
    print_table,
)
from streams.cli.replay import instant_ms
from streams.core.config import ProducerSettings, TopicNames, WorkerSettings, load
from streams.core.errors import ConfigError
from streams.core.routing.router import BUCKET_PLACEHOLDER
from streams.core.time.buckets import TimeBuckets
from streams.core.validate import require_duration
from streams.kafka.admin import (
    RollResult,
    describe_topics,
    ensure_topics,
    project_topic_specs,
    roll_bucket_topics,
)

NAME = "topics"
_ROLES = tuple(f.name for f in dataclasses.fields(TopicNames))

_EPILOG = """\
examples:
  streams topics create --partitions 12 --retention 7d
  streams topics describe --json
  streams topics describe some-topic other-topic
  streams topics roll --template 'events.{bucket}' --bucket-width 1h --ahead 2 --retention 1d --dry-run

Topic names come from the configuration (TopicNames: $STREAMS_<ROLE>, [topics] in
$STREAMS_CONFIG) unless given with --<role>-topic. hot-keys and aggregates
are compacted; the others use the delete policy.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``topics`` and its ``create``, ``describe`` and ``roll`` subcommands to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="create, describe and roll the project's topics",
        description="Create the project's topics with the right configs, describe them, or roll "
                    "topic-per-bucket topics (create ahead, delete expired).",
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
                           "(default: the worker's app_id, streams-worker)")
    roll.add_argument("--now", type=instant_ms, metavar="TIME",
                      help="plan as if the clock read TIME: epoch ms or ISO 8601, e.g. 2026-12-02T11:00:00Z "
                           "(default: now)")
    roll.add_argument("--dry-run", action="store_true", help="list what would be created and deleted; change nothing")
    roll.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _add_name_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("topic names (default: from the configuration)")
    defaults = TopicNames()
    for role in _ROLES:
        group.add_argument(f"--{role.replace('_', '-')}-topic", dest=f"topic_{role}", metavar="NAME",
                           help=f"(default: {getattr(defaults, role)})")


def _names(args: argparse.Namespace) -> TopicNames:
    given = {role: getattr(args, f"topic_{role}") for role in _ROLES if getattr(args, f"topic_{role}") is not None}
    return load(TopicNames, **given)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; raises TopicAdminError / ConfigError for what goes wrong."""
    return {"create": _create, "describe": _describe, "roll": _roll}[args.topics_command](args)


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
    template = args.template or load(TopicNames).events
    if BUCKET_PLACEHOLDER not in template:
        raise ConfigError(f"give --template: the events topic {template!r} holds no {BUCKET_PLACEHOLDER}")
    settings = load(ProducerSettings, **({"bucket_width": args.bucket_width} if args.bucket_width else {}))
    worker = load(WorkerSettings)
    buckets = TimeBuckets(settings.bucket_width, grace=worker.grace if args.grace is None else args.grace)
    retention_ms = args.retention
    if retention_ms is None:
        retention_ms = require_duration("retention (from the worker settings)", worker.retention)
    group = args.group or worker.app_id
    result = roll_bucket_topics(kafka_client_config(args), template, buckets, ahead=args.ahead,
                                retention_ms=retention_ms, partitions=args.partitions or settings.partitions,
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
