"""Watermarks: per-partition max minus delay, min over active partitions, idle rule, monotone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, InvalidBucketError
from streams.core.time.watermark import WatermarkTracker


def test_partition_watermark_is_its_max_event_time_minus_the_allowed_delay() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=100, idle_timeout_ms=10_000)
    tracker.observe(0, 5_000, now_ms=0)
    tracker.observe(0, 4_000, now_ms=1)  # out of order: the max stays
    assert tracker.low_watermark(now_ms=2) == 4_900
    (only,) = tracker.partitions(now_ms=2)
    assert (only.max_event_ts_ms, only.watermark_ms, only.idle) == (5_000, 4_900, False)


def test_low_watermark_is_the_minimum_over_active_partitions() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=10_000)
    tracker.observe(0, 9_000, now_ms=0)
    tracker.observe(1, 3_000, now_ms=0)
    tracker.observe(2, 7_000, now_ms=0)
    assert tracker.low_watermark(now_ms=1) == 3_000


def test_an_idle_partition_stops_holding_the_watermark_after_the_idle_timeout() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 1_000, now_ms=0)  # partition 0 then goes quiet
    tracker.observe(1, 8_000, now_ms=500)
    assert tracker.low_watermark(now_ms=999) == 1_000
    tracker.observe(1, 9_000, now_ms=1_000)
    assert tracker.low_watermark(now_ms=1_000) == 9_000  # 0 is idle now


def test_an_active_slow_partition_holds_the_watermark_back() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    for step in range(100):
        now = step * 500
        tracker.observe(0, 100_000 + now, now_ms=now)  # fast partition
        tracker.observe(1, 1_000 + step, now_ms=now)  # slow but alive
        assert tracker.low_watermark(now_ms=now) == 1_000 + step


def test_when_every_partition_is_idle_the_watermark_is_the_largest_of_theirs() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=10, idle_timeout_ms=1_000)
    tracker.observe(0, 2_000, now_ms=0)
    tracker.observe(1, 6_000, now_ms=0)
    assert tracker.low_watermark(now_ms=999) == 1_990
    assert tracker.low_watermark(now_ms=1_000) == 5_990


def test_a_new_partition_without_events_holds_the_watermark_until_it_goes_idle() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 5_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) == 5_000
    tracker.assign([1], now_ms=10)
    tracker.observe(0, 9_000, now_ms=20)
    assert tracker.low_watermark(now_ms=20) == 5_000  # held, not moved back
    assert tracker.low_watermark(now_ms=1_010) == 9_000  # partition 1 went idle


def test_the_watermark_never_moves_back_when_a_partition_brings_older_data() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 5_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) == 5_000
    tracker.observe(1, 1_000, now_ms=1)  # new partition, older data: it is late
    assert tracker.low_watermark(now_ms=1) == 5_000
    tracker.observe(1, 7_000, now_ms=2)
    tracker.observe(0, 8_000, now_ms=2)
    assert tracker.low_watermark(now_ms=2) == 7_000


def test_revoking_partitions_keeps_the_watermark_and_a_returning_partition_starts_afresh() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 5_000, now_ms=0)
    tracker.observe(1, 9_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) == 5_000
    tracker.revoke([0, 1, 7])
    assert tracker.low_watermark(now_ms=1) == 5_000
    assert tracker.partitions(now_ms=1) == ()
    tracker.assign([0], now_ms=2)
    (fresh,) = tracker.partitions(now_ms=2)
    assert fresh.max_event_ts_ms is None


def test_assign_gives_known_partitions_a_fresh_idle_timeout() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 2_000, now_ms=0)
    tracker.observe(1, 6_000, now_ms=0)
    tracker.assign([0, 1], now_ms=50_000)  # e.g. after a restart
    assert tracker.low_watermark(now_ms=50_000) == 2_000  # not "all idle"


@pytest.mark.parametrize(
    ("delay", "idle", "field"),
    [(-1, 1_000, "allowed_delay_ms"), (True, 1_000, "allowed_delay_ms"), (0, 0, "idle_timeout_ms"), (0, 1.5, "idle_timeout_ms")],
)
def test_bad_settings_raise_a_config_error_naming_the_field(delay: object, idle: object, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        WatermarkTracker(delay, idle)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [True, 1.0, None, "5"])
def test_non_int_times_raise_an_error_naming_the_field(bad: object) -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        tracker.observe(0, bad, now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="now_ms"):
        tracker.low_watermark(bad)  # type: ignore[arg-type]


def _reference_candidate(state: dict[int, tuple[int | None, int]], delay: int, idle: int, now: int) -> int | None:
    """The rule, spelled out naively: min over active; max if all idle; held by a fresh active one."""
    active = {p: m for p, (m, seen) in state.items() if now - seen < idle}
    if any(m is None for m in active.values()):
        return None
    known = [m for m in active.values() if m is not None]
    if known:
        return min(known) - delay
    everything = [m for m, _ in state.values() if m is not None]
    return max(everything) - delay if everything else None


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("observe"), st.integers(0, 3), st.integers(0, 50_000), st.integers(0, 700)),
        st.tuples(st.just("assign"), st.integers(0, 3), st.just(0), st.integers(0, 700)),
        st.tuples(st.just("revoke"), st.integers(0, 3), st.just(0), st.integers(0, 700)),
        st.tuples(st.just("wait"), st.just(0), st.just(0), st.integers(0, 3_000)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, delay=st.integers(0, 2_000), idle=st.integers(1, 2_000))
def test_low_watermark_is_monotone_and_follows_the_reference_rule(
    ops: list[tuple[str, int, int, int]], delay: int, idle: int
) -> None:
    tracker = WatermarkTracker(allowed_delay_ms=delay, idle_timeout_ms=idle)
    state: dict[int, tuple[int | None, int]] = {}
    now = 0
    previous: int | None = None
    for op, partition, ts, step in ops:
        now += step
        if op == "observe":
            tracker.observe(partition, ts, now)
            old_max, _ = state.get(partition, (None, now))
            state[partition] = (ts if old_max is None else max(old_max, ts), now)
        elif op == "assign":
            tracker.assign([partition], now)
            old_max, _ = state.get(partition, (None, now))
            state[partition] = (old_max, now)
        elif op == "revoke":
            tracker.revoke([partition])
            state.pop(partition, None)
        low = tracker.low_watermark(now)
        candidate = _reference_candidate(state, delay, idle, now)
        expected = previous if candidate is None else candidate if previous is None else max(previous, candidate)
        assert low == expected
        previous = low


# -- agreement and per-partition watermarks ----------------------------------------


def test_with_agreement_two_one_record_far_ahead_does_not_move_the_watermark() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=10_000, agreement=2)
    tracker.observe(0, 1_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) is None  # one record is not agreement
    tracker.observe(0, 2_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) == 1_000
    tracker.observe(0, 3_000_000, now_ms=0)  # a bad clock, 50 minutes ahead
    assert tracker.partition_watermark(0, now_ms=0) == tracker.low_watermark(now_ms=0) == 2_000
    tracker.observe(0, 3_000, now_ms=0)
    assert tracker.low_watermark(now_ms=0) == 3_000  # real time goes on
    tracker.observe(0, 3_000_000, now_ms=0)  # a second record agrees: now it counts
    assert tracker.low_watermark(now_ms=0) == 3_000_000


def test_an_idle_partition_counts_its_largest_time_but_never_beyond_the_wall_clock() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000, agreement=2)
    tracker.observe(0, 10_000, now_ms=10_000)
    tracker.observe(0, 11_000, now_ms=10_000)
    tracker.observe(0, 3_000_000, now_ms=10_000)  # the outlier
    assert tracker.partition_watermark(0, now_ms=10_500) == 11_000
    assert tracker.partition_watermark(0, now_ms=20_000) == 20_000  # idle: up to the wall clock only
    assert tracker.partition_watermark(0, now_ms=30_000) == 30_000


def test_agreement_one_is_the_classic_largest_time_rule_even_when_idle() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 3_000_000, now_ms=0)
    assert tracker.partition_watermark(0, now_ms=5_000) == 3_000_000


def test_each_partition_has_its_own_watermark_and_an_idle_one_follows_the_active_ones() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=100, idle_timeout_ms=1_000)
    tracker.assign([0, 1, 2], now_ms=0)
    tracker.observe(0, 50_000, now_ms=0)
    tracker.observe(1, 20_000, now_ms=0)  # taken over from a worker that was behind
    assert tracker.partition_watermark(0, 10) == 49_900
    assert tracker.partition_watermark(1, 10) == 19_900  # its own, not the other's
    assert tracker.partition_watermark(2, 10) is None  # nothing yet
    tracker.observe(0, 60_000, now_ms=1_500)
    tracker.observe(1, 21_000, now_ms=1_500)
    assert tracker.partition_watermark(2, 1_500) == tracker.low_watermark(1_500) == 20_900  # idle: follows


def test_restore_gives_a_reassigned_partition_its_checkpointed_times_and_a_partition_watermark_never_falls() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000, agreement=2)
    tracker.assign([3], now_ms=0)
    tracker.restore(3, (9_000, 8_000), now_ms=0)
    assert tracker.top_event_ts(3) == (9_000, 8_000) and tracker.partition_watermark(3, 0) == 8_000
    tracker.observe(3, 9_500, now_ms=0)
    assert tracker.partition_watermark(3, 0) == 9_000
    tracker.observe(3, 1_000, now_ms=0)  # old data changes nothing
    assert tracker.partition_watermark(3, 0) == 9_000


@pytest.mark.parametrize("bad", [0, 17, True, 2.0, "2"])
def test_a_bad_agreement_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ConfigError, match="agreement"):
        WatermarkTracker(0, 1, agreement=bad)  # type: ignore[arg-type]


def test_a_partition_held_active_keeps_holding_the_watermark_however_long_it_is_silent() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.observe(0, 1_000, now_ms=0)  # 0 has unread records (or a dead leader): silent, not quiet
    for now in range(0, 10_000, 500):
        tracker.observe(1, 8_000 + now, now_ms=now)
        tracker.hold_active([0], now_ms=now)
        assert tracker.low_watermark(now_ms=now) == 1_000
        assert tracker.partition_watermark(0, now_ms=now) == 1_000  # it never takes the others' progress
    assert tracker.low_watermark(now_ms=10_499) == 1_000  # last held at 9 500
    assert tracker.low_watermark(now_ms=10_500) == 17_500  # no longer held: both idle, the largest wins


def test_hold_active_ignores_untracked_partitions_and_refuses_a_bad_clock() -> None:
    tracker = WatermarkTracker(allowed_delay_ms=0, idle_timeout_ms=1_000)
    tracker.hold_active([7], now_ms=5)
    assert tracker.tracked() == ()
    with pytest.raises(InvalidBucketError, match="now_ms"):
        tracker.hold_active([0], now_ms="soon")  # type: ignore[arg-type]
