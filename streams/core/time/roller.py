"""The bucket roller: the one place that decides when an event-time bucket closes.

This is the state machine the faust worker drives, with the semantics of Kafka
Streams' grace period + emit-on-close and Flink's allowed lateness with a side
output (faust's own windowed tables expire by wall clock and know no watermark).
The roller holds no aggregates: the worker keeps those (its stage-1 store) and asks
the roller where each event belongs and which buckets to emit.

* :meth:`BucketRoller.classify` places an event read from a partition against
  *that partition's* watermark (:meth:`~streams.core.time.watermark.WatermarkTracker.partition_watermark`)
  and closed-through bucket (:meth:`BucketRoller.closed_for`), never against
  another partition's progress, so a partition handed to another worker keeps its
  on-time events on time:

  ============  ===============================================  ===================
  placement     when                                             goes to
  ============  ===============================================  ===================
  ON_TIME       its bucket is open                               the bucket's state
  LATE          partition watermark >= bucket close (end +       late-events topic
                grace), or the bucket was already closed for
                that partition, within retention
  TOO_OLD       partition watermark >= bucket end + retention    late-events topic
  FUTURE        event time > now + max_future_ms                 dead letters
  BEFORE_EPOCH  event time < min_event_ts_ms (default 0)         dead letters
  ============  ===============================================  ===================

  Nothing is dropped silently: every event offered to :meth:`add` is counted under
  exactly one placement, and ``received == on_time + late + too_old +
  dead_lettered`` always holds (decode failures enter via :meth:`count_dead_letter`).
* :meth:`BucketRoller.advance` closes, per partition, every bucket whose close time
  is at or below that partition's watermark, and returns (:class:`Advance`) the
  (bucket, partition) slices whose state the caller must emit now and the buckets
  closed for every partition tracked
  (:class:`~streams.core.time.eventtime.ClosedBucket`, with the late events and dead
  letters counted against each while it was open). A bucket never closes before
  end + grace. A bucket is reported closed once, unless a partition it was not closed
  for (newly assigned, with an older checkpoint) brings on-time events into it, or the
  caller says it holds state for it (recovered after the close; see :meth:`advance`).
  Buckets that saw nothing are not returned.
* Closed-through is per partition (:meth:`closed_for`); :attr:`closed_through` is
  what is closed for every tracked partition. :meth:`restore_closed_through` records
  what a partition's durable checkpoint says was closed before a restart or by its
  last owner. After a crash some partitions' checkpoints may have reached the broker
  and others not: a partition whose checkpoint did not must have its re-read records
  folded into their buckets again, while one whose checkpoint did must see them as late.
* Retention: an event whose bucket ended ``retention_ms`` or more before the
  watermark is TOO_OLD rather than LATE. The roller keeps state only for buckets
  not closed yet (two counters each), so memory is bounded by the open window
  however long the worker runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from streams.core.errors import InvalidArgumentError
from streams.core.time.buckets import MAX_TIMESTAMP_MS, Bucket, TimeBuckets
from streams.core.time.eventtime import (
    _MAX_MS,
    REASON_BEFORE_MIN,
    REASON_FUTURE,
    REASON_LATE,
    REASON_TOO_OLD,
    ClosedBucket,
    Counts,
    Placement,
    PlacementKind,
    check_ms,
    check_partition,
)
from streams.core.time.watermark import WatermarkTracker
from streams.core.validate import require_int

__all__ = ["Advance", "BucketRoller", "MAX_REASONS"]

#: Distinct dead-letter reasons counted by name; further ones count under "other".
MAX_REASONS = 32
_MAX_REASON_LENGTH = 200
_ON_TIME, _LATE, _TOO_OLD = PlacementKind.ON_TIME, PlacementKind.LATE, PlacementKind.TOO_OLD
# Builds a Placement without the call through its NamedTuple __new__ (once per event).
_new_placement = tuple.__new__


@dataclass(frozen=True)
class Advance:
    """What one :meth:`BucketRoller.advance` closed.

    ``slices`` are the held (bucket index, partition) pairs whose state the caller
    must emit now, in index order; ``closed`` the buckets now closed for every
    partition tracked, each once (the bucket-closed reports).
    """

    slices: tuple[tuple[int, int], ...]
    closed: tuple[ClosedBucket, ...]


class _State:
    """What a bucket not closed yet reports at its close."""

    __slots__ = ("late_events", "dead_letters")

    def __init__(self) -> None:
        self.late_events = 0
        self.dead_letters = 0


class BucketRoller:
    """Classification, closing and conservation counts over event-time buckets (see the module docstring).

    ``retention_ms`` (>= ``buckets.grace_ms``) is how long after its *end* a bucket's
    late events are still LATE rather than TOO_OLD; ``max_future_ms`` (>= 0, default
    1 h) how far ahead of the wall clock an event time may be; ``min_event_ts_ms``
    (>= 0) the oldest acceptable event time. ``watermarks`` is owned by the roller
    from now on: call ``roller.watermarks.assign/revoke`` on rebalances. Partitions
    are the tracker's input numbers. Raises ConfigError on a bad setting. Not
    thread-safe: one worker task owns it.
    """

    def __init__(
        self,
        buckets: TimeBuckets,
        retention_ms: int,
        *,
        watermarks: WatermarkTracker,
        max_future_ms: int = 3_600_000,
        min_event_ts_ms: int = 0,
    ) -> None:
        if not isinstance(buckets, TimeBuckets):
            raise InvalidArgumentError(f"buckets must be a TimeBuckets, got {type(buckets).__name__}")
        if not isinstance(watermarks, WatermarkTracker):
            raise InvalidArgumentError(f"watermarks must be a WatermarkTracker, got {type(watermarks).__name__}")
        self.buckets = buckets
        self.retention_ms = require_int("retention_ms", retention_ms, buckets.grace_ms, MAX_TIMESTAMP_MS)
        self.max_future_ms = require_int("max_future_ms", max_future_ms, 0, MAX_TIMESTAMP_MS)
        self.min_event_ts_ms = require_int("min_event_ts_ms", min_event_ts_ms, 0, MAX_TIMESTAMP_MS)
        self.watermarks = watermarks
        self._open: dict[int, _State] = {}  # buckets not closed yet that saw an event
        self._closed: dict[int, int] = {}  # partition -> every bucket with index <= this is closed for it
        self._counts = [0, 0, 0, 0, 0]  # Counts fields, in order
        self._reasons: dict[str, int] = {}
        self._bucket_cache: dict[int, Bucket] = {}

    # -- classification -------------------------------------------------------------

    def classify(self, event_ts_ms: int, now_ms: int, *, partition: int = 0) -> Placement:
        """Return where an event with time ``event_ts_ms``, read from ``partition``, belongs at wall clock ``now_ms``.

        Changes no counter or state (it may ratchet the tracker's low watermark,
        which is monotone anyway). Raises InvalidBucketError naming the field if
        ``event_ts_ms`` or ``now_ms`` is not an int (bool, float, None, str ...),
        InvalidArgumentError for a bad partition.
        """
        if partition.__class__ is not int or partition < 0:
            partition = check_partition(partition)
        return self._classify(event_ts_ms, now_ms, partition)

    def _classify(self, event_ts_ms: int, now_ms: int, partition: int) -> Placement:
        # check_ms's own fast test, inline: this runs once per event.
        ts = event_ts_ms if event_ts_ms.__class__ is int and -_MAX_MS <= event_ts_ms <= _MAX_MS \
            else check_ms(event_ts_ms, "event_ts_ms")
        now = now_ms if now_ms.__class__ is int and -_MAX_MS <= now_ms <= _MAX_MS else check_ms(now_ms, "now_ms")
        if ts < self.min_event_ts_ms:
            return Placement(PlacementKind.BEFORE_EPOCH, None, self.watermarks.floor_ms, 0, REASON_BEFORE_MIN)
        if ts - now > self.max_future_ms or ts > MAX_TIMESTAMP_MS:
            return Placement(PlacementKind.FUTURE, None, self.watermarks.floor_ms, 0, REASON_FUTURE)
        index = ts // self.buckets.width_ms
        bucket = self._bucket(index)
        watermark = self.watermarks.partition_watermark_checked(partition, now)
        if watermark is not None:
            # The watermark is monotone, so this also covers every bucket closed before.
            if bucket.end_ms + self.retention_ms <= watermark:
                return Placement(PlacementKind.TOO_OLD, bucket, watermark, watermark - bucket.close_ms, REASON_TOO_OLD)
            if bucket.close_ms <= watermark:
                return Placement(PlacementKind.LATE, bucket, watermark, watermark - bucket.close_ms, REASON_LATE)
        if index <= self._closed.get(partition, -1):  # closed by an earlier watermark, or per the checkpoint
            lateness = 0 if watermark is None else max(0, watermark - bucket.close_ms)
            return Placement(PlacementKind.LATE, bucket, watermark, lateness, REASON_LATE)
        return _new_placement(Placement, (_ON_TIME, bucket, watermark, 0, ""))  # type: ignore[no-any-return]

    def _bucket(self, index: int) -> Bucket:
        bucket = self._bucket_cache.get(index)
        if bucket is None:
            if len(self._bucket_cache) >= 256:
                self._bucket_cache.clear()
            bucket = self._bucket_cache[index] = self.buckets.bucket_at_index(index)
        return bucket

    # -- events ---------------------------------------------------------------------

    def add(self, event_ts_ms: int, now_ms: int, *, partition: int = 0) -> Placement:
        """Classify an event read from ``partition`` and count it.

        Returns the placement: the caller folds ON_TIME events into its state for
        ``placement.bucket``, routes LATE and TOO_OLD ones to the late-events topic
        (with ``placement.bucket`` and ``lateness_ms``) and FUTURE / BEFORE_EPOCH
        ones to dead letters (``placement.reason``). Plausible event times (all but
        the dead-letter kinds) feed the watermark tracker. Raises InvalidBucketError
        for a non-int time, InvalidArgumentError for a bad partition; then nothing changes.
        """
        if partition.__class__ is not int or partition < 0:
            partition = check_partition(partition)
        placement = self._classify(event_ts_ms, now_ms, partition)
        kind = placement.kind
        counts = self._counts
        if kind is _ON_TIME:
            index = placement.bucket.index  # type: ignore[union-attr]
            if index not in self._open:
                self._open[index] = _State()
            counts[1] += 1
        elif kind is _LATE:
            index = placement.bucket.index  # type: ignore[union-attr]
            if index > self._closed.get(partition, -1):  # not closed for it yet: report it with the bucket
                state = self._open.get(index)
                if state is None:
                    state = self._open[index] = _State()
                state.late_events += 1
            counts[2] += 1
        elif kind is _TOO_OLD:
            counts[3] += 1
        else:
            self._count_reason(placement.reason)
        counts[0] += 1
        if placement.bucket is not None:  # _classify checked both times
            self.watermarks.observe_checked(partition, event_ts_ms, now_ms)
        return placement

    def count_dead_letter(self, reason: str, event_ts_ms: int | None = None) -> None:
        """Count one event the caller dead-lettered itself (e.g. it failed to decode).

        Keeps ``received == on_time + late + too_old + dead_lettered``. ``reason``
        (a non-empty str, ideally from a small fixed set) is counted by name; the
        first MAX_REASONS distinct reasons are kept, later ones count as "other".
        With a valid ``event_ts_ms`` whose bucket is open and has seen an event, the
        dead letter is also reported with that bucket at close. Raises InvalidArgumentError on
        a bad reason.
        """
        if not isinstance(reason, str) or not reason or len(reason) > _MAX_REASON_LENGTH:
            raise InvalidArgumentError(f"reason must be a non-empty str of at most {_MAX_REASON_LENGTH} characters, got {reason!r}")
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

    # -- closing --------------------------------------------------------------------

    def advance(self, now_ms: int, held: Iterable[tuple[int, int]] = ()) -> Advance:
        """Close, per partition, every bucket whose close time <= its watermark at ``now_ms``.

        ``held`` are the (bucket index, partition) pairs the caller holds state for
        (its aggregates). Returned (:class:`Advance`): every held pair whose bucket
        is now closed for its partition, including one closed before (state the
        caller recovered after the close, e.g. from a reassigned partition's
        changelog, to be emitted again); and every bucket that is now closed for
        every tracked partition and saw an event here or is held, each once over the
        roller's life unless held again. A partition closes nothing before its
        watermark is known. Raises InvalidBucketError on a non-int ``now_ms``.
        """
        now = check_ms(now_ms, "now_ms")
        width, grace = self.buckets.width_ms, self.buckets.grace_ms
        tracked = self.watermarks.tracked()
        for partition in tracked:
            watermark = self.watermarks.partition_watermark(partition, now)
            if watermark is None:
                continue
            closable = (watermark - grace) // width - 1  # last index with close <= watermark
            if closable > self._closed.get(partition, -1):
                self._closed[partition] = closable
        held = list(held)
        slices = tuple(sorted((i, p) for i, p in held if i <= self._closed.get(p, -1)))
        everywhere = min((self._closed.get(p, -1) for p in tracked), default=-1)
        due = {i for i in self._open if i <= everywhere}
        due.update(i for i, _ in slices if i <= everywhere)
        closed = []
        watermark = self.watermarks.low_watermark(now)
        for index in sorted(due):
            state = self._open.pop(index, None)
            late, dead = (0, 0) if state is None else (state.late_events, state.dead_letters)
            closed.append(ClosedBucket(self._bucket(index), late, dead, now, _stated_watermark(watermark, self._bucket(index))))
        return Advance(slices, tuple(closed))

    def restore_closed_through(self, partition: int, index: int) -> None:
        """Record that ``partition``'s durable checkpoint says buckets through ``index`` were closed.

        From then on :meth:`classify` places events read from ``partition`` into those
        buckets as LATE. Only raises the value; other partitions are unaffected.
        Raises InvalidArgumentError on a bad partition or an ``index`` that is not an int >= -1.
        """
        partition = check_partition(partition)
        if index.__class__ is not int or not -1 <= index <= MAX_TIMESTAMP_MS // self.buckets.width_ms:
            raise InvalidArgumentError(f"closed-through index must be an int in -1..{MAX_TIMESTAMP_MS // self.buckets.width_ms}, got {index!r}")
        if index > self._closed.get(partition, -1):
            self._closed[partition] = index

    # -- observation ----------------------------------------------------------------

    @property
    def closed_through(self) -> int:
        """Every bucket at or below this index is closed for every tracked partition (-1 before any, or none tracked)."""
        tracked = self.watermarks.tracked()
        return min((self._closed.get(p, -1) for p in tracked), default=-1)

    def closed_for(self, partition: int) -> int:
        """The highest bucket index closed for events read from ``partition``.

        Raised by its watermark (:meth:`advance`) and by its checkpoint
        (:meth:`restore_closed_through`); never lowered.
        """
        return self._closed.get(partition, -1)

    def counts(self) -> Counts:
        """Return the event counters (see :class:`Counts` for the invariant)."""
        return Counts(*self._counts)

    def dead_letter_counts(self) -> Mapping[str, int]:
        """Return dead letters counted per reason (a read-only copy)."""
        return MappingProxyType(dict(self._reasons))

    def open_bucket_count(self) -> int:
        """Return how many buckets not closed yet have seen an event (the roller's only per-bucket state)."""
        return len(self._open)


def _stated_watermark(watermark: int | None, bucket: Bucket) -> int:
    """The watermark a bucket-closed report states: the low watermark, or the bucket's close if that is later.

    Per-partition closing can close a bucket before the low watermark reaches it
    (every tracked partition passed it, but an idle one's floor lags).
    """
    return bucket.close_ms if watermark is None or watermark < bucket.close_ms else watermark
