"""streams.worker.offsets.OffsetGuard: the next offset each agent must be handed, gaps and stalls."""

from __future__ import annotations

from streams.worker.offsets import Skip, OffsetGuard, Stall
from streams.worker.processor import FetchState

P1, P2 = ("partials", 1), ("events", 2)


def test_an_unknown_partition_accepts_its_first_record_and_then_expects_the_next() -> None:
    guard = OffsetGuard()
    assert not guard.knows(P1)
    assert guard.check(P1, 40, now_ms=0) is None
    assert guard.knows(P1)
    assert guard.check(P1, 41, now_ms=1) is None
    assert guard.check(P1, 43, now_ms=2) == Skip(expected=42, got=43, seek=True)


def test_records_below_the_expected_offset_pass_as_re_reads_without_moving_it_back() -> None:
    guard = OffsetGuard()
    guard.expect(P1, 10)
    assert guard.check(P1, 7, now_ms=0) is None  # faust sought back to its committed offset
    assert guard.check(P1, 12, now_ms=0) == Skip(10, 12, True)  # 10 is still what must come next


def test_a_checkpoint_after_a_rebalance_turns_a_commit_past_unhandled_records_into_a_gap() -> None:
    guard = OffsetGuard()
    guard.assign([P2], now_ms=0)
    guard.expect(P2, 500)  # the checkpoint vouches for offsets up to 499
    assert guard.check(P2, 620, now_ms=5) == Skip(500, 620, True)  # faust's commit said 620
    assert guard.check(P2, 500, now_ms=6) is None  # the seek brought them back
    assert guard.check(P2, 501, now_ms=6) is None


def test_a_gap_asks_for_one_seek_per_retry_interval_and_skips_the_buffered_records_meanwhile() -> None:
    guard = OffsetGuard(retry_ms=1_000, attempts=3)
    guard.expect(P1, 5)
    assert guard.check(P1, 9, now_ms=0) == Skip(5, 9, True)
    assert guard.check(P1, 10, now_ms=999) == Skip(5, 10, False)  # fetched before the seek
    assert guard.check(P1, 9, now_ms=1_000) == Skip(5, 9, True)  # still no 5: seek again
    assert guard.sought == 2 and guard.accepted == []


def test_a_gap_that_survives_every_attempt_is_accepted_as_offsets_the_log_does_not_hold() -> None:
    guard = OffsetGuard(retry_ms=100, attempts=2)
    guard.expect(P1, 5)  # 5..8: a transaction marker, compacted away, or past retention
    assert guard.check(P1, 9, now_ms=0) == Skip(5, 9, True)
    assert guard.check(P1, 9, now_ms=100) == Skip(5, 9, True)
    assert guard.check(P1, 9, now_ms=150) == Skip(5, 9, False)
    assert guard.check(P1, 9, now_ms=200) is None
    assert guard.accepted == [(P1, Skip(5, 9, False))]
    assert guard.check(P1, 10, now_ms=201) is None
    assert guard.check(P1, 12, now_ms=202) == Skip(11, 12, True)  # a new gap starts its own attempts


def fetched(start: int | None, to: int | None, at_ms: int | None = None) -> FetchState:
    """A partition's fetch state: its assignment started at ``start``, fetched to ``to``, last response at ``at_ms``."""
    return FetchState(highwater=to, fetched_at_ms=at_ms, position=start, fetched_to=to)


def test_a_partition_fetched_past_its_committed_offset_with_nothing_handed_is_stalled_after_the_timeout() -> None:
    guard = OffsetGuard()
    guard.assign([P1, P2], now_ms=0)
    fetch = {P1: fetched(30, 45, 9_990), P2: fetched(10, 10, 9_990)}  # P1 fetched 30..44; P2 caught up
    assert guard.stalled(fetch, now_ms=9_999, after_ms=10_000) == {}
    assert guard.stalled(fetch, now_ms=10_000, after_ms=10_000) == {P1: Stall(30, fetching=True)}


def test_records_handed_over_keep_it_from_counting_as_stalled() -> None:
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    assert guard.check(P1, 44, now_ms=9_000) is None
    assert guard.stalled({P1: fetched(30, 45, 19_000)}, now_ms=20_000, after_ms=10_000) == {}  # handed up to it
    assert guard.stalled({P1: fetched(30, 60, 18_000)}, now_ms=18_999, after_ms=10_000) == {}  # quiet < timeout
    assert guard.stalled({P1: fetched(30, 60, 18_000)}, now_ms=19_000, after_ms=10_000) == {P1: Stall(45, True)}


