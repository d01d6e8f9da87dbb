"""The bucket roller: placement, emit-on-close in order, conservation, retention, corrections, snapshots."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.time.buckets import TimeBuckets
from streams.core.time.eventtime import Aggregation, ClosedBucket, LateCorrectionError, PlacementKind
from streams.core.time.roller import MAX_REASONS, BucketRoller
from streams.core.time.watermark import WatermarkTracker

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z


def _sum_count_from_record(record: Any) -> tuple[int, int]:
    if not (isinstance(record, list) and len(record) == 2 and all(type(x) is int for x in record)):
        raise ValueError(f"not a [count, sum] pair: {record!r}")
    return (record[0], record[1])


#: Aggregate = (count, sum) of int values; a stand-in for streams.core.aggregate.Stats.
SUM_COUNT: Aggregation[int, tuple[int, int]] = Aggregation(
    empty=lambda: (0, 0),
    add=lambda agg, value: (agg[0] + 1, agg[1] + value),
    to_record=list,
    from_record=_sum_count_from_record,
)


def make_roller(
    width: str = "1m",
    grace_ms: int = 10_000,
    retention_ms: int = 600_000,
    delay_ms: int = 0,
    idle_ms: int = 60_000,
    max_future_ms: int = 3_600_000,
) -> BucketRoller[int, tuple[int, int]]:
    return BucketRoller(
        TimeBuckets(width, grace=grace_ms),
        retention_ms,
        aggregation=SUM_COUNT,
        watermarks=WatermarkTracker(delay_ms, idle_ms),
        max_future_ms=max_future_ms,
    )


# -- placement --------------------------------------------------------------------


def test_an_event_in_an_open_bucket_is_on_time_and_folds_into_its_key() -> None:
    roller = make_roller()
    placement = roller.add("k", T0 + 5, 7, now_ms=T0 + 5)
    assert placement.kind is PlacementKind.ON_TIME and placement.bucket.start_ms == T0
    roller.add("k", T0 + 6, 3, now_ms=T0 + 6)
    assert roller.open_bucket_count() == 1 and roller.open_events() == 2


def test_an_event_is_late_once_the_watermark_reaches_its_bucket_close() -> None:
    roller = make_roller(grace_ms=10_000)
    roller.add("k", T0 + 70_000, 1, now_ms=T0)  # watermark -> T0 + 70 s = close of bucket 0
    placement = roller.classify(T0 + 1, now_ms=T0)
    assert placement.kind is PlacementKind.LATE
    assert placement.bucket.start_ms == T0 and placement.lateness_ms == 0
    assert placement.reason == "bucket closed"
    assert roller.classify(T0 + 60_000, now_ms=T0).kind is PlacementKind.ON_TIME


def test_an_event_beyond_retention_is_too_old_and_still_routed_with_a_reason() -> None:
    roller = make_roller(grace_ms=0, retention_ms=120_000)
    roller.add("k", T0 + 180_000, 1, now_ms=T0)
    placement = roller.add("k", T0 + 59_999, 1, now_ms=T0)
    assert placement.kind is PlacementKind.TOO_OLD and placement.reason == "bucket beyond retention"
    assert placement.lateness_ms == 120_000
    assert roller.classify(T0 + 60_000, now_ms=T0).kind is PlacementKind.LATE


def test_an_event_too_far_ahead_of_the_wall_clock_is_a_future_dead_letter() -> None:
    roller = make_roller(max_future_ms=1_000)
    assert roller.classify(T0 + 1_000, now_ms=T0).kind is PlacementKind.ON_TIME
    placement = roller.add("k", T0 + 1_001, 1, now_ms=T0)
    assert placement.kind is PlacementKind.FUTURE and placement.bucket is None
    assert placement.reason == "timestamp in the future"
    assert roller.watermarks.floor_ms is None  # a bogus clock does not push the watermark
    assert roller.classify(2**62, now_ms=2**62).kind is PlacementKind.FUTURE  # past year 9999


def test_a_negative_event_time_is_a_before_epoch_dead_letter() -> None:
    roller = make_roller()
    placement = roller.add("k", -1, 1, now_ms=T0)
    assert placement.kind is PlacementKind.BEFORE_EPOCH and placement.bucket is None
    assert roller.counts().dead_lettered == 1
    assert roller.dead_letter_counts() == {"timestamp before the minimum event time": 1}


def test_classify_changes_no_counter_and_no_bucket_state() -> None:
    roller = make_roller()
    roller.add("k", T0, 1, now_ms=T0)
    before = roller.to_record()
    for ts in (T0, T0 - 10**9, -5, T0 + 10**9):
        roller.classify(ts, now_ms=T0)
    after = roller.to_record()
    del before["watermarks"], after["watermarks"]  # the low watermark may ratchet; it is monotone
    assert after == before


# -- closing ----------------------------------------------------------------------


def test_a_bucket_closes_at_end_plus_grace_not_before_and_only_once() -> None:
    roller = make_roller(grace_ms=10_000)
    roller.add("a", T0 + 1, 5, now_ms=T0)
    roller.add("b", T0 + 2, 6, now_ms=T0)
    roller.add("a", T0 + 69_999, 1, now_ms=T0)  # bucket 1; watermark one ms short of bucket 0's close
    assert roller.advance(now_ms=T0) == []
    roller.add("a", T0 + 70_000, 1, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0 + 1)
    assert closed.bucket.start_ms == T0 and closed.watermark_ms == closed.bucket.close_ms
    assert dict(closed.aggregates) == {"a": (1, 5), "b": (1, 6)}
    assert (closed.events, closed.late_events, closed.closed_at_ms) == (2, 0, T0 + 1)
    assert roller.advance(now_ms=T0 + 2) == []


def test_late_events_seen_before_the_close_are_reported_with_the_bucket() -> None:
    roller = make_roller(grace_ms=0)
    roller.add("a", T0, 1, now_ms=T0)
    roller.add("a", T0 + 60_000, 1, now_ms=T0)  # watermark = close of bucket 0
    assert roller.add("a", T0 + 5, 1, now_ms=T0).kind is PlacementKind.LATE
    roller.count_dead_letter("bad payload", event_ts_ms=T0 + 60_001)  # bucket 1 is open
    (closed,) = roller.advance(now_ms=T0)
    assert (closed.events, closed.late_events) == (1, 1)
    roller.add("b", T0 + 200_000, 1, now_ms=T0)
    (second,) = roller.advance(now_ms=T0)
    assert second.bucket.start_ms == T0 + 60_000 and second.dead_letters == 1


def test_an_idle_partition_does_not_hold_a_bucket_open_past_the_idle_timeout() -> None:
    roller = make_roller(grace_ms=0, idle_ms=5_000)
    roller.watermarks.assign([0, 1], now_ms=T0)
    roller.add("k", T0 + 1, 1, now_ms=T0, partition=1)  # partition 1 then goes quiet
    for second in range(1, 5):
        roller.add("k", T0 + 60_000 + second, 1, now_ms=T0 + second * 1_000, partition=0)
        assert roller.advance(now_ms=T0 + second * 1_000) == []
    roller.add("k", T0 + 60_010, 1, now_ms=T0 + 5_000, partition=0)
    (closed,) = roller.advance(now_ms=T0 + 5_000)
    assert closed.bucket.start_ms == T0


def test_an_active_slow_partition_holds_its_bucket_open() -> None:
    roller = make_roller(grace_ms=0, idle_ms=5_000)
    roller.watermarks.assign([0, 1], now_ms=T0)
    for second in range(60):
        now = T0 + second * 1_000
        roller.add("k", T0 + 120_000 + second, 1, now_ms=now, partition=0)
        roller.add("k", T0 + second, 1, now_ms=now, partition=1)  # slow, alive, on time
        assert roller.advance(now_ms=now) == []
    assert roller.counts().late == 0


def test_an_empty_bucket_is_not_emitted() -> None:
    roller = make_roller(grace_ms=0)
    roller.add("k", T0, 1, now_ms=T0)
    roller.add("k", T0 + 10 * 60_000, 1, now_ms=T0)
    assert [c.bucket.start_ms for c in roller.advance(now_ms=T0)] == [T0]


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
    emitted: list[int] = []
    for op, partition, offset, step in steps:
        now += step
        if op == "event":
            placement = roller.add("k", T0 + offset, 1, now_ms=now, partition=partition)
            if placement.bucket is not None:
                highest_seen = T0 + offset if highest_seen is None else max(highest_seen, T0 + offset)
        for closed in roller.advance(now_ms=now):
            assert closed.bucket.close_ms <= closed.watermark_ms
            assert highest_seen is not None and closed.watermark_ms <= highest_seen - delay
            emitted.append(closed.bucket.index)
    assert emitted == sorted(set(emitted))


# -- conservation and oracle ------------------------------------------------------


_events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        st.one_of(  # offsets: mostly near now, some late, too old, future, negative
            st.integers(-120_000, 20_000),
            st.integers(-3_000_000, -600_000),
            st.integers(3_600_001, 10**8),
            st.just(None),
        ),
        st.integers(-50, 50),
        st.integers(0, 2),
        st.integers(0, 4_000),
        st.booleans(),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(events=_events)
def test_every_event_is_counted_once_and_closed_plus_open_events_equal_on_time(
    events: list[tuple[str, int | None, int, int, int, bool]],
) -> None:
    roller = make_roller(grace_ms=5_000, retention_ms=300_000, delay_ms=2_000, idle_ms=10_000)
    now = T0
    oracle: dict[int, Counter[str]] = defaultdict(Counter)
    sums: dict[tuple[int, str], int] = defaultdict(int)
    closed: list[ClosedBucket[tuple[int, int]]] = []
    for key, offset, value, partition, step, advance in events:
        now += step
        if offset is None:
            roller.count_dead_letter("undecodable")
        else:
            ts = now + offset if now + offset >= 0 else -1
            placement = roller.add(key, ts, value, now_ms=now, partition=partition)
            if placement.kind is PlacementKind.ON_TIME:
                oracle[placement.bucket.index][key] += 1
                sums[(placement.bucket.index, key)] += value
        if advance:
            closed.extend(roller.advance(now_ms=now))
        c = roller.counts()
        assert c.received == c.on_time + c.late + c.too_old + c.dead_lettered
        assert sum(cb.events for cb in closed) + roller.open_events() == c.on_time
    assert roller.counts().received == len(events)
    for cb in closed:
        expected = {key: (n, sums[(cb.bucket.index, key)]) for key, n in oracle[cb.bucket.index].items()}
        assert dict(cb.aggregates) == expected


def test_emit_on_close_aggregates_equal_an_exact_oracle_once_everything_has_closed() -> None:
    rng = random.Random(7)
    roller = make_roller(width="1m", grace_ms=20_000, delay_ms=5_000)
    oracle: dict[tuple[int, str], tuple[int, int]] = {}
    closed: list[ClosedBucket[tuple[int, int]]] = []
    now = T0
    for _ in range(5_000):
        now += rng.randint(0, 100)
        key, value = rng.choice("abcdefgh"), rng.randint(-1_000, 1_000)
        placement = roller.add(key, now - rng.randint(0, 30_000), value, now_ms=now, partition=rng.randint(0, 3))
        if placement.kind is PlacementKind.ON_TIME:
            n, s = oracle.get((placement.bucket.index, key), (0, 0))
            oracle[(placement.bucket.index, key)] = (n + 1, s + value)
        if rng.random() < 0.01:
            closed.extend(roller.advance(now_ms=now))
    restored = BucketRoller.from_record(roller.to_record(), aggregation=SUM_COUNT)
    for r in (roller, restored):
        r.add("flush", now + 10 * 60_000, 0, now_ms=now + 10 * 60_000)
        final = [*closed, *r.advance(now_ms=now + 10**7)]
        assert {(cb.bucket.index, k): v for cb in final for k, v in cb.aggregates.items()} == oracle
    assert roller.counts().late > 0  # the mix really had late events


# -- retention and memory ---------------------------------------------------------


def test_memory_stays_bounded_over_ten_thousand_buckets() -> None:
    width_ms, retention_ms = 1_000, 30_000
    roller = make_roller(width="1s", grace_ms=2_000, retention_ms=retention_ms, idle_ms=5_000)
    bound = retention_ms // width_ms + 5
    emitted = 0
    for i in range(10_000):
        now = T0 + i * width_ms
        for partition in range(3):
            roller.add(f"k{partition}", now + partition * 100, 1, now_ms=now, partition=partition)
        roller.add("old", now - 60_000, 1, now_ms=now)  # too old: counted, not stored
        emitted += len(roller.advance(now_ms=now))
        assert roller.tracked_bucket_count() <= bound
    assert emitted >= 9_990
    assert roller.open_bucket_count() <= 4
    assert len(roller.to_record()["closed"]) <= bound


def test_retention_must_cover_the_grace_period() -> None:
    from streams.core.errors import ConfigError

    with pytest.raises(ConfigError, match="retention_ms"):
        make_roller(grace_ms=10_000, retention_ms=9_999)


# -- late corrections -------------------------------------------------------------


def test_a_correction_updates_a_closed_retained_bucket_and_returns_the_full_aggregate() -> None:
    roller = make_roller(grace_ms=0)
    roller.add("a", T0 + 1, 5, now_ms=T0)
    roller.add("a", T0 + 60_000, 1, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0)
    correction = roller.apply_correction("a", T0 + 2, 10)
    assert correction.emitted and correction.bucket == closed.bucket
    assert correction.aggregate == (2, 15)
    assert closed.aggregates["a"] == (1, 5)  # what was emitted does not change under us
    assert roller.apply_correction("new", T0 + 3, 4).aggregate == (1, 4)
    assert roller.counts().corrections == 2


def test_a_correction_for_a_late_bucket_not_yet_emitted_lands_in_its_close() -> None:
    roller = make_roller(grace_ms=0)
    roller.add("a", T0 + 1, 5, now_ms=T0)
    roller.add("a", T0 + 60_000, 1, now_ms=T0)
    roller.classify(T0, now_ms=T0)  # watermark known, bucket not advanced yet
    assert roller.apply_correction("a", T0 + 2, 10).emitted is False
    (closed,) = roller.advance(now_ms=T0)
    assert closed.aggregates["a"] == (2, 15)


def test_a_correction_is_refused_for_an_open_bucket_and_one_beyond_retention() -> None:
    roller = make_roller(grace_ms=0, retention_ms=120_000)
    roller.add("a", T0 + 1, 5, now_ms=T0)
    with pytest.raises(LateCorrectionError, match="still open"):
        roller.apply_correction("a", T0 + 2, 1)
    roller.add("a", T0 + 600_000, 1, now_ms=T0)
    roller.advance(now_ms=T0)
    with pytest.raises(LateCorrectionError, match="beyond retention"):
        roller.apply_correction("a", T0 + 2, 1)


def test_dead_letter_reasons_are_counted_by_name_up_to_a_bound() -> None:
    roller = make_roller()
    for i in range(MAX_REASONS + 10):
        roller.count_dead_letter(f"reason {i}")
    reasons = roller.dead_letter_counts()
    assert len(reasons) == MAX_REASONS + 1 and reasons["other"] == 10
    assert roller.counts().dead_lettered == roller.counts().received == MAX_REASONS + 10


# -- snapshots --------------------------------------------------------------------


_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "advance", "dead", "correct"]),
        st.sampled_from(["a", "b"]),
        st.integers(-200_000, 30_000),
        st.integers(0, 2),
        st.integers(0, 5_000),
    ),
    max_size=80,
)


def _run(roller: BucketRoller[int, tuple[int, int]], ops: list[tuple[str, str, int, int, int]], now: int) -> list[Any]:
    out: list[Any] = []
    for op, key, offset, partition, step in ops:
        now += step
        if op == "add":
            out.append(roller.add(key, now + offset, offset % 7, now_ms=now, partition=partition))
        elif op == "advance":
            out.append(roller.advance(now_ms=now))
        elif op == "dead":
            roller.count_dead_letter("bad", event_ts_ms=now + offset)
        else:
            try:
                out.append(roller.apply_correction(key, now + offset, 1))
            except LateCorrectionError as exc:
                out.append(str(exc))
    out.append(roller.counts())
    return out


@settings(max_examples=150, deadline=None)
@given(before=_ops, after=_ops)
def test_a_restored_snapshot_behaves_exactly_like_the_original(
    before: list[tuple[str, str, int, int, int]], after: list[tuple[str, str, int, int, int]]
) -> None:
    roller = make_roller(width="10s", grace_ms=3_000, retention_ms=60_000, delay_ms=1_000, idle_ms=8_000)
    _run(roller, before, T0)
    record = json.loads(json.dumps(roller.to_record()))
    copy = BucketRoller.from_record(record, aggregation=SUM_COUNT)
    assert copy.to_record() == roller.to_record()
    now = T0 + sum(step for *_, step in before)
    assert _run(copy, after, now) == _run(roller, after, now)
    assert copy.to_record() == roller.to_record()


# -- with the project's Stats ------------------------------------------------------


def test_stats_aggregates_close_correct_and_survive_a_snapshot_without_changing_what_was_emitted() -> None:
    from streams.core.aggregate import Stats
    from streams.core.time.eventtime import STATS

    roller = BucketRoller(TimeBuckets("1m", grace=0), 600_000, aggregation=STATS, watermarks=WatermarkTracker(0, 60_000))
    roller.add("a", T0 + 1, 1.5, now_ms=T0)
    roller.add("a", T0 + 2, None, now_ms=T0)
    roller.add("a", T0 + 60_000, 7.0, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0)
    emitted = closed.aggregates["a"]
    assert (emitted.count, emitted.measured, emitted.sum, emitted.max) == (2, 1, 1.5, 1.5)
    restored = BucketRoller.from_record(json.loads(json.dumps(roller.to_record())), aggregation=STATS)
    for r in (roller, restored):
        corrected = r.apply_correction("a", T0 + 3, 2.5).aggregate
        assert isinstance(corrected, Stats) and (corrected.count, corrected.sum) == (3, 4.0)
    assert (emitted.count, emitted.sum) == (2, 1.5)
    with pytest.raises(ValueError):
        roller.add("a", T0 + 60_001, float("nan"), now_ms=T0)
    assert roller.counts().received == 3
