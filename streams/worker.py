"""The worker's processing core: decode, validate, detect, classify, aggregate, close.

Kafka-free so it can be tested in microseconds; :mod:`streams.app` feeds it faust
events and sends what it returns. One :class:`EventProcessor` per worker process:

* :meth:`EventProcessor.handle` takes one consumed record and returns what must be
  sent for it: nothing (an on-time event, folded into stage 1), a late-event record
  (its bucket had closed), or a dead letter (undecodable, malformed ID, empty key,
  non-finite value, timestamp in the future or before the epoch). Every record is
  counted under exactly one of those, so ``received == on_time + late + too_old +
  dead_lettered`` (see :meth:`counts`).
* :meth:`EventProcessor.tick` runs on a timer: it closes every bucket whose close
  time (end + grace) the low watermark has passed, returns the stage-1 partials and a
  bucket-closed record for each, and the hot-key sketch summary to publish.

Stage-1 state lives in a :class:`Stage1Store`: a mapping (faust's table store in the
worker) plus a changelog callback that writes each change to the changelog partition
of the *source* partition. Changes are coalesced: :meth:`Stage1Store.flush` writes
each entry changed since the last flush once, and the worker acknowledges source
records only after the flush that covers them. Each entry remembers the source
offset it last folded, so a record re-read after a crash (at-least-once delivery) is
recognised and skipped: the state is exact although delivery is not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from streams.aggregate import Stats
from streams.buckets import TimeBuckets, parse_duration
from streams.config import WorkerSettings
from streams.errors import InvalidIdError, SerializationError
from streams.eventtime import Aggregation, PlacementKind
from streams.hotkeys import SketchSummary, SlidingSketch
from streams.ids import parse_id
from streams.roller import BucketRoller
from streams.serde import CONTENT_TYPE, AvroCodec, JsonCodec
from streams.watermark import WatermarkTracker

__all__ = ["InMessage", "Output", "TickResult", "Stage1Store", "EventProcessor", "ProcessorCounts"]

_META = "meta|"

Source = tuple[str, int]  # (topic, partition) a record was read from
_NULL = Aggregation(empty=lambda: None, add=lambda a, v: None, to_record=lambda a: None, from_record=lambda r: None)


@dataclass(frozen=True)
class InMessage:
    """One consumed record, as the worker sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]


@dataclass(frozen=True)
class Output:
    """A record to send: ``role`` names the topic ("late_events", "dead_letters",
    "partials", "bucket_closed"), ``key`` its record key, ``record`` its Avro record."""

    role: str
    key: bytes
    record: dict[str, Any]


@dataclass(frozen=True)
class TickResult:
    """What one timer tick produced."""

    outputs: tuple[Output, ...]
    summary: SketchSummary
    closed_buckets: tuple[str, ...]
    watermark_ms: int | None


@dataclass(frozen=True)
class ProcessorCounts:
    """Conservation counters: ``received == on_time + late + too_old + dead_lettered``;
    ``duplicates`` are records re-read after a restart whose effects were already
    durable (not in ``received``), or re-read on-time records an entry had folded."""

    received: int
    on_time: int
    late: int
    too_old: int
    dead_lettered: int
    duplicates: int


