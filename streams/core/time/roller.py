"""The bucket roller: event-time buckets that open, close once, in order, and age out.

This is the state machine the faust worker drives, with the semantics of Kafka
Streams' grace period + emit-on-close and Flink's allowed lateness with a side
output (faust's own windowed tables expire by wall clock and know no watermark):

* :meth:`BucketRoller.classify` places an event against the low watermark of a
  :class:`~streams.core.time.watermark.WatermarkTracker`:

  ============  ===============================================  ===================
  placement     when                                             goes to
  ============  ===============================================  ===================
  ON_TIME       its bucket is open                               the bucket's state
  LATE          watermark >= bucket close (end + grace), or the  late-events topic
                bucket was already closed, within retention
  TOO_OLD       watermark >= bucket end + retention              late-events topic
  FUTURE        event time > now + max_future_ms                 dead letters
  BEFORE_EPOCH  event time < min_event_ts_ms (default 0)         dead letters
  ============  ===============================================  ===================

  Nothing is dropped silently: every event offered to :meth:`add` is counted under
  exactly one placement, and ``received == on_time + late + too_old +
  dead_lettered`` always holds (decode failures enter via :meth:`count_dead_letter`).
* :meth:`BucketRoller.advance` closes, in index order, every bucket holding state
  whose close time is at or below the low watermark, and returns its final per-key
  aggregates (emit-on-close). A bucket never closes before end + grace and closes
  exactly once. Buckets that saw no event are not emitted.
* Retention: a closed bucket's state is kept, for late corrections, until the
  watermark reaches its end + ``retention_ms``; then it is dropped. Classification
  needs only two integers (closed-through and dropped-through indexes), so memory
  is bounded by the open window plus ``retention_ms / width`` buckets however long
  the worker runs.
* Late corrections (:meth:`apply_correction`) fold a replayed late event into a
  closed-but-retained bucket and return the corrected aggregate, a full value that
  replaces the one emitted at close (the aggregates topic is compacted). The roller
  does not deduplicate: replay must dedup by event ID before calling it.
* :meth:`to_record` / :meth:`from_record` snapshot the whole state as JSON-friendly
  dicts for a faust table / changelog; restore validates every field.

Per-key state is folded through an :class:`~streams.core.time.eventtime.Aggregation` (a few
callables; :data:`~streams.core.time.eventtime.STATS` for count / sum / min / max), so the
roller does not depend on one aggregate type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from streams.core.errors import InvalidKeyError, StreamsError
from streams.core.time.buckets import MAX_TIMESTAMP_MS, Bucket, TimeBuckets
from streams.core.time.eventtime import (
    REASON_BEFORE_MIN,
    REASON_FUTURE,
    REASON_LATE,
    REASON_TOO_OLD,
    Aggregation,
    ClosedBucket,
    Correction,
    Counts,
    LateCorrectionError,
    Placement,
    PlacementKind,
    RollerStateError,
    check_config_int,
    check_ms,
    check_partition,
    check_record_fields,
    record_int,
)
from streams.core.time.watermark import WatermarkTracker

__all__ = ["BucketRoller", "MAX_REASONS"]

V = TypeVar("V")
A = TypeVar("A")

#: Distinct dead-letter reasons counted by name; further ones count under "other".
MAX_REASONS = 32
_MAX_REASON_LENGTH = 200


class _State:
    """Mutable per-bucket state, open or closed-and-retained."""

    __slots__ = ("aggregates", "events", "late_events", "dead_letters", "corrections")

    def __init__(self) -> None:
        self.aggregates: dict[str, Any] = {}
        self.events = 0
        self.late_events = 0
        self.dead_letters = 0
        self.corrections = 0


def _check_key(key: object) -> str:
    if key.__class__ is not str or not key:
        if not isinstance(key, str):
            raise InvalidKeyError(f"key must be a str, got {type(key).__name__}")
        if not key:
            raise InvalidKeyError("key must not be empty")
    return key  # type: ignore[return-value]


class BucketRoller(Generic[V, A]):
    """Per-bucket, per-key aggregates driven by event time (see the module docstring).

    ``retention_ms`` (>= ``buckets.grace_ms``) is how long after its *end* a bucket's
    state is kept for corrections; ``max_future_ms`` (>= 0, default 1 h) how far
    ahead of the wall clock an event time may be; ``min_event_ts_ms`` (>= 0) the
    oldest acceptable event time. ``watermarks`` is owned by the roller from now on:
    call ``roller.watermarks.assign/revoke`` on rebalances. Raises ConfigError on a
    bad setting. Not thread-safe: one worker task owns it.
    """

    def __init__(
        self,
        buckets: TimeBuckets,
        retention_ms: int,
        *,
        aggregation: Aggregation[V, A],
        watermarks: WatermarkTracker,
        max_future_ms: int = 3_600_000,
        min_event_ts_ms: int = 0,
    ) -> None:
        if not isinstance(buckets, TimeBuckets):
            raise TypeError(f"buckets must be a TimeBuckets, got {type(buckets).__name__}")
        if not isinstance(aggregation, Aggregation):
            raise TypeError(f"aggregation must be an Aggregation, got {type(aggregation).__name__}")
        if not isinstance(watermarks, WatermarkTracker):
            raise TypeError(f"watermarks must be a WatermarkTracker, got {type(watermarks).__name__}")
        self.buckets = buckets
        self.retention_ms = check_config_int(retention_ms, "retention_ms", buckets.grace_ms, MAX_TIMESTAMP_MS)
        self.max_future_ms = check_config_int(max_future_ms, "max_future_ms", 0, MAX_TIMESTAMP_MS)
        self.min_event_ts_ms = check_config_int(min_event_ts_ms, "min_event_ts_ms", 0, MAX_TIMESTAMP_MS)
        self.aggregation = aggregation
        self.watermarks = watermarks
        self._open: dict[int, _State] = {}
        self._closed: dict[int, _State] = {}
        self._closed_through = -1  # every bucket with index <= this is closed
        self._dropped_through = -1  # every bucket with index <= this has no state left
        self._counts = [0, 0, 0, 0, 0, 0]  # Counts fields, in order
        self._reasons: dict[str, int] = {}
        self._bucket_cache: dict[int, Bucket] = {}

    # -- classification -------------------------------------------------------------

    def classify(self, event_ts_ms: int, now_ms: int) -> Placement:
        """Return where an event with time ``event_ts_ms`` belongs at wall clock ``now_ms``.

        Changes no counter or state (it may ratchet the tracker's low watermark,
        which is monotone anyway). Raises InvalidBucketError naming the field if
        ``event_ts_ms`` or ``now_ms`` is not an int (bool, float, None, str ...).
        """
        ts = check_ms(event_ts_ms, "event_ts_ms")
        now = check_ms(now_ms, "now_ms")
        if ts < self.min_event_ts_ms:
            return Placement(PlacementKind.BEFORE_EPOCH, None, self.watermarks.floor_ms, 0, REASON_BEFORE_MIN)
        if ts - now > self.max_future_ms or ts > MAX_TIMESTAMP_MS:
            return Placement(PlacementKind.FUTURE, None, self.watermarks.floor_ms, 0, REASON_FUTURE)
        return self._place(ts // self.buckets.width_ms, self.watermarks.low_watermark(now))

    def _place(self, index: int, watermark: int | None) -> Placement:
        bucket = self._bucket(index)
        if watermark is not None:
            if index <= self._dropped_through or bucket.end_ms + self.retention_ms <= watermark:
                return Placement(PlacementKind.TOO_OLD, bucket, watermark, watermark - bucket.close_ms, REASON_TOO_OLD)
            if index <= self._closed_through or bucket.close_ms <= watermark:
                return Placement(PlacementKind.LATE, bucket, watermark, watermark - bucket.close_ms, REASON_LATE)
        return Placement(PlacementKind.ON_TIME, bucket, watermark, 0, "")

    def _bucket(self, index: int) -> Bucket:
        bucket = self._bucket_cache.get(index)
        if bucket is None:
            if len(self._bucket_cache) >= 256:
                self._bucket_cache.clear()
            bucket = self._bucket_cache[index] = self.buckets.bucket_at_index(index)
        return bucket

    # -- events ---------------------------------------------------------------------

    def add(self, key: str, event_ts_ms: int, value: V, now_ms: int, *, partition: int = 0) -> Placement:
        """Classify an event read from ``partition``, count it, and fold it in if on time.

        Returns the placement: the caller routes LATE and TOO_OLD events to the
        late-events topic (with ``placement.bucket`` and ``lateness_ms``) and FUTURE /
        BEFORE_EPOCH ones to dead letters (``placement.reason``). Plausible event
        times (all but the dead-letter kinds) feed the watermark tracker. Raises
        InvalidKeyError for a key that is not a non-empty str, InvalidBucketError for
        a non-int time, ValueError for a bad partition; if any of these or
        ``aggregation.add`` raises, no counter or bucket changes.
        """
        key = _check_key(key)
        if partition.__class__ is not int or partition < 0:
            partition = check_partition(partition)
        placement = self.classify(event_ts_ms, now_ms)
        kind = placement.kind
        counts = self._counts
        if kind is PlacementKind.ON_TIME:
            index = placement.bucket.index  # type: ignore[union-attr]
            state = self._open.get(index)
            fresh = state is None
            if fresh:
                state = _State()
            aggregates = state.aggregates  # type: ignore[union-attr]
            current = aggregates.get(key)
            updated = self.aggregation.add(self.aggregation.empty() if current is None else current, value)
            if fresh:
                self._open[index] = state  # type: ignore[assignment]
            aggregates[key] = updated
            state.events += 1  # type: ignore[union-attr]
            counts[1] += 1
        elif kind is PlacementKind.LATE:
            index = placement.bucket.index  # type: ignore[union-attr]
            if index > self._closed_through:  # not emitted yet: report it with the bucket
                state = self._open.get(index)
                if state is None:
                    state = self._open[index] = _State()
                state.late_events += 1
            counts[2] += 1
        elif kind is PlacementKind.TOO_OLD:
            counts[3] += 1
        else:
            self._count_reason(placement.reason)
        counts[0] += 1
        if placement.bucket is not None:
            self.watermarks.observe(partition, event_ts_ms, now_ms)
        return placement

    def count_dead_letter(self, reason: str, event_ts_ms: int | None = None) -> None:
        """Count one event the caller dead-lettered itself (e.g. it failed to decode).

        Keeps ``received == on_time + late + too_old + dead_lettered``. ``reason``
        (a non-empty str, ideally from a small fixed set) is counted by name; the
        first MAX_REASONS distinct reasons are kept, later ones count as "other".
        With a valid ``event_ts_ms`` whose bucket is still open, the dead letter is
        also reported with that bucket at close. Raises ValueError on a bad reason.
        """
        if not isinstance(reason, str) or not reason or len(reason) > _MAX_REASON_LENGTH:
            raise ValueError(f"reason must be a non-empty str of at most {_MAX_REASON_LENGTH} characters, got {reason!r}")
        if event_ts_ms.__class__ is int and 0 <= event_ts_ms <= MAX_TIMESTAMP_MS:  # type: ignore[operator]
            state = self._open.get(event_ts_ms // self.buckets.width_ms)  # type: ignore[operator]
            if state is not None:
                state.dead_letters += 1
        self._count_reason(reason)
        self._counts[0] += 1

    def _count_reason(self, reason: str) -> None:
        if reason not in self._reasons and len(self._reasons) >= MAX_REASONS:
            reason = "other"
        self._reasons[reason] = self._reasons.get(reason, 0) + 1
        self._counts[4] += 1

    # -- closing and retention ------------------------------------------------------

    def advance(self, now_ms: int) -> list[ClosedBucket[A]]:
        """Close every bucket with state whose close time <= the low watermark at ``now_ms``.

        Returns them in index order, each exactly once over the roller's life, then
        drops the state of closed buckets whose end + retention <= the watermark.
        Raises InvalidBucketError on a non-int ``now_ms``.
        """
        now = check_ms(now_ms, "now_ms")
        watermark = self.watermarks.low_watermark(now)
        if watermark is None:
            return []
        width = self.buckets.width_ms
        closable = (watermark - self.buckets.grace_ms) // width - 1  # last index with close <= watermark
        closed: list[ClosedBucket[A]] = []
        if closable > self._closed_through:
            for index in sorted(i for i in self._open if i <= closable):
                state = self._open.pop(index)
                closed.append(
                    ClosedBucket(
                        self._bucket(index),
                        MappingProxyType(dict(state.aggregates)),
                        state.events,
                        state.late_events,
                        state.dead_letters,
                        now,
                        watermark,
                    )
                )
                self._closed[index] = state
            self._closed_through = closable
        droppable = (watermark - self.retention_ms) // width - 1  # last index with end + retention <= watermark
        if droppable > self._dropped_through:
            for index in [i for i in self._closed if i <= droppable]:
                del self._closed[index]
            self._dropped_through = droppable
        return closed

    def apply_correction(self, key: str, event_ts_ms: int, value: V) -> Correction:
        """Fold a replayed late event into its closed-but-retained bucket.

        Returns the full corrected aggregate of (bucket, key), to replace the emitted
        one. Uses the last known low watermark (no clock). The caller must dedup by
        event ID first: applying the same event twice counts it twice. Raises
        LateCorrectionError if the bucket is still open (use :meth:`add`) or beyond
        retention, InvalidKeyError / InvalidBucketError on a bad key or time.
        """
        key = _check_key(key)
        ts = check_ms(event_ts_ms, "event_ts_ms")
        if not self.min_event_ts_ms <= ts <= MAX_TIMESTAMP_MS:
            raise LateCorrectionError(f"event_ts_ms {ts} is outside {self.min_event_ts_ms}..{MAX_TIMESTAMP_MS}")
        placement = self._place(ts // self.buckets.width_ms, self.watermarks.floor_ms)
        bucket = placement.bucket
        assert bucket is not None
        if placement.kind is PlacementKind.ON_TIME:
            raise LateCorrectionError(f"bucket {bucket.label} is still open: send the event through add()")
        if placement.kind is PlacementKind.TOO_OLD:
            raise LateCorrectionError(f"bucket {bucket.label} is beyond retention: its state was dropped")
        emitted = bucket.index <= self._closed_through
        store = self._closed if emitted else self._open
        state = store.get(bucket.index) or _State()
        current = state.aggregates.get(key)
        aggregation = self.aggregation
        if current is None:
            current = aggregation.empty()
        elif emitted and aggregation.copy is not None:
            current = aggregation.copy(current)  # the emitted aggregate stays as it was
        updated = aggregation.add(current, value)
        store[bucket.index] = state
        state.aggregates[key] = updated
        state.corrections += 1
        self._counts[5] += 1
        return Correction(bucket, key, updated, emitted)

    # -- observation ----------------------------------------------------------------

    @property
    def closed_through(self) -> int:
        """Every bucket with an index at or below this has closed (-1 before any)."""
        return self._closed_through

    def counts(self) -> Counts:
        """Return the event counters (see :class:`Counts` for the invariant)."""
        return Counts(*self._counts)

    def dead_letter_counts(self) -> Mapping[str, int]:
        """Return dead letters counted per reason (a read-only copy)."""
        return MappingProxyType(dict(self._reasons))

    def open_bucket_count(self) -> int:
        """Return how many buckets hold state and have not been emitted yet."""
        return len(self._open)

    def tracked_bucket_count(self) -> int:
        """Return how many buckets hold state: open ones plus closed ones within retention."""
        return len(self._open) + len(self._closed)

    def open_events(self) -> int:
        """Return the on-time events folded into buckets not emitted yet."""
        return sum(state.events for state in self._open.values())

    # -- snapshots ------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """Return a JSON-friendly snapshot of the whole roller, watermarks included."""
        return {
            "version": _VERSION,
            "width_ms": self.buckets.width_ms,
            "grace_ms": self.buckets.grace_ms,
            "retention_ms": self.retention_ms,
            "max_future_ms": self.max_future_ms,
            "min_event_ts_ms": self.min_event_ts_ms,
            "watermarks": self.watermarks.to_record(),
            "closed_through": self._closed_through,
            "dropped_through": self._dropped_through,
            "counts": dict(zip(Counts._fields, self._counts)),
            "dead_letter_reasons": dict(self._reasons),
            "open": [self._state_record(i, s) for i, s in sorted(self._open.items())],
            "closed": [self._state_record(i, s) for i, s in sorted(self._closed.items())],
        }

    def _state_record(self, index: int, state: _State) -> dict[str, Any]:
        to_record = self.aggregation.to_record
        return {
            "index": index,
            **{name: getattr(state, name) for name in _STATE_COUNTERS},
            "aggregates": {key: to_record(agg) for key, agg in state.aggregates.items()},
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, aggregation: Aggregation[V, A]) -> BucketRoller[V, A]:
        """Rebuild a roller from :meth:`to_record` output; it then behaves exactly as the original.

        The settings come from the snapshot: compare ``roller.buckets`` and the other
        settings with the current configuration if they may have changed. Raises
        RollerStateError naming the field on any malformed, hostile or inconsistent
        snapshot (including one ``aggregation.from_record`` rejects).
        """
        try:
            return cls._from_record(record, aggregation)
        except RollerStateError:
            raise
        except (StreamsError, ValueError, TypeError) as exc:
            raise RollerStateError(f"roller snapshot is invalid: {exc}") from exc

    @classmethod
    def _from_record(cls, record: Mapping[str, Any], aggregation: Aggregation[V, A]) -> BucketRoller[V, A]:
        check_record_fields(record, _RECORD_FIELDS, "roller snapshot")
        if record["version"] != _VERSION or record["version"].__class__ is not int:
            raise RollerStateError(f"roller snapshot field 'version' must be {_VERSION}, got {record['version']!r}")
        width_ms = record_int(record, "width_ms", 1, MAX_TIMESTAMP_MS)
        grace_ms = record_int(record, "grace_ms", 0, MAX_TIMESTAMP_MS)
        try:
            watermarks = WatermarkTracker.from_record(record["watermarks"])
        except RollerStateError as exc:
            raise RollerStateError(f"roller snapshot field 'watermarks': {exc}") from exc
        roller = cls(
            TimeBuckets(timedelta(milliseconds=width_ms), grace=grace_ms),
            record_int(record, "retention_ms", 0, MAX_TIMESTAMP_MS),
            aggregation=aggregation,
            watermarks=watermarks,
            max_future_ms=record_int(record, "max_future_ms", 0, MAX_TIMESTAMP_MS),
            min_event_ts_ms=record_int(record, "min_event_ts_ms", 0, MAX_TIMESTAMP_MS),
        )
        last_index = MAX_TIMESTAMP_MS // width_ms
        roller._closed_through = closed = record_int(record, "closed_through", -1, last_index)
        roller._dropped_through = dropped = record_int(record, "dropped_through", -1, closed)
        floor = watermarks.floor_ms
        for name, index, offset in (("closed_through", closed, grace_ms), ("dropped_through", dropped, roller.retention_ms)):
            if index >= 0 and (floor is None or (index + 1) * width_ms + offset > floor):
                raise RollerStateError(f"roller snapshot field {name!r} ({index}) is ahead of the low watermark {floor}")
        counts = record["counts"]
        check_record_fields(counts, Counts._fields, "roller snapshot field 'counts'")
        roller._counts = [record_int(counts, name, 0, 2**63) for name in Counts._fields]
        received, on_time, late, too_old, dead, _ = roller._counts
        if received != on_time + late + too_old + dead:
            raise RollerStateError("roller snapshot field 'counts' breaks received == on_time + late + too_old + dead_lettered")
        roller._reasons = _reasons(record["dead_letter_reasons"], dead)
        for name, store, low, high in (("open", roller._open, closed + 1, last_index), ("closed", roller._closed, dropped + 1, closed)):
            items = record[name]
            if not isinstance(items, list):
                raise RollerStateError(f"roller snapshot field {name!r} must be a list, got {type(items).__name__}")
            for item in items:
                check_record_fields(item, ("index", *_STATE_COUNTERS, "aggregates"), f"roller snapshot {name} bucket")
                index = record_int(item, "index", low, high)
                if index in roller._open or index in roller._closed:
                    raise RollerStateError(f"roller snapshot lists bucket {index} twice")
                store[index] = _state(item, aggregation.from_record)
        _check_totals(roller)
        return roller


_VERSION = 1
_STATE_COUNTERS = ("events", "late_events", "dead_letters", "corrections")
_RECORD_FIELDS = (
    "version", "width_ms", "grace_ms", "retention_ms", "max_future_ms", "min_event_ts_ms", "watermarks",
    "closed_through", "dropped_through", "counts", "dead_letter_reasons", "open", "closed",
)  # fmt: skip


def _reasons(value: object, dead_lettered: int) -> dict[str, int]:
    if not isinstance(value, Mapping) or len(value) > MAX_REASONS + 1:
        raise RollerStateError(f"roller snapshot field 'dead_letter_reasons' must be a mapping of at most {MAX_REASONS + 1} reasons")
    reasons = {}
    for reason in value:
        if reason.__class__ is not str or not 0 < len(reason) <= _MAX_REASON_LENGTH:
            raise RollerStateError(f"roller snapshot dead-letter reason {reason!r} must be a non-empty str")
        reasons[reason] = record_int(value, reason, 1, dead_lettered)
    if sum(reasons.values()) != dead_lettered:
        raise RollerStateError("roller snapshot field 'dead_letter_reasons' does not add up to counts.dead_lettered")
    return reasons


def _state(item: Mapping[str, Any], from_record: Callable[[Any], Any]) -> _State:
    state = _State()
    for name in _STATE_COUNTERS:
        setattr(state, name, record_int(item, name, 0, 2**63))
    aggregates = item["aggregates"]
    if not isinstance(aggregates, Mapping):
        raise RollerStateError(f"roller snapshot field 'aggregates' must be a mapping, got {type(aggregates).__name__}")
    for key, agg in aggregates.items():
        if key.__class__ is not str or not key:
            raise RollerStateError(f"roller snapshot aggregate key {key!r} must be a non-empty str")
        try:
            state.aggregates[key] = from_record(agg)
        except (ValueError, TypeError) as exc:
            raise RollerStateError(f"roller snapshot aggregate of key {key!r} is invalid: {exc}") from exc
    return state


def _check_totals(roller: BucketRoller[Any, Any]) -> None:
    states = [*roller._open.values(), *roller._closed.values()]
    counts = roller.counts()
    for name, limit in (("events", counts.on_time), ("late_events", counts.late), ("dead_letters", counts.dead_lettered), ("corrections", counts.corrections)):
        total = sum(getattr(state, name) for state in states)
        if total > limit:
            raise RollerStateError(f"roller snapshot buckets hold {total} {name}, more than the {limit} counted")
