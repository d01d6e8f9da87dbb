"""Which offset each agent must be handed next, and what to do when faust hands over something else.

faust's consumer can skip records around a rebalance: its delivery loop keeps a read
offset per partition and drops every record below it, and its offset-gap bookkeeping
then lets the commit pass records no agent was handed (see
:mod:`streams.worker.faust_patches` for the causes found). A skipped record is a
silently wrong aggregate, so the worker does not rely on faust getting this right:
stage 2's agent (the one per-record path left on faust; stage 1 reads with librdkafka,
see :mod:`streams.worker.stage1`) passes every record through an :class:`OffsetGuard` first.

* A record at the expected offset, or below it (re-read after a rebalance), is handed
  on, unless it was handed over already since the partition was assigned (a copy
  faust had buffered before a seek, fetched again): handling it twice could turn it late.
* A record *past* it means records were skipped: it is not handled, and the guard
  asks for a seek back to the expected offset (once per ``retry_ms`` while the gap
  lasts). If ``attempts`` seeks do not bring the expected record, the log really has
  no record there (transaction markers, compaction, retention) and the gap is
  accepted: one pause of about ``attempts * retry_ms`` per such gap.
* A partition with nothing handed over for a while that is fetched past the expected
  offset, or not fetched at all, is *stalled*: :meth:`OffsetGuard.stalled` names it so
  the worker can seek it back, or rejoin the group.

After a rebalance the expected offset of a partition comes from the agent's own
checkpoint (what its state already holds, see :meth:`OffsetGuard.expect`), not from
faust's committed offset, so a commit that ran past unhandled records is caught as
a gap on the first record. Kafka-free and clock-free: fed offsets and times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Hashable, NamedTuple

from streams.worker.processor import FetchState

__all__ = ["OffsetGuard", "Skip", "Stall"]


class Skip(NamedTuple):
    """A record not to handle: past the expected offset (a gap: seek back to ``expected`` if ``seek``), or
    one already handed over since the partition was assigned (a buffered copy a seek fetched again)."""

    expected: int
    got: int
    seek: bool


class Stall(NamedTuple):
    """A partition whose agent was handed nothing for a while: the offset to read it again from (None if
    unknown), and whether the consumer is still fetching it (then faust holds or dropped the records)."""

    expected: int | None
    fetching: bool


class OffsetGuard:
    """Per assigned partition: the next offset its agent expects, and when it was last handed a record.

    ``retry_ms`` is the least time between two seeks for one gap; after ``attempts``
    (at least 1) seeks that did not bring the expected offset the gap is accepted and
    listed in :attr:`accepted` as (partition, gap) for the caller to report and clear.
    """

    def __init__(self, retry_ms: int = 1_000, attempts: int = 3) -> None:
        self.retry_ms = retry_ms
        self.attempts = attempts
        self.accepted: list[tuple[Hashable, Skip]] = []
        self.sought = 0
        self._next: dict[Hashable, int] = {}
        self._handed: dict[Hashable, int] = {}  # the last offset handed over since the partition was assigned
        self._at: dict[Hashable, int] = {}
        self._seeks: dict[Hashable, tuple[int, int, int]] = {}  # partition -> (expected, seeks so far, last seek at)

    def assign(self, partitions: Iterable[Hashable], now_ms: int) -> None:
        """A new assignment: forget partitions no longer held; every partition's stall clock starts now.

        A partition held before and after keeps its expected offset (records re-read
        from the committed offset are below it and pass).
        """
        held = set(partitions)
        for tp in set(self._next) - held:
            del self._next[tp]
        self._handed.clear()  # the consumer starts every partition again from its committed offset
        for tp in set(self._seeks) - held:
            del self._seeks[tp]
        self._at = {tp: now_ms for tp in held}

    def restart_clocks(self, now_ms: int) -> None:
        """Every held partition's stall clock starts now (a recovery kept them paused until now)."""
        self._at = dict.fromkeys(self._at, now_ms)

    def knows(self, partition: Hashable) -> bool:
        """True if the guard has an expected offset for ``partition``."""
        return partition in self._next

    def expect(self, partition: Hashable, offset: int) -> None:
        """Set the next offset ``partition`` must be handed (from the agent's checkpoint, 0 without one)."""
        self._next[partition] = offset

    def check(self, partition: Hashable, offset: int, now_ms: int) -> Skip | None:
        """None if the record at ``offset`` may be handled (and is counted as handed over); else why not.

        An unknown partition accepts its first record. A record handed over before in
        this assignment is skipped. A gap asks for a seek at most once per
        ``retry_ms``; the ``attempts``-th time the same gap is seen after that many
        seeks it is accepted and the record handed on.
        """
        if offset <= self._handed.get(partition, -1):
            return Skip(self._next.get(partition, offset + 1), offset, False)
        expected = self._next.get(partition)
        if expected is not None and offset > expected:
            seeks = self._seeks.get(partition)
            if seeks is None or seeks[0] != expected:
                self._seeks[partition] = (expected, 1, now_ms)
                self.sought += 1
                return Skip(expected, offset, True)
            _, count, last = seeks
            if now_ms - last < self.retry_ms:
                return Skip(expected, offset, False)
            if count < self.attempts:
                self._seeks[partition] = (expected, count + 1, now_ms)
                self.sought += 1
                return Skip(expected, offset, True)
            self.accepted.append((partition, Skip(expected, offset, False)))  # the log has no record there
        self._seeks.pop(partition, None)
        if expected is None or offset >= expected:
            self._next[partition] = offset + 1
        if offset > self._handed.get(partition, -1):
            self._handed[partition] = offset
        self._at[partition] = now_ms
        return None

    def stalled(self, fetch: Mapping[Hashable, FetchState], now_ms: int, after_ms: int) -> dict[Hashable, Stall]:
        """Partitions with nothing handed over for ``after_ms`` that are not simply caught up.

        Stalled are: a partition fetched past the record after the last one handed over
        since it was assigned (or past the offset its assignment started from, if none
        was), so faust holds or dropped records; and one the consumer has not fetched at
        all for ``after_ms`` (paused or without a position: a partition that is fetched
        gets a response about every fetch wait, records or not). The checkpoint's
        expected offset plays no part here: records below it must still be delivered
        to know they were. A partition missing from ``fetch`` is not judged.
        """
        out: dict[Hashable, Stall] = {}
        for tp, state in fetch.items():
            if now_ms - self._at.setdefault(tp, now_ms) < after_ms:
                continue
            last = self._handed.get(tp)
            needed = state.position if last is None else last + 1
            if state.fetched_at_ms is None or now_ms - state.fetched_at_ms >= after_ms:
                out[tp] = Stall(needed, fetching=False)
            elif state.fetched_to is not None and needed is not None and needed < state.fetched_to:
                out[tp] = Stall(needed, fetching=True)
        return out
