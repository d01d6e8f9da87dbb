"""``streams replay late|events``: put late events back into their buckets; re-read a time range exactly.

The work is in :mod:`streams.kafka.replay`; this module parses flags, shows a progress
bar while reading (on a terminal) and prints the result.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    duration_ms,
    kafka_client_config,
    positive_int,
    print_fields,
    print_json,
    print_table,
)
from streams.core.config import TopicNames, WorkerSettings, load
from streams.core.errors import ConfigError, InvalidBucketError
from streams.core.partials import LATE_SLOT
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.kafka.admin import topic_partitions
from streams.kafka.replay import read_time_range, replay_late

NAME = "replay"
DEFAULT_TOP = 20

_EPILOG = """\
examples:
  streams replay late
  streams replay late --from-bucket 20261202T1100Z --to-bucket 20261202T1159Z --json
  streams replay late --from-bucket 2026-12-02T11:00Z --bucket-width 5m --retention 2h
  streams replay events --from 2026-12-02T11:00:00Z --to 2026-12-02T12:00:00Z --top 50
  streams replay events --from 1764673200000 --to 1764676800000 --json

'late' reads the late-events topic and writes one correction partial per (bucket,
key) into the partials topic (slot -2); stage 2 merges it into the corrected
aggregate. Running it twice writes the same corrections: it is idempotent.
'events' reads a time range of the events topic and prints the exact aggregates.
Bucket width and retention default to the worker's ($STREAMS_BUCKET_WIDTH,
$STREAMS_RETENTION, [worker] in $STREAMS_CONFIG).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``replay`` and its ``late`` and ``events`` subcommands to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="replay late events as corrections, or aggregate a time range of events exactly",
        description="Replay late events into their buckets as correction partials, or read a time range of "
                    "the events topic and print its exact per-(bucket, key) aggregates.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    actions = parser.add_subparsers(dest="replay_command", metavar="ACTION", required=True)

    late = actions.add_parser(
        "late", help="fold the late-events topic into correction partials (idempotent)",
        description="Read the late-events topic (all of it, or the buckets from --from-bucket to --to-bucket, "
                    "both included), drop repeated event IDs, and write one correction partial per "
                    f"(bucket, key) into the partials topic in slot {LATE_SLOT}. Buckets that ended more than "
                    "--retention ago are skipped: the workers no longer hold them.",
        epilog="examples:\n  streams replay late --json\n"
               "  streams replay late --from-bucket 20261202T1100Z --to-bucket 2026-12-02T11:59Z",
        formatter_class=HelpFormatter)
    add_kafka_arguments(late)
    late.add_argument("--from-bucket", metavar="LABEL|TIME",
                      help="first bucket: a label (20261202T1105Z), an ISO time or epoch ms inside it")
    late.add_argument("--to-bucket", metavar="LABEL|TIME", help="last bucket, included (same forms)")
    _add_width(late)
    late.add_argument("--retention", type=duration_ms, metavar="DURATION",
                      help="skip buckets that ended longer ago than this (default: the worker's, 1h)")
    topics = late.add_argument_group("topics")
    topics.add_argument("--late-events-topic", metavar="NAME", help=f"(default: {TopicNames().late_events})")
    topics.add_argument("--partials-topic", metavar="NAME", help=f"(default: {TopicNames().partials})")
    late.add_argument("--json", action="store_true", help="print the summary as JSON")

    events = actions.add_parser(
        "events", help="exact per-(bucket, key) aggregates of a time range of the events topic",
        description="Read the events whose record time is in [--from, --to) from the events topic (offsets "
                    "looked up by timestamp), drop repeated event IDs, and print count, sum, min and max per "
                    "(bucket, key): the reference to check the workers' aggregates against.",
        epilog="examples:\n  streams replay events --from 2026-12-02T11:00Z --to 2026-12-02T12:00Z\n"
               "  streams replay events --from 1764673200000 --to 1764676800000 --json",
        formatter_class=HelpFormatter)
    add_kafka_arguments(events)
    events.add_argument("--from", dest="start", type=instant_ms, required=True, metavar="TIME",
                        help="start, included: an ISO time (2026-12-02T11:00:00Z; no zone means UTC) or epoch ms")
    events.add_argument("--to", dest="end", type=instant_ms, required=True, metavar="TIME", help="end, excluded")
    _add_width(events)
    events.add_argument("--events-topic", metavar="NAME", help=f"(default: {TopicNames().events})")
    events.add_argument("--top", type=positive_int, default=DEFAULT_TOP, metavar="N",
                        help=f"rows to print, highest count first (default: {DEFAULT_TOP}; --json prints all)")
    events.add_argument("--json", action="store_true", help="print every aggregate as JSON")
    return parser


def _add_width(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket-width", metavar="WIDTH",
                        help="bucket width, e.g. 1m, 5m, 1h (default: the worker's, 1m)")


def instant_ms(text: str) -> int:
    """argparse type: epoch milliseconds, or an ISO 8601 time (no zone means UTC), as epoch ms."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither epoch ms nor an ISO time like "
                                         "2026-12-02T11:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    ms = round(moment.timestamp() * 1000)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return ms


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; raises StreamsError for a missing topic, an unreachable broker, bad flags."""
    return {"late": _late, "events": _events}[args.replay_command](args)


