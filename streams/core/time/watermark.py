"""Event-time watermarks over the partitions one worker consumes.

A watermark is a promise: "no more events older than this are expected". Each
partition has its own watermark, as each Kafka Streams task has its own stream time:
the event time its records *agree* on, minus ``allowed_delay_ms`` (the out-of-order
slack). The bucket roller judges an event against the watermark of the partition it
was read from, so a partition that moves to another worker keeps its own progress
instead of inheriting the new owner's (see :meth:`WatermarkTracker.partition_watermark`).
The worker's *low watermark* (:meth:`WatermarkTracker.low_watermark`) is the smallest
over the partitions that are still *active*.

Rules, each decided here and nowhere else:

* **Agreement.** A partition's event time is the ``agreement``-th largest event time
  it delivered (``agreement=1``: the largest, the classic rule). With ``agreement=2``
  one record stamped far ahead by a bad clock cannot move the watermark and close
  every bucket before its time: a second record must reach that time too. The
  outlier itself is not lost; it waits, on time, in its own future bucket.
* **Idle partitions.** A partition that delivered no event for ``idle_timeout_ms``
  of wall-clock time is idle and left out of the minimum, so a partition that went
  quiet cannot stall the watermark forever. An idle partition's own event time is
  its largest, but never beyond the wall clock (an outlier still cannot run ahead of
  real time), and its watermark follows the low watermark of the active ones, so its
  last buckets close. An *active* partition that is merely slow (its event times lag)
  holds its own buckets and the low watermark back: that is correct.
* **Unread is not quiet.** Silence alone does not make a partition idle: one the
  worker knows has unread records (its high watermark is past what was handled) or
  whose broker has not answered a fetch lately (a dead leader, a paused or
  recovering partition) is *held active* (:meth:`hold_active`). Otherwise it would
  take the others' progress, close its buckets, and turn its own backlog late.
* **Everything idle.** When every partition is idle, the low watermark is the
  largest of their watermarks: the stream has gone quiet, so everything known is
  final and the buckets it fills may close.
* **New partitions.** A partition that was just assigned (or observed for the
  first time) and has delivered no event yet has no watermark of its own; it holds
  the low watermark where it is until it delivers an event or goes idle, because
  it may carry older data. :meth:`restore` gives a reassigned partition the event
  time its last owner checkpointed.
* **Monotone.** Watermarks never move backwards: not the low watermark, and not a
  partition's, across rebalances, or when an idle partition wakes up with old data.
  Data older than the watermark from such a partition is simply *late*; the bucket
  roller routes it to the late-events topic.
* **Wall clock.** ``now_ms`` is always passed in (injectable, never read here).
  Idleness is judged on the wall clock since the last event *processed*, so a
  stalled worker looks like a quiet stream; after a restart, :meth:`assign` gives
  every partition a fresh idle timeout.
"""

from __future__ import annotations

from collections.abc import Iterable
from bisect import insort
from dataclasses import dataclass

from streams.core.time.eventtime import check_ms, check_partition
from streams.core.validate import require_int

__all__ = ["PartitionWatermark", "WatermarkTracker"]


@dataclass(frozen=True)
class PartitionWatermark:
    """What the tracker knows about one partition.

    ``max_event_ts_ms`` is None until the partition delivers an event;
    ``agreed_event_ts_ms`` the event time its records agree on (None until
    ``agreement`` of them arrived); ``watermark_ms`` the partition's watermark (see
    :meth:`WatermarkTracker.partition_watermark`, None before one is known);
    ``last_seen_ms`` is the wall clock of its last event (or of its assignment).
    """

    partition: int
    max_event_ts_ms: int | None
    agreed_event_ts_ms: int | None
    watermark_ms: int | None
    last_seen_ms: int
    idle: bool