class Stage1Store:
    """Partial aggregates per (bucket index, salt, key), changelogged per source partition.

    ``data`` maps entry keys to ``[changelog partition, {source partition: last offset}, stats record]``;
    ``changelog(partition, key, value)`` persists a change (``value`` None deletes).
    Meta entries ``meta|<partition>`` remember the highest closed bucket index, so a
    restarted worker does not reopen a bucket it already emitted.
    """

    def __init__(self, data: MutableMapping[str, Any], changelog: Callable[[int, str, Any], None]) -> None:
        self.data = data
        self._changelog = changelog
        self._index: dict[int, set[str]] = {}
        self._live: dict[str, list[Any]] = {}  # entry key -> [partition, offsets, Stats]
        self._dirty: set[str] = set()
        self._indexed_len = -1

    def reindex(self) -> tuple[int, dict[Source, int]]:
        """Re-read ``data`` after faust recovered or dropped partitions of it.

        Entries already live here are kept (they may hold folds not flushed yet);
        entries new in ``data`` are loaded; entries gone from ``data`` (a revoked
        partition) are forgotten. Returns the highest closed-through bucket index.
        """
        old = self._live
        self._live = {}
        self._index.clear()
        closed = -1
        processed: dict[Source, int] = {}
        for key, value in list(self.data.items()):
            if key.startswith(_META):
                topic, partition = key[len(_META):].rsplit("|", 1)
                closed = max(closed, int(value["closed"]))
                processed[(topic, int(partition))] = int(value["offset"])
                continue
            if key in old:
                self._live[key] = old[key]
            elif value is not None:
                partition, offsets, record = value
                self._live[key] = [partition, dict(offsets), Stats.from_record(record)]
            else:
                continue
            self._index.setdefault(int(key.split("|", 1)[0]), set()).add(key)
        self._dirty &= self._live.keys()
        self._indexed_len = len(self.data)
        return closed, processed

    def fold(self, source: Source, offset: int, index: int, salt: int, key: str, value: float | None) -> bool:
        """Fold one on-time event in; False (and nothing changed) if this source offset was folded before.

        An entry normally hears from one source (a salted key sits on one partition
        per bucket), but offsets are remembered per (topic, partition), so records of
        a key produced elsewhere with another partitioner are folded correctly too.
        The entry is changelogged to the partition number of its first source.
        """
        topic, partition = source
        entry_key = f"{index}|{salt}|{key}"
        entry = self._live.get(entry_key)
        if entry is None:
            entry = self._live[entry_key] = [partition, {}, Stats.empty()]
            self._index.setdefault(index, set()).add(entry_key)
        offsets = entry[1]
        source_key = f"{topic}|{partition}"
        if offset <= offsets.get(source_key, -1):
            return False
        entry[2].add(value)
        offsets[source_key] = offset
        if entry_key not in self.data:
            self.data[entry_key] = None  # present now; the value is written by flush()
            self._indexed_len = len(self.data)
        self._dirty.add(entry_key)
        return True

    def flush(self) -> int:
        """Write every entry changed since the last flush to ``data`` and the changelog, once each.

        The caller must flush before it acknowledges the source records folded
        since the last flush: then a committed offset never runs ahead of the state
        in the changelog. Returns how many entries were written.
        """
        dirty, self._dirty = self._dirty, set()
        for entry_key in dirty:
            entry = self._live.get(entry_key)
            if entry is None:  # closed and removed since
                continue
            stored = [entry[0], dict(entry[1]), entry[2].to_record()]
            self.data[entry_key] = stored
            self._changelog(entry[0], entry_key, stored)
        return len(dirty)

    def bucket_indexes(self) -> list[int]:
        """Bucket indexes that hold entries, oldest first."""
        return sorted(self._index)

    def take_bucket(self, index: int) -> list[tuple[int, str, Stats]]:
        """Remove and return the entries of one bucket as (salt, key, stats)."""
        out = []
        for entry_key in sorted(self._index.pop(index, ())):
            partition, _, stats = self._live.pop(entry_key)
            self._dirty.discard(entry_key)
            self.data.pop(entry_key, None)
            self._changelog(partition, entry_key, None)
            _, salt, key = entry_key.split("|", 2)
            out.append((int(salt), key, stats))
        self._indexed_len = len(self.data)
        return out

    def checkpoint(self, closed_through: int, offsets: Mapping[Source, int]) -> None:
        """Persist, per source (topic, partition), the closed-through bucket index and
        the last offset whose effects (state, outputs) are durable once this write is.

        A restarted worker skips records at or below that offset: their effects,
        late-event and dead-letter records included, are already in Kafka.
        """
        for (topic, p), offset in offsets.items():
            value = {"closed": closed_through, "offset": offset}
            self.data[f"{_META}{topic}|{p}"] = value
            self._changelog(p, f"{_META}{topic}|{p}", value)
        self._indexed_len = len(self.data)

    @property
    def stale(self) -> bool:
        """True when ``data`` changed behind the index's back (a recovery filled it)."""
        return len(self.data) != self._indexed_len


