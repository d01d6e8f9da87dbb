"""Event-time watermarks over the partitions one worker consumes.

A watermark is a promise: "no more events older than this are expected". Each
partition's watermark is the largest event time seen on it minus
``allowed_delay_ms`` (the out-of-order slack). The worker's *low watermark* is the
smallest of those over the partitions that are still *active*, because the slowest
active partition may still deliver older events.

Rules, each decided here and nowhere else:

* **Idle partitions.** A partition that delivered no event for ``idle_timeout_ms``
  of wall-clock time is idle and left out of the minimum, so a partition that went
  quiet cannot stall the watermark forever. An *active* partition that is merely
  slow (its event times lag) does hold the watermark back: that is correct.
* **Everything idle.** When every partition is idle, the low watermark is the
  largest of their watermarks: the stream has gone quiet, so everything known is
  final and the buckets it fills may close.
* **New partitions.** A partition that was just assigned (or observed for the
  first time) and has delivered no event yet has no watermark of its own; it holds
  the low watermark where it is until it delivers an event or goes idle, because
  it may carry older data.
* **Monotone.** The low watermark never moves backwards, not across rebalances,
  not when an idle partition wakes up with old data, not when a new partition
  appears. Data older than the watermark from such a partition is simply *late*;
  the bucket roller routes it to the late-events topic.
* **Wall clock.** ``now_ms`` is always passed in (injectable, never read here).
  Idleness is judged on the wall clock since the last event *processed*, so a
  stalled worker looks like a quiet stream; after a restart, :meth:`assign` gives
  every partition a fresh idle timeout.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streams.core.time.eventtime import check_ms, check_partition
from streams.core.validate import require_int

__all__ = ["PartitionWatermark", "WatermarkTracker"]


@dataclass(frozen=True)
class PartitionWatermark:
    """What the tracker knows about one partition.

    ``max_event_ts_ms`` is None until the partition delivers an event;
    ``watermark_ms`` is then ``max_event_ts_ms - allowed_delay_ms``;
    ``last_seen_ms`` is the wall clock of its last event (or of its assignment).
    """

    partition: int
    max_event_ts_ms: int | None
    watermark_ms: int | None
    last_seen_ms: int
    idle: bool


class WatermarkTracker:
    """Per-partition watermarks and the worker's monotone low watermark.

    ``allowed_delay_ms`` (>= 0) is how far out of order events may arrive;
    ``idle_timeout_ms`` (>= 1) is how long a partition may stay silent, in wall-clock
    time, before it stops holding the watermark back. Raises ConfigError on bad
    values. Not thread-safe: one worker task owns it.
    """

    __slots__ = ("allowed_delay_ms", "idle_timeout_ms", "_max_ts", "_last_seen", "_floor")

    def __init__(self, allowed_delay_ms: int, idle_timeout_ms: int) -> None:
        self.allowed_delay_ms = require_int("allowed_delay_ms", allowed_delay_ms, 0)
        self.idle_timeout_ms = require_int("idle_timeout_ms", idle_timeout_ms, 1)
        self._max_ts: dict[int, int | None] = {}
        self._last_seen: dict[int, int] = {}
        self._floor: int | None = None

    def assign(self, partitions: Iterable[int], now_ms: int) -> None:
        """Start tracking ``partitions`` (a rebalance gave them to this worker).

        A new partition has no watermark until its first event and holds the low
        watermark until then or until it goes idle. A partition already tracked
        keeps its maximum but gets a fresh idle timeout (after a restart, this is
        what stops every partition from looking idle at once). Raises ValueError on
        a bad partition number and InvalidBucketError on a bad ``now_ms``.
        """
        now_ms = check_ms(now_ms, "now_ms")
        for partition in [check_partition(p) for p in partitions]:
            self._max_ts.setdefault(partition, None)
            self._last_seen[partition] = max(self._last_seen.get(partition, now_ms), now_ms)

    def revoke(self, partitions: Iterable[int]) -> None:
        """Stop tracking ``partitions``; the low watermark keeps its value (monotone).

        Unknown partitions are ignored. If one comes back later it starts afresh,
        as a new partition.
        """
        for partition in [check_partition(p) for p in partitions]:
            self._max_ts.pop(partition, None)
            self._last_seen.pop(partition, None)

    def observe(self, partition: int, event_ts_ms: int, now_ms: int) -> None:
        """Record an event with time ``event_ts_ms`` read from ``partition`` at wall clock ``now_ms``.

        An unknown partition is assigned implicitly. Feed only plausible event
        times (the roller does not observe future or pre-epoch ones), since one
        absurd timestamp would push the watermark and close buckets early.
        Raises InvalidBucketError naming the field on a non-int time.
        """
        partition = check_partition(partition)
        event_ts_ms = check_ms(event_ts_ms, "event_ts_ms")
        now_ms = check_ms(now_ms, "now_ms")
        previous = self._max_ts.get(partition)
        if previous is None or event_ts_ms > previous:
            self._max_ts[partition] = event_ts_ms
        last = self._last_seen.get(partition)
        if last is None or now_ms > last:
            self._last_seen[partition] = now_ms

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
        for partition, max_ts in self._max_ts.items():
            active = self._last_seen[partition] > idle_before
            if max_ts is None:
                if active:
                    return None  # a fresh partition may still bring older data
                continue
            if active:
                any_active = True
                if lowest is None or max_ts < lowest:
                    lowest = max_ts
            elif highest is None or max_ts > highest:
                highest = max_ts
        chosen = lowest if any_active else highest
        return None if chosen is None else chosen - self.allowed_delay_ms

    def max_event_ts(self, partition: int) -> int | None:
        """The largest event time seen on ``partition`` (None if none, or unknown partition)."""
        return self._max_ts.get(partition)

    @property
    def floor_ms(self) -> int | None:
        """The last low watermark returned (None if none yet); no clock needed."""
        return self._floor

    def partitions(self, now_ms: int) -> tuple[PartitionWatermark, ...]:
        """Return what is known of each tracked partition at ``now_ms``, by partition number."""
        now_ms = check_ms(now_ms, "now_ms")
        out = []
        for partition in sorted(self._max_ts):
            max_ts = self._max_ts[partition]
            last = self._last_seen[partition]
            out.append(
                PartitionWatermark(
                    partition,
                    max_ts,
                    None if max_ts is None else max_ts - self.allowed_delay_ms,
                    last,
                    last <= now_ms - self.idle_timeout_ms,
                )
            )
        return tuple(out)
