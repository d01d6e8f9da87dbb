"""``streams monitor``: a live view of the hot keys, the events topic's rates, the workers' lag and the routing maps.

The reading is in :mod:`streams.kafka.monitor`; this module parses flags and renders
snapshots: a rich Live view on a terminal, plain text (one report per interval)
otherwise, one snapshot with ``--once``, JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import orjson

from streams.cli import (
    HelpFormatter,
    _cell,
    _is_numeric,
    add_kafka_arguments,
    duration_s,
    kafka_client_config,
    positive_int,
    print_fields,
    print_json,
    print_table,
    stdout_is_tty,
)
from streams.core.config import TopicNames, WorkerSettings, load
from streams.core.errors import StreamsError
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.monitor import Monitor, Snapshot, notice_display

NAME = "monitor"
DEFAULT_TOP = 20

_EPILOG = """\
examples:
  streams monitor
  streams monitor --once --json | jq '.hot_keys.keys[].key'
  streams monitor --group streams-worker-events --interval 5s --hot-keys-topic my.hot-keys --events-topic my.events

Hot keys come from the compacted hot-keys topic: the latest notice per key, a
tombstone removes the key, malformed records are counted, never shown. A key's
rate is its share of the events topic's rate now (at most what its partitions
received), so rate and share agree; a placed key whose partitions received
nothing (its producers stopped) is counted, not listed. Rates are
end-offset deltas of the events topic per interval; lag is end offset minus the
group's committed offset (- when the group has committed nothing). The routing
map in force and the next scheduled one (with the UTC start of its first bucket)
come from the routing-maps topic; without one, none is shown. Without --once
the view refreshes every --interval until Ctrl-C; with --json it prints one JSON
line per interval.
"""

_HOT_HEADERS = ("key", "home", "partitions", "rate/s", "share", "placed since", "decider")
#: Why the hot-keys table's rate and share agree with events/s: see streams.kafka.monitor.key_stats.
_HOT_NOTE = "rate/s: the key's share of events/s now, at most what its partitions received"
_PARTITION_HEADERS = ("partition", "end offset", "msgs/s", "committed", "lag")
_BUCKET_HEADERS = ("bucket topic", "bucket", "partitions", "end offset", "lag")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``monitor`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="watch hot keys, events-topic rates and the workers' consumer lag",
        description="A live view of the key directory on the hot-keys topic (key, home, partitions, rate, share, "
                    "placed since) and of the "
                    "events topic (per-partition message rates, the worker group's committed offsets and lag).",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_kafka_arguments(parser)
    topics = parser.add_argument_group("what to watch")
    topics.add_argument("--hot-keys-topic", metavar="NAME", help=f"(default: {TopicNames().hot_keys})")
    topics.add_argument("--events-topic", metavar="NAME", help=f"(default: {TopicNames().events})")
    topics.add_argument("--routing-maps-topic", metavar="NAME",
                        help=f"the routing-map history to show the map in force and the next one from "
                             f"(default: {TopicNames().routing_maps}; missing: not shown)")
    topics.add_argument("--group", metavar="GROUP",
                        help=f"consumer group whose lag to show (default: stage 1's group, {WorkerSettings().events_group})")
    view = parser.add_argument_group("output")
    view.add_argument("--once", action="store_true",
                      help="print one snapshot (rates over one --interval) and exit")
    view.add_argument("--interval", type=duration_s, default=1.0, metavar="DURATION",
                      help="time between snapshots, e.g. 500ms, 1s, 5s (default: 1s)")
    view.add_argument("--top", type=positive_int, default=DEFAULT_TOP, metavar="N",
                      help=f"hot keys to show, highest rate first (default: {DEFAULT_TOP}; --json shows all)")
    view.add_argument("--json", action="store_true", help="print snapshots as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    """Watch, or print one snapshot; raises StreamsError for an unreachable cluster or (--once) a missing topic."""
    names = load(TopicNames, **{role: value for role, value in (("hot_keys", args.hot_keys_topic),
                                                                ("events", args.events_topic),
                                                                ("routing_maps", args.routing_maps_topic)) if value})
    worker = load(WorkerSettings)
    group = args.group or worker.events_group
    with Monitor(kafka_client_config(args), events_topic=names.events, hot_keys_topic=names.hot_keys, group=group,
                 routing_maps_topic=names.routing_maps, buckets=TimeBuckets(worker.bucket_width, grace=worker.grace),
                 timeout_s=args.timeout) as monitor:
        snapshot = monitor.snapshot()  # the first look decides: an unreachable cluster is an error
        if args.once:
            for topic, found in ((snapshot.hot_keys_topic, snapshot.hot_keys_found),
                                 (snapshot.events_topic, snapshot.events_found)):
                if not found:
                    raise TopicNotFoundError(f"topic {topic!r} does not exist; create it with 'streams topics "
                                             "create' or start 'streams worker'")
            time.sleep(args.interval)
            snapshot = monitor.snapshot()
            if args.json:
                print_json(snapshot.to_record())
            else:
                _print_plain(snapshot, args.top)
            return 0
        if stdout_is_tty() and not args.json:
            _watch_live(monitor, snapshot, args.interval, args.top)
        else:
            _watch_plain(monitor, snapshot, args.interval, args.top, as_json=args.json)
    return 0


# --- watching -----------------------------------------------------------------------------------


def _ticks(interval: float) -> Iterator[None]:
    """Sleep to the next multiple of ``interval`` since the start, forever (no drift)."""
    next_at = time.monotonic()
    while True:
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
        yield


def _refresh(monitor: Monitor, last: Snapshot) -> tuple[Snapshot, str | None]:
    """A new snapshot, or the last one and the error that prevented it (the view keeps going)."""
    try:
        return monitor.snapshot(), None
    except StreamsError as exc:
        return last, str(exc)


def _watch_live(monitor: Monitor, snapshot: Snapshot, interval: float, top: int) -> None:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with Live(_render(snapshot, top, None, interval), console=console, auto_refresh=False,
              redirect_stdout=False, redirect_stderr=False) as live:
        for _ in _ticks(interval):
            snapshot, error = _refresh(monitor, snapshot)
            live.update(_render(snapshot, top, error, interval), refresh=True)


def _watch_plain(monitor: Monitor, snapshot: Snapshot, interval: float, top: int, *, as_json: bool) -> None:
    """Not a terminal: one report (or one JSON line) per interval."""
    for _ in _ticks(interval):
        snapshot, error = _refresh(monitor, snapshot)
        if as_json:
            record = {**snapshot.to_record(), "error": error}
            sys.stdout.write(orjson.dumps(record).decode() + "\n")
            sys.stdout.flush()
        else:
            if error:
                print(f"error: {error} (showing the last snapshot)")
            _print_plain(snapshot, top)
            sys.stdout.flush()


# --- rendering --------------------------------------------------------------------------------


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _ago(ms: int, now_ms: int) -> str:
    seconds = max(0, (now_ms - ms) // 1000)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _summary(s: Snapshot) -> list[tuple[str, object]]:
    idle = sum(1 for k in s.key_stats if k.idle)
    hot = (f"{s.hot_keys_topic} ({len(s.hot_keys)} placed, {idle} without traffic now, {s.tombstones} tombstones, "
           f"{s.notices_read} records)" if s.hot_keys_found else f"{s.hot_keys_topic} (does not exist yet)")
    events = s.events_topic if s.events_found else f"{s.events_topic} (does not exist yet)"
    maps: list[tuple[str, object]] = []
    if s.map_in_force is not None:
        maps.append(("routing map", f"{_map_text(s.map_in_force)}, since {_when(s.map_in_force.first_bucket_ms)}"))
    if s.next_map is not None:
        start = s.next_map.first_bucket_ms
        maps.append(("next routing map", f"{_map_text(s.next_map)}, from {_when(start)} "
                                         f"(in {_ago(s.taken_at_ms, start)})"))
    return [
        ("taken at", _when(s.taken_at_ms)),
        ("hot-keys topic", hot),
        ("malformed notices", s.malformed),
        ("events topic", events),
        ("events/s", s.total_rate),
        ("max/mean of partition rates", None if s.balance is None else f"{s.balance:.2f}"),
        ("directory changes/min", None if s.directory_changes_per_min is None
         else f"{s.directory_changes_per_min:.1f}"),
        ("group", s.group),
        ("lag", s.total_lag),
        *maps,
    ]


def _map_text(m: RoutingMap) -> str:
    return f"v{m.version}: {m.partitions} partitions, {m.placement} + {m.hash}, {m.topic}"


def _hot_rows(s: Snapshot, top: int) -> tuple[list[tuple[object, ...]], str]:
    """The placed keys with traffic now, highest rate first; idle ones (producers stopped) only counted."""
    live = [k for k in s.key_stats if not k.idle]
    idle = len(s.hot_keys) - len(live)
    rows: list[tuple[object, ...]] = [
        (notice_display(n), n.home,
         ("move -> " if n.split_factor == 1 else f"split {n.split_factor}: ") + ",".join(map(str, n.placement)),
         None if k.rate is None else round(k.rate, 1), None if k.share is None else f"{k.share * 100:.1f}%",
         f"{_when(n.hot_since_ms)} ({_ago(n.hot_since_ms, s.taken_at_ms)} ago)", n.detector)
        for k in live[:top] for n in (k.notice,)]
    notes = [f"... and {len(live) - len(rows)} more (--top, --json)"] if len(live) > len(rows) else []
    if idle:
        notes.append(f"{idle} placed key(s) without traffic now, not listed")
    if rows:
        notes.append(_HOT_NOTE)
    return rows, "; ".join(notes)


def _partition_rows(s: Snapshot) -> list[tuple[object, ...]]:
    return [(p.partition, p.end_offset, p.rate, p.committed, p.lag) for p in s.partitions]


def _bucket_rows(s: Snapshot) -> list[tuple[object, ...]]:
    return [(t.topic, t.bucket, t.partitions, t.end_offset, t.lag) for t in s.bucket_topics]


def _print_plain(s: Snapshot, top: int) -> None:
    print_fields("streams monitor", _summary(s))
    hot, note = _hot_rows(s, top)
    print_table("hot keys", _HOT_HEADERS, hot, note=note if hot else "no hot keys" + (f" ({note})" if note else ""))
    print_table(f"events partitions, group {s.group}", _PARTITION_HEADERS, _partition_rows(s))
    if s.bucket_topics:
        print_table(f"bucket topics, group {s.group}", _BUCKET_HEADERS, _bucket_rows(s))


def _render(s: Snapshot, top: int, error: str | None, interval: float) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], note: str = "") -> Table:
        right = [bool(rows) and all(_is_numeric(row[i]) for row in rows) for i in range(len(headers))]
        t = Table(title=title, title_justify="left", caption=note or None, caption_justify="left")
        for header, is_right in zip(headers, right):
            t.add_column(header, justify="right" if is_right else "left")
        for row in rows:
            t.add_row(*(_cell(v) for v in row))
        return t

    head = Text.assemble(("streams monitor", "bold"), f"  every {interval:g}s, Ctrl-C to stop\n",
                         *[f"{name}: {_cell(value)}    " for name, value in _summary(s)])
    hot, note = _hot_rows(s, top)
    parts: list[Any] = [head]
    if error:
        parts.append(Text(f"error: {error} (showing the last snapshot)", style="bold red"))
    parts.append(table("hot keys", _HOT_HEADERS, hot, note if hot else "no hot keys" + (f" ({note})" if note else "")))
    parts.append(table(f"events partitions, group {s.group}", _PARTITION_HEADERS, _partition_rows(s)))
    if s.bucket_topics:
        parts.append(table(f"bucket topics, group {s.group}", _BUCKET_HEADERS, _bucket_rows(s)))
    return Group(*parts)