def _buckets(args: argparse.Namespace) -> TimeBuckets:
    worker = load(WorkerSettings, **({"bucket_width": args.bucket_width} if args.bucket_width else {}))
    return TimeBuckets(worker.bucket_width, worker.grace)


def _bucket_at(buckets: TimeBuckets, text: str, flag: str) -> Any:
    """The bucket named by a label, or holding an ISO time or epoch ms."""
    try:
        return buckets.parse_label(text)
    except InvalidBucketError:
        pass
    try:
        return buckets.bucket_of(instant_ms(text))
    except (argparse.ArgumentTypeError, InvalidBucketError) as exc:
        raise ConfigError(f"{flag} {text!r}: not a bucket label of this width ({buckets.width}), "
                          f"an ISO time or epoch ms ({exc})") from None


def _late(args: argparse.Namespace) -> int:
    config = kafka_client_config(args)
    names = load(TopicNames, **{role: value for role, value in (("late_events", args.late_events_topic),
                                                                ("partials", args.partials_topic)) if value})
    buckets = _buckets(args)
    retention_ms = args.retention if args.retention is not None else parse_duration(
        load(WorkerSettings).retention, "retention")
    first = _bucket_at(buckets, args.from_bucket, "--from-bucket") if args.from_bucket else None
    last = _bucket_at(buckets, args.to_bucket, "--to-bucket") if args.to_bucket else None
    if first is not None and last is not None and last.start_ms < first.start_ms:
        raise ConfigError(f"--to-bucket {last.label} is before --from-bucket {first.label}")
    for topic in (names.late_events, names.partials):  # fail fast, and never let a produce auto-create
        topic_partitions(config, topic, timeout_s=args.timeout)
    with _read_progress(f"reading {names.late_events}") as progress:
        summary = replay_late(config, names.late_events, names.partials, buckets, retention_ms,
                              from_bucket_ms=first.start_ms if first else None,
                              to_bucket_ms=last.end_ms if last else None, progress=progress)
    outside = summary.read - summary.replayed - summary.duplicates - summary.too_old - summary.failed
    if args.json:
        print_json({
            "late_events_topic": names.late_events, "partials_topic": names.partials,
            "bucket_width": buckets.width, "retention_ms": retention_ms,
            "from_bucket": first.label if first else None, "to_bucket": last.label if last else None,
            "read": summary.read, "replayed": summary.replayed, "duplicates": summary.duplicates,
            "too_old": summary.too_old, "failed": summary.failed, "outside_range": outside,
            "corrections": summary.corrections, "buckets": list(summary.buckets),
        })
        return 0
    buckets_text = ", ".join(summary.buckets) if len(summary.buckets) <= 6 else (
        f"{len(summary.buckets)}: {summary.buckets[0]} .. {summary.buckets[-1]}")
    print_fields("replayed late events", [
        ("from", names.late_events),
        ("into", f"{names.partials} (slot {LATE_SLOT})"),
        ("buckets", f"{first.label if first else 'first'} .. {last.label if last else 'last'}, "
                    f"{buckets.width} wide"),
        ("read", summary.read),
        ("replayed", summary.replayed),
        ("duplicates skipped", summary.duplicates),
        ("too old for retention", summary.too_old),
        ("failed (undecodable)", summary.failed),
    ] + ([("outside the buckets", outside)] if first or last else []) + [
        ("corrections written", summary.corrections),
        ("corrected buckets", buckets_text or "-"),
    ])
    return 0


def _events(args: argparse.Namespace) -> int:
    if args.end <= args.start:
        raise ConfigError(f"--to ({args.end}) must be after --from ({args.start})")
    config = kafka_client_config(args)
    topic = args.events_topic or load(TopicNames).events
    buckets = _buckets(args)
    topic_partitions(config, topic, timeout_s=args.timeout)
    with _read_progress(f"reading {topic}") as progress:
        aggregates = read_time_range(config, topic, buckets, args.start, args.end, progress=progress)
    rows = [{"bucket": bucket, "key": key, "count": s.count, "measured": s.measured, "sum": s.sum,
             "min": s.min, "max": s.max} for (bucket, key), s in sorted(aggregates.items())]
    events = sum(r["count"] for r in rows)
    if args.json:
        print_json({"topic": topic, "from_ms": args.start, "to_ms": args.end, "bucket_width": buckets.width,
                    "events": events, "groups": len(rows), "aggregates": rows})
        return 0
    print_fields("events in range", [
        ("topic", topic),
        ("from", f"{_iso(args.start)} ({args.start})"),
        ("to", f"{_iso(args.end)} ({args.end}, excluded)"),
        ("buckets", f"{buckets.width} wide, {len({r['bucket'] for r in rows})} with events"),
        ("events", events),
        ("(bucket, key) groups", len(rows)),
    ])
    top = sorted(rows, key=lambda r: (-r["count"], r["bucket"], r["key"]))[:args.top]
    note = f"top {len(top)} of {len(rows)} by count; --json for all" if len(top) < len(rows) else ""
    print_table("aggregates per (bucket, key)", ["bucket", "key", "count", "sum", "min", "max"],
                [(r["bucket"], r["key"], r["count"], r["sum"], r["min"], r["max"]) for r in top], note=note)
    return 0


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@contextmanager
def _read_progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback for :mod:`streams.kafka.replay` (records read, of total): a rich bar on stderr
    when stderr is a terminal, else a no-op."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("read", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