class WatermarkTracker:
    """Per-partition watermarks and the worker's monotone low watermark.

    ``allowed_delay_ms`` (>= 0) is how far out of order events may arrive;
    ``idle_timeout_ms`` (>= 1) is how long a partition may stay silent, in wall-clock
    time, before it stops holding the watermark back; ``agreement`` (1..16) how many
    records must reach an event time before a partition's watermark moves to it.
    Raises ConfigError on bad values. Not thread-safe: one worker task owns it.
    """

    __slots__ = ("allowed_delay_ms", "idle_timeout_ms", "agreement", "_top", "_last_seen", "_floor", "_own_floor")

    def __init__(self, allowed_delay_ms: int, idle_timeout_ms: int, *, agreement: int = 1) -> None:
        self.allowed_delay_ms = require_int("allowed_delay_ms", allowed_delay_ms, 0)
        self.idle_timeout_ms = require_int("idle_timeout_ms", idle_timeout_ms, 1)
        self.agreement = require_int("agreement", agreement, 1, 16)
        self._top: dict[int, list[int]] = {}  # partition -> its largest event times, largest first, at most `agreement`
        self._last_seen: dict[int, int] = {}
        self._floor: int | None = None
        self._own_floor: dict[int, int] = {}  # partition -> the last watermark partition_watermark() returned

    def assign(self, partitions: Iterable[int], now_ms: int) -> None:
        """Start tracking ``partitions`` (a rebalance gave them to this worker).

        A new partition has no watermark until its first events and holds the low
        watermark until then or until it goes idle. A partition already tracked
        keeps its event times but gets a fresh idle timeout (after a restart, this is
        what stops every partition from looking idle at once). Raises ValueError on
        a bad partition number and InvalidBucketError on a bad ``now_ms``.
        """
        now_ms = check_ms(now_ms, "now_ms")
        for partition in [check_partition(p) for p in partitions]:
            self._top.setdefault(partition, [])
            self._last_seen[partition] = max(self._last_seen.get(partition, now_ms), now_ms)

    def revoke(self, partitions: Iterable[int]) -> None:
        """Stop tracking ``partitions``; the low watermark keeps its value (monotone).

        Unknown partitions are ignored. If one comes back later it starts afresh,
        as a new partition (its new owner restores it from a checkpoint).
        """
        for partition in [check_partition(p) for p in partitions]:
            self._top.pop(partition, None)
            self._last_seen.pop(partition, None)
            self._own_floor.pop(partition, None)

    def observe(self, partition: int, event_ts_ms: int, now_ms: int) -> None:
        """Record an event with time ``event_ts_ms`` read from ``partition`` at wall clock ``now_ms``.

        An unknown partition is assigned implicitly. Feed only plausible event
        times (the roller does not observe future or pre-epoch ones).
        Raises InvalidBucketError naming the field on a non-int time.
        """
        self.observe_checked(check_partition(partition), check_ms(event_ts_ms, "event_ts_ms"), check_ms(now_ms, "now_ms"))

    def observe_checked(self, partition: int, event_ts_ms: int, now_ms: int) -> None:
        """:meth:`observe` for arguments the caller already checked (the roller, once per event)."""
        top = self._top.get(partition)
        if top is None:
            top = self._top[partition] = []
        agreement = self.agreement
        if len(top) < agreement or event_ts_ms > top[-1]:
            if not top or event_ts_ms >= top[0]:  # a new largest: the usual case, events mostly come in order
                top.insert(0, event_ts_ms)
            else:
                insort(top, event_ts_ms, key=_neg)
            if len(top) > agreement:
                del top[agreement:]
        last = self._last_seen.get(partition)
        if last is None or now_ms > last:
            self._last_seen[partition] = now_ms

    def hold_active(self, partitions: Iterable[int], now_ms: int) -> None:
        """Keep ``partitions`` from going idle at wall clock ``now_ms``: each is known to be behind.

        Call it for partitions with unread records or no recent fetch response; they
        keep holding their own buckets and the low watermark (a partition with no
        event time yet holds it where it is). Untracked partitions are ignored.
        Raises InvalidBucketError naming the field on a bad ``now_ms``.
        """
        now_ms = check_ms(now_ms, "now_ms")
        for partition in [check_partition(p) for p in partitions]:
            last = self._last_seen.get(partition)
            if last is not None and now_ms > last:
                self._last_seen[partition] = now_ms

    def restore(self, partition: int, event_times: Iterable[int], now_ms: int) -> None:
        """Give ``partition`` the largest event times a checkpoint recorded (:meth:`top_event_ts`).

        The partition resumes where its last owner was, outlier-proof as before.
        Only raises what is known. Raises InvalidBucketError naming the field on a non-int time.
        """
        partition = check_partition(partition)
        for ts in list(event_times)[: self.agreement]:
            self.observe(partition, check_ms(ts, "event_times"), now_ms)

    def _own(self, partition: int, idle: bool, now_ms: int) -> int | None:
        """A partition's own event time: agreed; when idle, also its largest up to the wall clock."""
        top = self._top[partition]
        agreed = top[self.agreement - 1] if len(top) >= self.agreement else None
        if idle and top:
            largest = top[0] if top[0] < now_ms else now_ms
            if agreed is None or largest > agreed:
                return largest
        return agreed

    def low_watermark(self, now_ms: int) -> int | None:
        """Return the low watermark at wall clock ``now_ms``, or None before any is known.

        Min over active partitions' watermarks; the max over all when every
        partition is idle; held where it was while an active partition has no
        watermark yet. Never less than a value it returned before. Raises
        InvalidBucketError on a non-int ``now_ms``.
        """
        now_ms = check_ms(now_ms, "now_ms")
        candidate = self._candidate(now_ms)
        if candidate is not None and (self._floor is None or candidate > self._floor):
            self._floor = candidate
        return self._floor

    def _candidate(self, now_ms: int) -> int | None:
        idle_before = now_ms - self.idle_timeout_ms
        lowest: int | None = None
        highest: int | None = None
        any_active = False
        for partition in self._top:
            active = self._last_seen[partition] > idle_before
            own = self._own(partition, not active, now_ms)
            if own is None:
                if active:
                    return None  # a fresh partition may still bring older data
                continue
            if active:
                any_active = True
                if lowest is None or own < lowest:
                    lowest = own
            elif highest is None or own > highest:
                highest = own
        chosen = lowest if any_active else highest
        return None if chosen is None else chosen - self.allowed_delay_ms

    def partition_watermark(self, partition: int, now_ms: int) -> int | None:
        """Return the watermark of ``partition`` at ``now_ms`` (None before one is known, or if untracked).

        An active partition's watermark is its agreed event time minus the allowed
        delay; an idle one's is also at least the low watermark. Never less than a
        value returned before for the partition while it stays assigned.
        """
        return self.partition_watermark_checked(partition, check_ms(now_ms, "now_ms"))

    def partition_watermark_checked(self, partition: int, now_ms: int) -> int | None:
        """:meth:`partition_watermark` for a ``now_ms`` the caller already checked (the roller, once per event)."""
        last = self._last_seen.get(partition)
        if last is None:
            return None
        idle = last <= now_ms - self.idle_timeout_ms
        own = self._own(partition, idle, now_ms)
        value = None if own is None else own - self.allowed_delay_ms
        if idle:
            low = self.low_watermark(now_ms)
            if low is not None and (value is None or low > value):
                value = low
        floor = self._own_floor.get(partition)
        if value is None or (floor is not None and floor >= value):
            return floor
        self._own_floor[partition] = value
        return value

    def max_event_ts(self, partition: int) -> int | None:
        """The largest event time seen on ``partition`` (None if none, or unknown partition)."""
        top = self._top.get(partition)
        return top[0] if top else None

    def agreed_event_ts(self, partition: int) -> int | None:
        """The event time ``agreement`` records of ``partition`` reached (None before, or unknown partition)."""
        top = self._top.get(partition)
        return top[self.agreement - 1] if top and len(top) >= self.agreement else None

    def top_event_ts(self, partition: int) -> tuple[int, ...]:
        """The ``agreement`` largest event times of ``partition``, largest first (what a checkpoint keeps)."""
        return tuple(self._top.get(partition, ()))

    def tracked(self) -> tuple[int, ...]:
        """The partitions tracked now (assigned or observed, not revoked), in no fixed order."""
        return tuple(self._top)

    @property
    def floor_ms(self) -> int | None:
        """The last low watermark returned (None if none yet); no clock needed."""
        return self._floor

    def partitions(self, now_ms: int) -> tuple[PartitionWatermark, ...]:
        """Return what is known of each tracked partition at ``now_ms``, by partition number."""
        now_ms = check_ms(now_ms, "now_ms")
        out = []
        for partition in sorted(self._top):
            last = self._last_seen[partition]
            out.append(
                PartitionWatermark(
                    partition,
                    self.max_event_ts(partition),
                    self.agreed_event_ts(partition),
                    self.partition_watermark(partition, now_ms),
                    last,
                    last <= now_ms - self.idle_timeout_ms,
                )
            )
        return tuple(out)


def _neg(value: int) -> int:
    return -value
