"""``streams inspect-id``: take a UUIDv7 or Snowflake ID apart, and name its time bucket."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone
from typing import Any

from streams.cli import HelpFormatter, print_fields, print_json
from streams.cli.options import add_setting_flags, resolve_settings
from streams.core.config import WorkerSettings
from streams.core.ids import (
    DISCORD_LAYOUT,
    SONYFLAKE_LAYOUT,
    TWITTER_LAYOUT,
    IdKind,
    parse_id,
)
from streams.core.time.buckets import TimeBuckets

NAME = "inspect-id"

LAYOUTS = {"twitter": TWITTER_LAYOUT, "discord": DISCORD_LAYOUT, "sonyflake": SONYFLAKE_LAYOUT}

_EPILOG = """\
examples:
  streams inspect-id 017F22E2-79B0-7CC3-98C4-DC0C0C07398F
  streams inspect-id 175928847299117063 --layout discord --bucket-width 1h
  streams inspect-id 1541815603606036480 --json

A UUID is accepted in any spelling (upper/lower case, with or without hyphens,
braces, urn:uuid:); a Snowflake as decimal digits, read with --layout. The bucket
width is the workers' setting: --bucket-width, else $STREAMS_BUCKET_WIDTH, else
[worker] bucket_width in the --config file, else 1m.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``inspect-id`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="decode a UUIDv7 or Snowflake ID: time, worker, sequence, bucket",
        description="Decode a UUIDv7 or Snowflake ID: kind, time (ISO UTC and ms), worker, sequence, "
                    "and the time bucket it falls in.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    parser.add_argument("id", metavar="ID", help="the ID: UUID text or Snowflake decimal")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="twitter",
                        help="how to read a Snowflake (default: twitter)")
    add_setting_flags(parser, WorkerSettings, ["bucket_width"], helps={"bucket_width": "time-bucket width, e.g. "
                                                                                     "30s, 1m, 5m, 1h, 1d"})
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the decoded ID; raises InvalidIdError / InvalidBucketError for bad input."""
    width = resolve_settings(args, WorkerSettings).settings.bucket_width
    buckets = TimeBuckets(width)
    record = inspect(args.id, layout_name=args.layout, buckets=buckets, width=width)
    if args.json:
        print_json(record)
        return 0
    bucket = record["bucket"]
    fields: list[tuple[str, object]] = [
        ("id", record["id"]),
        ("kind", record["kind"]),
        ("time", record["time"]),
        ("timestamp_ms", str(record["timestamp_ms"])),
    ]
    if record["kind"] == IdKind.SNOWFLAKE:
        fields += [("layout", record["layout"]), ("worker", record["worker"]), ("sequence", record["sequence"])]
    fields += [
        ("bucket", f"{bucket['label']} ({bucket['width']})"),
        ("bucket start", f"{bucket['start']} ({bucket['start_ms']})"),
        ("bucket end", f"{bucket['end']} ({bucket['end_ms']})"),
    ]
    print_fields(f"{record['kind']} {args.id}", fields)
    return 0


def inspect(text: str, *, layout_name: str, buckets: TimeBuckets, width: str) -> dict[str, Any]:
    """The decoded ID as a JSON-friendly dict; raises InvalidIdError for a bad ID."""
    parsed = parse_id(text.strip(), layout=LAYOUTS[layout_name])
    bucket = buckets.bucket_of(parsed.timestamp_ms)
    snowflake = parsed.kind is IdKind.SNOWFLAKE
    return {
        "id": str(parsed.value),
        "kind": str(parsed.kind),
        "timestamp_ms": parsed.timestamp_ms,
        "time": _iso(parsed.timestamp),
        "worker": parsed.worker,
        "sequence": parsed.sequence,
        "layout": layout_name if snowflake else None,
        "bucket": {
            "width": width, "label": bucket.label,
            "start_ms": bucket.start_ms, "end_ms": bucket.end_ms,
            "start": _iso_ms(bucket.start_ms), "end": _iso_ms(bucket.end_ms),
        },
    }


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _iso_ms(ms: int) -> str:
    try:
        return _iso(datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms))
    except OverflowError:  # the end of a bucket in December 9999
        return f"{ms} ms"
