"""The pure plan of ``streams topics grow``: effective bucket, keys and traffic moved, refusals."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, RoutingMapError
from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.growth import (
    SYNTHETIC_KEYS,
    default_lead_ms,
    expected_moved_fraction,
    plan_growth,
    sketch_weights,
    synthetic_keys,
)
from streams.core.routing.router import RoutingMap

from streams.core.time.buckets import TimeBuckets

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z, a minute boundary
MINUTE = TimeBuckets("1m", grace="10s")
JUMP6 = RoutingMap(version=1, partitions=6, topic="events", placement="jump", hash="xxh3")
MOD6 = RoutingMap(version=1, partitions=6, topic="events", placement="mod", hash="murmur2")
# Five standard deviations of a share near 1/4 (or 3/4) estimated from 100,000 keys: 5 * sqrt(.25 * .75 / 1e5).
UNIFORM_TOLERANCE = 5 * math.sqrt(0.25 * 0.75 / SYNTHETIC_KEYS)


def test_jump_six_to_eight_moves_exactly_the_keys_whose_jump_placement_changed() -> None:
    keys = [f"tenant-{i}" for i in range(5000)]
    plan = plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE, keys=keys)
    after = RoutingMap(version=2, partitions=8, topic="events", placement="jump", hash="xxh3")
    moved = [k for k in keys if JUMP6.partition_of(k) != after.partition_of(k)]
    assert (plan.sampled_keys, plan.moved_keys) == (5000, len(moved))
    # jump only ever moves a key onto one of the new partitions
    assert {after.partition_of(k) for k in moved} == {6, 7}


def test_jump_six_to_eight_moves_a_quarter_of_a_uniform_sample() -> None:
    plan = plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE)
    assert plan.sampled_keys == SYNTHETIC_KEYS
    assert plan.expected_fraction == 0.25
    assert abs(plan.key_fraction - 0.25) < UNIFORM_TOLERANCE, plan.key_fraction


def test_mod_six_to_eight_moves_three_quarters_of_a_uniform_sample() -> None:
    # a key stays iff h % 6 == h % 8, i.e. h mod lcm(6, 8) = 24 is one of 0..5: 6 of 24 stay
    plan = plan_growth(MOD6, 8, now_ms=T0, buckets=MINUTE)
    assert plan.expected_fraction == 1 - 6 / 24 == 0.75
    assert abs(plan.key_fraction - 0.75) < UNIFORM_TOLERANCE, plan.key_fraction
    keys = synthetic_keys(3000)
    after = RoutingMap(version=2, partitions=8, topic="events")
    exact = plan_growth(MOD6, 8, now_ms=T0, buckets=MINUTE, keys=keys)
    assert exact.moved_keys == sum(MOD6.partition_of(k) != after.partition_of(k) for k in keys)


@pytest.mark.parametrize(("placement", "n", "m", "expected"), [
    ("jump", 6, 7, 1 / 7), ("jump", 6, 12, 0.5), ("mod", 6, 7, 6 / 7), ("mod", 6, 12, 0.5), ("mod", 4, 6, 2 / 3),
])
def test_the_uniform_expectation_is_exact_arithmetic(placement: str, n: int, m: int, expected: float) -> None:
    assert expected_moved_fraction(placement, n, m) == pytest.approx(expected, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), extra=st.integers(1, 40))
def test_mod_expectation_matches_a_count_over_one_period_of_hash_values(n: int, extra: int) -> None:
    m = n + extra
    period = n * m // math.gcd(n, m)
    stays = sum(1 for h in range(period) if h % n == h % m)
    assert expected_moved_fraction("mod", n, m) == pytest.approx(1 - stays / period, abs=1e-12)


def test_the_new_map_keeps_topic_placement_and_hash_and_raises_the_version() -> None:
    current = RoutingMap(version=4, partitions=6, topic="events.{bucket}", placement="jump", hash="sha256",
                         first_bucket_ms=T0 - 3_600_000)
    plan = plan_growth(current, 9, now_ms=T0, buckets=MINUTE, keys=["a"])
    assert plan.new == RoutingMap(version=5, partitions=9, topic="events.{bucket}", placement="jump",
                                  hash="sha256", first_bucket_ms=T0 + 120_000)
    assert plan.current is current


def test_the_effective_bucket_is_the_first_start_at_or_after_now_plus_the_lead() -> None:
    assert default_lead_ms(MINUTE) == 70_000
    cases = {  # now offset -> first bucket offset, default lead of 70 s
        0: 120_000, 1: 120_000, 50_000: 120_000, 50_001: 180_000, 110_000: 180_000,
    }
    for offset, first in cases.items():
        plan = plan_growth(JUMP6, 8, now_ms=T0 + offset, buckets=MINUTE, keys=["a"])
        assert plan.new.first_bucket_ms == T0 + first, offset
        assert plan.new.first_bucket_ms >= T0 + offset + plan.lead_ms
        assert plan.new.first_bucket_ms - MINUTE.width_ms < T0 + offset + plan.lead_ms
    assert plan.effective_label == "20261202T0003Z"


def test_a_lead_shorter_than_the_default_is_allowed_down_to_grace_plus_one_second() -> None:
    plan = plan_growth(JUMP6, 8, now_ms=T0 + 5_000, buckets=MINUTE, lead_ms=11_000, keys=["a"])
    assert (plan.lead_ms, plan.new.first_bucket_ms) == (11_000, T0 + 60_000)
    with pytest.raises(ConfigError, match="lead"):
        plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE, lead_ms=10_999, keys=["a"])


def test_the_effective_bucket_is_after_a_current_map_that_is_not_in_force_yet() -> None:
    scheduled = RoutingMap(version=2, partitions=8, topic="events", placement="jump", hash="xxh3",
                           first_bucket_ms=T0 + 600_000)
    plan = plan_growth(scheduled, 10, now_ms=T0, buckets=MINUTE, keys=["a"])
    assert plan.new.first_bucket_ms == T0 + 660_000


@pytest.mark.parametrize(("new", "words"), [
    (6, "it already has 6"), (4, "Kafka cannot remove partitions"), (0, "Kafka cannot remove partitions"),
])
def test_a_shrink_or_equal_count_is_refused_saying_why(new: int, words: str) -> None:
    with pytest.raises(RoutingMapError, match=words) as caught:
        plan_growth(JUMP6, new, now_ms=T0, buckets=MINUTE, keys=["a"])
    assert f"from 6 to {new}" in str(caught.value)


def test_the_traffic_fraction_weights_moved_keys_by_rate_and_the_rest_at_the_expectation() -> None:
    after = RoutingMap(version=2, partitions=8, topic="events", placement="jump", hash="xxh3")
    keys = [f"k{i}" for i in range(200)]
    moved = next(k for k in keys if JUMP6.partition_of(k) != after.partition_of(k))
    stays = next(k for k in keys if JUMP6.partition_of(k) == after.partition_of(k))
    plan = plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE, keys=keys, weights={moved: 30.0, stays: 10.0},
                       other_weight=60.0)
    assert plan.traffic_fraction == pytest.approx((30.0 + 60.0 * 0.25) / 100.0)
    only_keys = plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE, keys=keys)
    assert only_keys.traffic_fraction is None


def test_a_negative_weight_is_refused() -> None:
    with pytest.raises(ConfigError, match="weight"):
        plan_growth(JUMP6, 8, now_ms=T0, buckets=MINUTE, keys=["a"], weights={"a": -1.0})


def _summary(instance: str, at_s: float, items: tuple[tuple[str, int], ...], total: int) -> SketchSummary:
    return SketchSummary(instance=instance, window_s=5.0, span_s=5.0, total=total, items=items, max_error=0,
                         unreported_bound=0, at_s=at_s)


def test_sketch_weights_are_the_latest_summary_of_each_instance_as_rates() -> None:
    old = _summary("w1", 100.0, (("hot", 500),), 1000)
    latest = _summary("w1", 104.0, (("hot", 250), ("warm", 50)), 500)
    other = _summary("w2", 103.0, (("hot", 100),), 250)
    gone = _summary("w3", 10.0, (("ghost", 200),), 200)  # older than three windows before the newest
    rates, rest = sketch_weights([old, latest, other, gone])
    assert rates == {"hot": 70.0, "warm": 10.0}
    assert rest == pytest.approx((500 + 250) / 5.0 - 80.0)
    assert sketch_weights([]) == ({}, 0.0)