class EventProcessor:
    """Decode → validate → detect → classify → fold, and close buckets on ticks.

    ``clock_ms`` is the wall clock (injectable for tests). ``instance`` names this
    worker in sketch summaries. Not thread-safe: one faust task owns it.
    """

    def __init__(self, settings: WorkerSettings, store: Stage1Store, *, instance: str,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.instance = instance
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.buckets = TimeBuckets(settings.bucket_width, grace=settings.grace)
        self.watermarks = WatermarkTracker(parse_duration(settings.allowed_delay, "allowed_delay"), parse_duration(settings.idle_timeout, "idle_timeout"))
        self.roller: BucketRoller[None, None] = BucketRoller(
            self.buckets, parse_duration(settings.retention, "retention"), aggregation=_NULL, watermarks=self.watermarks)
        self.sketch = SlidingSketch(settings.hot_window_s, capacity=settings.sketch_capacity)
        self._codecs = {CONTENT_TYPE["json"]: JsonCodec("event"), CONTENT_TYPE["avro"]: AvroCodec("event")}
        self._default_codec = self._codecs[CONTENT_TYPE[settings.serializer]]
        self._closed_through = -1
        self._duplicates = 0
        self._sources: set[Source] = set()
        self._source_ids: dict[Source, int] = {}  # the watermark tracker numbers its inputs
        self._durable: dict[Source, int] = {}  # last offset durable at the last checkpoint
        self._handled: dict[Source, int] = {}  # last offset handled since

    # -- partitions and recovery ----------------------------------------------------------

    def assign(self, sources: Iterable[Source]) -> None:
        """The events (topic, partition)s this worker now owns (after a rebalance)."""
        new = set(sources)
        self.watermarks.revoke(self._source_id(s) for s in self._sources - new)
        self.watermarks.assign((self._source_id(s) for s in new), self._clock_ms())
        self._sources = new

    def _source_id(self, source: Source) -> int:
        sid = self._source_ids.get(source)
        if sid is None:
            sid = self._source_ids[source] = len(self._source_ids)
        return sid

    def recover(self) -> None:
        """Re-read the store after a changelog recovery: index entries, restore closed-through."""
        closed, durable = self.store.reindex()
        if closed > self._closed_through:
            self._closed_through = closed
        for source, offset in durable.items():
            if offset > self._durable.get(source, -1):
                self._durable[source] = offset

    def checkpoint(self) -> None:
        """Record progress in the store; call right before flushing it and acknowledging input."""
        progressed = {s: o for s, o in self._handled.items() if o > self._durable.get(s, -1)}
        if progressed:
            self.store.checkpoint(self._closed_through, progressed)
            self._durable.update(progressed)

    # -- per record ---------------------------------------------------------------------------

    def handle(self, msg: InMessage) -> list[Output]:
        """Process one record; returns the late-event or dead-letter record to send, if any."""
        if self.store.stale:
            self.recover()
        source = (msg.topic, msg.partition)
        if msg.offset <= self._durable.get(source, -1):
            self._duplicates += 1  # re-read after a restart: its effects are already in Kafka
            return []
        self._handled[source] = msg.offset
        now = self._clock_ms()
        codec = self._codecs.get(msg.headers.get("content-type", b""), self._default_codec)
        try:
            if msg.value is None:
                raise SerializationError("event: null value (tombstone) on the events topic")
            event = codec.decode(msg.value)
        except SerializationError as exc:
            return [self._dead_letter(msg, str(exc), None, now)]
        try:
            parse_id(event["id"])
        except InvalidIdError as exc:
            return [self._dead_letter(msg, f"malformed id: {exc}", "id", now, event["ts_ms"])]
        key = event["key"]
        if not key.strip():
            return [self._dead_letter(msg, "empty key", "key", now, event["ts_ms"])]
        value = event["value"]
        if value is not None and not math.isfinite(value):
            return [self._dead_letter(msg, f"value must be finite, got {value!r}", "value", now, event["ts_ms"])]
        salt = _salt(msg.headers.get("streams-salt"))
        if salt is None:
            return [self._dead_letter(msg, "malformed streams-salt header", "streams-salt", now, event["ts_ms"])]
        ts = event["ts_ms"]
        placement = self.roller.add(key, ts, None, now, partition=self._source_id(source))
        kind = placement.kind
        if kind is PlacementKind.ON_TIME:
            bucket = placement.bucket
            assert bucket is not None
            if bucket.index <= self._closed_through:  # closed before a restart: the roller cannot know
                return [self._late(msg, event, bucket.index, ts, now, "bucket closed")]
            self.sketch.add(key, now / 1000)
            if not self.store.fold(source, msg.offset, bucket.index, salt, key, value):
                self._duplicates += 1
            return []
        if kind in (PlacementKind.LATE, PlacementKind.TOO_OLD):
            self.sketch.add(key, now / 1000)
            return [self._late(msg, event, placement.bucket.index, ts, now, placement.reason)]  # type: ignore[union-attr]
        return [self._dead_letter(msg, placement.reason, "ts_ms", now, None, counted=True)]

    def _late(self, msg: InMessage, event: Mapping[str, Any], index: int, ts: int, now: int, reason: str) -> Output:
        bucket = self.buckets.bucket_at_index(index)
        watermark = self.watermarks.floor_ms if self.watermarks.floor_ms is not None else ts
        record = {
            "event_id": event["id"], "bucket": bucket.label, "bucket_start_ms": bucket.start_ms,
            "event_ts_ms": ts, "watermark_ms": watermark, "lateness_ms": max(0, watermark - bucket.close_ms),
            "reason": reason, "source_topic": msg.topic, "source_partition": msg.partition,
            "source_offset": msg.offset, "original": msg.value or b"",
            "content_type": msg.headers.get("content-type", CONTENT_TYPE[self.settings.serializer]).decode("ascii", "replace"),
        }
        return Output("late_events", event["key"].encode(), record)

    def _dead_letter(self, msg: InMessage, reason: str, field: str | None, now: int,
                     ts: int | None = None, *, counted: bool = False) -> Output:
        if not counted:
            self.roller.count_dead_letter(_reason_class(reason), ts)
        record = {
            "reason": reason[:1000], "field": field, "source_topic": msg.topic, "source_partition": msg.partition,
            "source_offset": msg.offset, "failed_at_ms": now, "original_key": msg.key, "original": msg.value,
        }
        return Output("dead_letters", msg.key or b"", record)

    # -- per tick -----------------------------------------------------------------------------

    def tick(self) -> TickResult:
        """Close due buckets (emit-on-close) and summarise the hot-key sketch."""
        if self.store.stale:
            self.recover()
        now = self._clock_ms()
        closed_meta = {c.bucket.index: c for c in self.roller.advance(now)}
        watermark = self.watermarks.floor_ms
        outputs: list[Output] = []
        labels = []
        if watermark is not None:
            closable = (watermark - self.buckets.grace_ms) // self.buckets.width_ms - 1
            due = sorted({i for i in self.store.bucket_indexes() if i <= closable} | set(closed_meta))
            for index in due:
                bucket = self.buckets.bucket_at_index(index)
                entries = self.store.take_bucket(index)
                meta = closed_meta.get(index)
                keys = set()
                events = 0
                for salt, key, stats in entries:
                    keys.add(key)
                    events += stats.count
                    outputs.append(Output("partials", key.encode(), partial_record(bucket, key, salt, stats)))
                outputs.append(Output("bucket_closed", bucket.label.encode(), {
                    "bucket": bucket.label, "bucket_start_ms": bucket.start_ms, "bucket_end_ms": bucket.end_ms,
                    "closed_at_ms": now, "watermark_ms": watermark, "events": events, "keys": len(keys),
                    "late_events": meta.late_events if meta else 0, "dead_letters": meta.dead_letters if meta else 0,
                }))
                labels.append(bucket.label)
            if closable > self._closed_through:
                self._closed_through = closable  # persisted by the next checkpoint()
        summary = self.sketch.summary(now / 1000, top=256, instance=self.instance)
        return TickResult(tuple(outputs), summary, tuple(labels), watermark)

    def counts(self) -> ProcessorCounts:
        """Conservation counters since this processor started."""
        c = self.roller.counts()
        return ProcessorCounts(c.received, c.on_time, c.late, c.too_old, c.dead_lettered, self._duplicates)

    def open_buckets(self) -> int:
        """Buckets holding stage-1 state right now (bounded by the open window)."""
        return len(self.store.bucket_indexes())


def partial_record(bucket: Any, key: str, salt: int, stats: Stats, *, final: bool = False) -> dict[str, Any]:
    """An ``Aggregate`` record for one (bucket, key, salt) from ``stats``."""
    rec = stats.to_record()
    return {
        "bucket": bucket.label, "bucket_start_ms": bucket.start_ms, "key": key, "salt": salt,
        "count": rec["count"], "measured": rec["measured"], "sum": rec["sum"], "sum_partials": rec["partials"],
        "min": rec["min"], "max": rec["max"], "final": final,
    }


def stats_of(record: Mapping[str, Any]) -> Stats:
    """The Stats inside an ``Aggregate`` record (raises ValueError/TypeError if malformed)."""
    return Stats.from_record({"count": record["count"], "measured": record["measured"], "sum": record["sum"],
                              "partials": record["sum_partials"], "min": record["min"], "max": record["max"]})


def _salt(raw: bytes | None) -> int | None:
    if raw is None:
        return -1
    try:
        salt = int(raw)
    except ValueError:
        return None
    return salt if -1 <= salt < 100_000 else None


def _reason_class(reason: str) -> str:
    """A short, fixed reason class for counters (the full text goes into the dead letter)."""
    for prefix in ("malformed id", "empty key", "value must be finite", "malformed streams-salt"):
        if reason.startswith(prefix):
            return prefix
    return "undecodable payload"
