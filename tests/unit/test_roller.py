"""The bucket roller: placement, close in order exactly once, per-partition closed-through, conservation, memory."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.time.buckets import TimeBuckets
from streams.core.time.eventtime import PlacementKind
from streams.core.time.roller import MAX_REASONS, BucketRoller
from streams.core.time.watermark import WatermarkTracker

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z
B0 = T0 // 60_000  # the index of its one-minute bucket


def make_roller(
    width: str = "1m",
    grace_ms: int = 10_000,
    retention_ms: int = 600_000,
    delay_ms: int = 0,
    idle_ms: int = 60_000,
    max_future_ms: int = 3_600_000,
) -> BucketRoller:
    return BucketRoller(
        TimeBuckets(width, grace=grace_ms),
        retention_ms,
        watermarks=WatermarkTracker(delay_ms, idle_ms),
        max_future_ms=max_future_ms,
    )


def _state(roller: BucketRoller) -> tuple[Any, ...]:
    return (roller.counts(), dict(roller.dead_letter_counts()), roller.open_bucket_count(), roller.closed_through)


# -- placement --------------------------------------------------------------------


def test_an_event_in_an_open_bucket_is_on_time_and_opens_its_bucket_once() -> None:
    roller = make_roller()
    placement = roller.add(T0 + 5, now_ms=T0 + 5)
    assert placement.kind is PlacementKind.ON_TIME and placement.bucket.start_ms == T0
    roller.add(T0 + 6, now_ms=T0 + 6)
    assert roller.open_bucket_count() == 1 and roller.counts().on_time == 2


def test_an_event_is_late_once_the_watermark_reaches_its_bucket_close() -> None:
    roller = make_roller(grace_ms=10_000)
    roller.add(T0 + 70_000, now_ms=T0)  # watermark -> T0 + 70 s = close of bucket 0
    placement = roller.classify(T0 + 1, now_ms=T0)
    assert placement.kind is PlacementKind.LATE
    assert placement.bucket.start_ms == T0 and placement.lateness_ms == 0
    assert placement.reason == "bucket closed"
    assert roller.classify(T0 + 60_000, now_ms=T0).kind is PlacementKind.ON_TIME


def test_an_event_beyond_retention_is_too_old_and_still_routed_with_a_reason() -> None:
    roller = make_roller(grace_ms=0, retention_ms=120_000)
    roller.add(T0 + 180_000, now_ms=T0)
    placement = roller.add(T0 + 59_999, now_ms=T0)
    assert placement.kind is PlacementKind.TOO_OLD and placement.reason == "bucket beyond retention"
    assert placement.lateness_ms == 120_000
    assert roller.classify(T0 + 60_000, now_ms=T0).kind is PlacementKind.LATE
    roller.advance(now_ms=T0).closed  # closing changes nothing about it
    assert roller.classify(T0 + 59_999, now_ms=T0).kind is PlacementKind.TOO_OLD
    assert roller.classify(T0 + 60_000, now_ms=T0).kind is PlacementKind.LATE


def test_an_event_too_far_ahead_of_the_wall_clock_is_a_future_dead_letter() -> None:
    roller = make_roller(max_future_ms=1_000)
    assert roller.classify(T0 + 1_000, now_ms=T0).kind is PlacementKind.ON_TIME
    placement = roller.add(T0 + 1_001, now_ms=T0)
    assert placement.kind is PlacementKind.FUTURE and placement.bucket is None
    assert placement.reason == "timestamp in the future"
    assert roller.watermarks.floor_ms is None  # a bogus clock does not push the watermark
    assert roller.classify(2**62, now_ms=2**62).kind is PlacementKind.FUTURE  # past year 9999


def test_a_negative_event_time_is_a_before_epoch_dead_letter() -> None:
    roller = make_roller()
    placement = roller.add(-1, now_ms=T0)
    assert placement.kind is PlacementKind.BEFORE_EPOCH and placement.bucket is None
    assert roller.counts().dead_lettered == 1
    assert roller.dead_letter_counts() == {"timestamp before the minimum event time": 1}


def test_classify_changes_no_counter_and_no_bucket_state() -> None:
    roller = make_roller()
    roller.add(T0, now_ms=T0)
    roller.restore_closed_through(1, B0 + 5)
    before = _state(roller)
    for ts in (T0, T0 - 10**9, -5, T0 + 10**9):
        for partition in (0, 1):
            roller.classify(ts, now_ms=T0, partition=partition)
    assert _state(roller) == before


# -- closing ----------------------------------------------------------------------


def test_a_bucket_closes_at_end_plus_grace_not_before_and_only_once() -> None:
    roller = make_roller(grace_ms=10_000)
    roller.add(T0 + 1, now_ms=T0)
    roller.add(T0 + 2, now_ms=T0)
    roller.add(T0 + 69_999, now_ms=T0)  # bucket 1; watermark one ms short of bucket 0's close
    assert roller.advance(now_ms=T0).closed == () and roller.closed_through == B0 - 1
    roller.add(T0 + 70_000, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0 + 1).closed
    assert closed.bucket.start_ms == T0 and closed.watermark_ms == closed.bucket.close_ms
    assert (closed.late_events, closed.dead_letters, closed.closed_at_ms) == (0, 0, T0 + 1)
    assert roller.closed_through == closed.bucket.index
    assert roller.advance(now_ms=T0 + 2).closed == ()


def test_late_events_and_dead_letters_seen_before_the_close_are_reported_with_the_bucket() -> None:
    roller = make_roller(grace_ms=0)
    roller.add(T0, now_ms=T0)
    roller.add(T0 + 60_000, now_ms=T0)  # watermark = close of bucket 0
    assert roller.add(T0 + 5, now_ms=T0).kind is PlacementKind.LATE
    roller.count_dead_letter("bad payload", event_ts_ms=T0 + 60_001)  # bucket 1 is open
    (closed,) = roller.advance(now_ms=T0).closed
    assert closed.late_events == 1
    assert roller.add(T0 + 6, now_ms=T0).kind is PlacementKind.LATE  # after the close: not reported again
    roller.add(T0 + 200_000, now_ms=T0)
    (second,) = roller.advance(now_ms=T0).closed
    assert second.bucket.start_ms == T0 + 60_000 and (second.late_events, second.dead_letters) == (0, 1)
    assert roller.counts().late == 2


def test_a_bucket_that_saw_only_late_events_is_still_closed_and_reported() -> None:
    roller = make_roller(grace_ms=0)
    roller.add(T0 + 60_000, now_ms=T0)  # bucket 1 open; watermark = close of bucket 0, not closed yet
    roller.add(T0 + 5, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0).closed
    assert closed.bucket.start_ms == T0 and closed.late_events == 1


def test_an_idle_partition_does_not_hold_a_bucket_open_past_the_idle_timeout() -> None:
    roller = make_roller(grace_ms=0, idle_ms=5_000)
    roller.watermarks.assign([0, 1], now_ms=T0)
    roller.add(T0 + 1, now_ms=T0, partition=1)  # partition 1 then goes quiet
    for second in range(1, 5):
        roller.add(T0 + 60_000 + second, now_ms=T0 + second * 1_000, partition=0)
        assert roller.advance(now_ms=T0 + second * 1_000).closed == ()
    roller.add(T0 + 60_010, now_ms=T0 + 5_000, partition=0)
    (closed,) = roller.advance(now_ms=T0 + 5_000).closed
    assert closed.bucket.start_ms == T0


def test_an_active_slow_partition_holds_its_bucket_open() -> None:
    roller = make_roller(grace_ms=0, idle_ms=5_000)
    roller.watermarks.assign([0, 1], now_ms=T0)
    for second in range(60):
        now = T0 + second * 1_000
        roller.add(T0 + 120_000 + second, now_ms=now, partition=0)
        roller.add(T0 + second, now_ms=now, partition=1)  # slow, alive, on time
        assert roller.advance(now_ms=now).closed == ()
    assert roller.counts().late == 0


def test_an_empty_bucket_is_not_emitted() -> None:
    roller = make_roller(grace_ms=0)
    roller.add(T0, now_ms=T0)
    roller.add(T0 + 10 * 60_000, now_ms=T0)
    assert [c.bucket.start_ms for c in roller.advance(now_ms=T0).closed] == [T0]
    assert roller.closed_through == B0 + 9  # closed, though nothing was emitted for 1..9


def test_buckets_the_caller_holds_are_returned_when_due_even_if_closed_before() -> None:
    roller = make_roller(grace_ms=0)
    assert roller.advance(now_ms=T0, held=[(B0, 0)]).closed == ()  # no watermark yet: nothing closes
    roller.add(T0 + 180_000, now_ms=T0)
    first = roller.advance(now_ms=T0, held=[(B0 - 5, 0), (B0 + 2, 0), (B0 + 3, 0)])
    assert [c.bucket.index for c in first.closed] == [B0 - 5, B0 + 2]
    assert first.slices == ((B0 - 5, 0), (B0 + 2, 0))
    assert roller.advance(now_ms=T0, held=[(B0 + 3, 0)]).closed == ()
    again = roller.advance(now_ms=T0, held=[(B0 + 1, 0)])  # recovered after its close: emit it (again)
    assert again.slices == ((B0 + 1, 0),)
    (closed,) = again.closed
    assert closed.bucket.index == B0 + 1 and (closed.late_events, closed.dead_letters) == (0, 0)


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("event"), st.integers(0, 2), st.integers(-30_000, 300_000), st.integers(0, 3_000)),
        st.tuples(st.just("advance"), st.just(0), st.just(0), st.integers(0, 20_000)),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(
    steps=_steps,
    grace=st.integers(0, 30_000),
    delay=st.integers(0, 10_000),
    idle=st.integers(1, 15_000),
)
def test_buckets_close_in_order_each_once_and_never_before_end_plus_grace(
    steps: list[tuple[str, int, int, int]], grace: int, delay: int, idle: int
) -> None:
    roller = make_roller(width="10s", grace_ms=grace, retention_ms=grace + 60_000, delay_ms=delay, idle_ms=idle)
    now = T0
    highest_seen: int | None = None
    touched: set[int] = set()  # buckets that received an event since they were last reported closed
    for op, partition, offset, step in steps:
        now += step
        if op == "event":
            placement = roller.add(T0 + offset, now_ms=now, partition=partition)
            if placement.bucket is not None:
                highest_seen = T0 + offset if highest_seen is None else max(highest_seen, T0 + offset)
                touched.add(placement.bucket.index)
        indexes = []
        for closed in roller.advance(now_ms=now).closed:
            assert closed.bucket.close_ms <= closed.watermark_ms
            assert highest_seen is not None and closed.watermark_ms <= highest_seen - delay
            assert closed.bucket.index <= roller.closed_through
            assert closed.bucket.index in touched  # reported again only for events it had not reported
            touched.discard(closed.bucket.index)
            indexes.append(closed.bucket.index)
        assert indexes == sorted(indexes)


# -- per-partition closed-through -------------------------------------------------


def test_a_restored_closed_through_makes_that_partition_late_and_no_other() -> None:
    roller = make_roller(grace_ms=0)
    roller.restore_closed_through(1, B0 + 2)
    roller.restore_closed_through(1, B0)  # only ever raised
    assert (roller.closed_for(0), roller.closed_for(1), roller.closed_through) == (-1, B0 + 2, -1)
    placement = roller.add(T0 + 120_000, now_ms=T0, partition=1)
    assert placement.kind is PlacementKind.LATE and placement.reason == "bucket closed"
    assert placement.lateness_ms == 0  # the watermark has not reached its close
    assert roller.add(T0 + 120_001, now_ms=T0, partition=0).kind is PlacementKind.ON_TIME
    assert roller.add(T0 + 180_000, now_ms=T0, partition=1).kind is PlacementKind.ON_TIME
    assert roller.counts()[:3] == (3, 2, 1)


def test_a_late_event_in_a_bucket_closed_before_a_restart_is_not_reported_with_it_again() -> None:
    roller = make_roller(grace_ms=0)
    roller.restore_closed_through(0, B0)
    roller.add(T0 + 60_000, now_ms=T0)  # watermark = close of bucket 0
    assert roller.add(T0 + 5, now_ms=T0).kind is PlacementKind.LATE
    assert roller.open_bucket_count() == 1  # bucket 1 only
    assert roller.advance(now_ms=T0).closed == ()


def test_each_partition_closes_on_its_own_watermark_not_on_another_s() -> None:
    roller = make_roller(grace_ms=0)
    roller.restore_closed_through(1, B0)  # partition 1's last owner had closed through B0
    roller.watermarks.assign([1, 2], T0)
    roller.add(T0 + 5 * 60_000, now_ms=T0, partition=2)
    roller.add(T0 + 60_000 + 5, now_ms=T0, partition=1)
    roller.advance(now_ms=T0)
    assert (roller.closed_for(1), roller.closed_for(2), roller.closed_for(7)) == (B0, B0 + 4, -1)
    assert roller.closed_through == B0  # closed for every tracked partition
    # Bucket B0 + 2 is closed for partition 2, whose records reached B0 + 5, but still open
    # for partition 1 (taken over from another worker), whose records reached only B0 + 1.
    assert roller.add(T0 + 2 * 60_000, now_ms=T0, partition=2).kind is PlacementKind.LATE
    assert roller.add(T0 + 2 * 60_000, now_ms=T0, partition=1).kind is PlacementKind.ON_TIME


# -- conservation -----------------------------------------------------------------


_events = st.lists(
    st.tuples(
        st.one_of(  # offsets: mostly near now, some late, too old, future, negative
            st.integers(-120_000, 20_000),
            st.integers(-3_000_000, -600_000),
            st.integers(3_600_001, 10**8),
            st.just(None),
        ),
        st.integers(0, 2),
        st.integers(0, 4_000),
        st.booleans(),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(events=_events, restored=st.integers(-1, 3))
def test_every_event_is_counted_once_and_every_bucket_with_an_on_time_event_closes_once(
    events: list[tuple[int | None, int, int, bool]], restored: int
) -> None:
    roller = make_roller(grace_ms=5_000, retention_ms=300_000, delay_ms=2_000, idle_ms=10_000)
    if restored >= 0:
        roller.restore_closed_through(2, B0 + restored)
    now = T0
    on_time: set[int] = set()
    late_reported: Counter[int] = Counter()
    emitted: list[int] = []
    touched: set[int] = set()
    for offset, partition, step, advance in events:
        now += step
        if offset is None:
            roller.count_dead_letter("undecodable")
        else:
            ts = now + offset if now + offset >= 0 else -1
            placement = roller.add(ts, now_ms=now, partition=partition)
            if placement.kind is PlacementKind.ON_TIME:
                assert placement.bucket.index > roller.closed_for(partition)
                on_time.add(placement.bucket.index)
                touched.add(placement.bucket.index)
            elif placement.kind is PlacementKind.LATE and placement.bucket.index > roller.closed_for(partition):
                late_reported[placement.bucket.index] += 1
        if advance:
            for closed in roller.advance(now_ms=now).closed:
                assert closed.late_events == late_reported.pop(closed.bucket.index, 0)
                assert closed.bucket.index in touched or closed.late_events or closed.dead_letters
                touched.discard(closed.bucket.index)
                emitted.append(closed.bucket.index)
        c = roller.counts()
        assert c.received == c.on_time + c.late + c.too_old + c.dead_lettered
    assert roller.counts().received == len(events)
    roller.add(now + 10 * 60_000, now_ms=now + 10 * 60_000)
    emitted += [closed.bucket.index for closed in roller.advance(now_ms=now + 10**7).closed]
    assert on_time <= set(emitted)


def test_a_random_mix_with_late_events_conserves_every_count() -> None:
    rng = random.Random(7)
    roller = make_roller(width="1m", grace_ms=20_000, delay_ms=5_000)
    kinds: Counter[PlacementKind] = Counter()
    now = T0
    for _ in range(5_000):
        now += rng.randint(0, 100)
        kinds[roller.add(now - rng.randint(0, 30_000), now_ms=now, partition=rng.randint(0, 3)).kind] += 1
        if rng.random() < 0.01:
            roller.advance(now_ms=now).closed
    c = roller.counts()
    assert (c.on_time, c.late, c.too_old) == (kinds[PlacementKind.ON_TIME], kinds[PlacementKind.LATE], kinds[PlacementKind.TOO_OLD])
    assert c.received == 5_000 and c.late > 0  # the mix really had late events


# -- retention and memory ---------------------------------------------------------


def test_memory_stays_bounded_over_ten_thousand_buckets() -> None:
    width_ms, retention_ms = 1_000, 30_000
    roller = make_roller(width="1s", grace_ms=2_000, retention_ms=retention_ms, idle_ms=5_000)
    emitted = 0
    for i in range(10_000):
        now = T0 + i * width_ms
        for partition in range(3):
            roller.add(now + partition * 100, now_ms=now, partition=partition)
        roller.add(now - 60_000, now_ms=now)  # too old: counted, not stored
        emitted += len(roller.advance(now_ms=now).closed)
        assert roller.open_bucket_count() <= 4  # the open window: current bucket plus those in grace
    assert emitted >= 9_990
    assert roller.counts().too_old == 10_000


def test_retention_must_cover_the_grace_period() -> None:
    from streams.core.errors import ConfigError

    with pytest.raises(ConfigError, match="retention_ms"):
        make_roller(grace_ms=10_000, retention_ms=9_999)


def test_dead_letter_reasons_are_counted_by_name_up_to_a_bound() -> None:
    roller = make_roller()
    for i in range(MAX_REASONS + 10):
        roller.count_dead_letter(f"reason {i}")
    reasons = roller.dead_letter_counts()
    assert len(reasons) == MAX_REASONS + 1 and reasons["other"] == 10
    assert roller.counts().dead_lettered == roller.counts().received == MAX_REASONS + 10