def test_an_assigned_partition_the_consumer_has_not_fetched_for_the_timeout_is_stalled_even_if_caught_up() -> None:
    """faust can leave a partition paused after a rebalance: no fetch response comes for it at all."""
    guard = OffsetGuard()
    guard.assign([P1, P2], now_ms=0)
    fetch = {P1: fetched(7, 7, 500), P2: fetched(3, 3, None)}  # last response at 0.5 s; none ever
    assert guard.stalled(fetch, now_ms=10_000, after_ms=10_000) == {P2: Stall(3, fetching=False)}
    assert guard.stalled(fetch, now_ms=10_500, after_ms=10_000) == {P1: Stall(7, False), P2: Stall(3, False)}
    fresh = {P1: fetched(7, 7, 10_400), P2: fetched(3, 3, 10_400)}  # an idle partition still gets responses
    assert guard.stalled(fresh, now_ms=10_500, after_ms=10_000) == {}


def test_a_recovery_restarts_every_stall_clock() -> None:
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    guard.restart_clocks(30_000)  # paused for recovery until now
    assert guard.stalled({P1: fetched(3, 3, None)}, now_ms=39_999, after_ms=10_000) == {}
    assert guard.stalled({P1: fetched(3, 3, None)}, now_ms=40_000, after_ms=10_000) == {P1: Stall(3, False)}


def test_a_skipped_record_does_not_count_as_handed_over() -> None:
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    guard.expect(P1, 30)
    assert guard.check(P1, 40, now_ms=5_000) is not None
    assert guard.stalled({P1: fetched(30, 45, 9_900)}, now_ms=10_000, after_ms=10_000) == {P1: Stall(30, True)}


def test_a_new_assignment_forgets_revoked_partitions_and_restarts_every_clock() -> None:
    guard = OffsetGuard()
    guard.assign([P1, P2], now_ms=0)
    assert guard.check(P1, 99, now_ms=1) is None
    guard.assign([P2], now_ms=50_000)
    assert not guard.knows(P1)
    guard.assign([P1, P2], now_ms=60_000)  # P1 back: it starts from its committed offset again
    fetch = {P1: fetched(80, 120, 69_000), P2: fetched(5, 9, 69_000)}
    assert guard.stalled(fetch, now_ms=69_999, after_ms=10_000) == {}
    assert guard.stalled(fetch, now_ms=70_000, after_ms=10_000) == {P1: Stall(80, True), P2: Stall(5, True)}


def test_a_partition_with_no_position_yet_is_judged_only_by_its_fetch_responses() -> None:
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    assert guard.stalled({P1: fetched(None, None, 9_500)}, now_ms=10**4, after_ms=10**4) == {}
    assert guard.stalled({P1: fetched(None, None, None)}, now_ms=10**4, after_ms=10**4) == {P1: Stall(None, False)}


def test_a_checkpoint_ahead_of_everything_fetched_does_not_hide_records_that_were_never_handed_over() -> None:
    """A partition never committed: faust fetched it to its end and handed nothing; its checkpoint says 50."""
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    guard.expect(P1, 50)
    assert guard.stalled({P1: fetched(0, 40, 9_900)}, now_ms=10_000, after_ms=10_000) == {P1: Stall(0, True)}
    assert guard.check(P1, 0, now_ms=10_001) is None  # re-read from 0 after the seek: below 50, handed on
    assert guard.stalled({P1: fetched(0, 40, 19_900)}, now_ms=20_001, after_ms=10_000) == {P1: Stall(1, True)}


def test_a_record_handed_over_before_in_this_assignment_is_skipped_not_handled_twice() -> None:
    """After a seek back to the stall's offset faust hands over its buffered copies and the re-fetched ones."""
    guard = OffsetGuard()
    guard.assign([P1], now_ms=0)
    for offset in (261, 262, 263):
        assert guard.check(P1, offset, now_ms=1) is None
    assert guard.check(P1, 262, now_ms=2) == Skip(264, 262, False)  # the second copy of 262
    assert guard.check(P1, 264, now_ms=3) is None
    guard.assign([P1], now_ms=4)  # a rebalance: faust re-reads from the committed offset, and those count
    assert guard.check(P1, 262, now_ms=5) is None
