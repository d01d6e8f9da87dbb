"""Stats merge exactly: any split of a stream, merged in any order, equals the whole."""

from __future__ import annotations

import functools
import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import aggregate
from streams.core.aggregate import MAX_PARTIALS, Stats
from streams.core.errors import SerializationError

# Huge and tiny magnitudes (subnormals, +/-0.0) and values built to cancel. Kept within
# +/-1e300 so no ordering of a few hundred values can overflow an intermediate sum.
finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False)
cancelling = st.sampled_from([1e16, -1e16, 1.0, -1.0, 1e-16, 0.1, -0.1, 2.0**-1074, 1e300, -1e300, 0.0, -0.0])
measures = st.lists(st.one_of(finite, cancelling, st.none()), max_size=300)


def stats_of(values: list[float | None]) -> Stats:
    stats = Stats.empty()
    for value in values:
        stats.add(value)
    return stats


def exact_sum(values: list[float | None]) -> float:
    return math.fsum(v for v in values if v is not None) + 0.0


@given(values=measures, data=st.data(), fold_at=st.sampled_from([2, 3, 7, 1024]))
@settings(max_examples=300, deadline=None)
def test_merging_any_split_in_any_order_equals_aggregating_the_whole(values, data, fold_at) -> None:
    with mock.patch.object(aggregate, "_FOLD_AT", fold_at):
        k = data.draw(st.integers(1, 8), label="k")
        parts: list[list[float | None]] = [[] for _ in range(k)]
        for value in data.draw(st.permutations(values), label="arrival order"):
            parts[data.draw(st.integers(0, k - 1))].append(value)
        partials = [stats_of(part) for part in data.draw(st.permutations(parts), label="merge order")]
        if data.draw(st.booleans(), label="left fold"):
            merged = functools.reduce(Stats.merge, partials, Stats.empty())
        else:  # pairwise tree, like a stage 2 that merges as partials arrive
            while len(partials) > 1:
                partials = [a.merge(b) for a, b in zip(partials[::2], partials[1::2])] + partials[len(partials) // 2 * 2:]
            merged = partials[0]
        whole = stats_of(values)

    assert merged == whole
    assert merged.sum.hex() == whole.sum.hex() == exact_sum(values).hex()
    measured = [v for v in values if v is not None]
    assert (merged.count, merged.measured) == (whole.count, whole.measured) == (len(values), len(measured))
    assert merged.min == whole.min == (min(measured) + 0.0 if measured else None)
    assert merged.max == whole.max == (max(measured) + 0.0 if measured else None)


@given(values=measures, data=st.data())
@settings(max_examples=150, deadline=None)
def test_partials_sent_through_records_merge_to_the_same_exact_result(values, data) -> None:
    k = data.draw(st.integers(1, 5))
    parts: list[list[float | None]] = [[] for _ in range(k)]
    for value in values:
        parts[data.draw(st.integers(0, k - 1))].append(value)
    received = [Stats.from_record(stats_of(part).to_record()) for part in parts]
    merged = functools.reduce(Stats.merge, received, Stats.empty())
    assert merged == stats_of(values)
    assert merged.sum.hex() == exact_sum(values).hex()


def test_the_float_associativity_trap_is_avoided() -> None:
    # Naive stage 2: add the parts' rounded sums. The answer depends on the split.
    a, b = [1e16, 1.0], [1.0, -1e16]
    naive = sum(a) + sum(b)
    assert naive != math.fsum(a + b)  # 0.0 (or 2.0 in other splits) instead of 2.0
    assert stats_of(a).merge(stats_of(b)).sum == stats_of(a + b).sum == 2.0
    assert stats_of([1e16, 1.0, -1e16]).sum == 1.0


def test_equal_exact_sums_have_equal_partials_whatever_the_order() -> None:
    values = [0.1] * 10 + [1e100, -1e100, 3.0, 2.0**-1074]
    assert stats_of(values).partials == stats_of(values[::-1]).partials


def test_none_counts_the_event_but_not_the_measure() -> None:
    stats = stats_of([None, 2.0, None, 4.0])
    assert (stats.count, stats.measured, stats.sum, stats.mean, stats.min, stats.max) == (4, 2, 6.0, 3.0, 2.0, 4.0)
    nothing = stats_of([None, None])
    assert (nothing.count, nothing.measured, nothing.sum, nothing.mean, nothing.min, nothing.max) == (2, 0, 0.0, None, None, None)


def test_signed_zeros_read_back_as_positive_zero_in_any_order() -> None:
    for values in ([0.0, -0.0], [-0.0, 0.0], [-0.0]):
        stats = stats_of(values)
        assert (stats.sum.hex(), stats.min.hex(), stats.max.hex()) == ((0.0).hex(),) * 3


def test_ints_are_measures_but_bools_are_not() -> None:
    stats = stats_of([1, 2])
    assert stats.sum == 3.0 and isinstance(stats.sum, float)
    with pytest.raises(TypeError, match="bool"):
        Stats().add(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        Stats().add("1.5")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_measure_is_rejected_and_not_counted(value: float) -> None:
    stats = stats_of([1.0])
    with pytest.raises(ValueError, match="finite"):
        stats.add(value)
    assert (stats.count, stats.measured, stats.sum) == (1, 1, 1.0)


def test_a_sum_beyond_the_float_range_raises_overflow_and_keeps_the_counts() -> None:
    with mock.patch.object(aggregate, "_FOLD_AT", 2):
        stats = stats_of([1.5e308])
        with pytest.raises(OverflowError):
            stats.add(1.5e308)
        assert (stats.count, stats.sum) == (1, 1.5e308)
    big = stats_of([1.5e308])
    with pytest.raises(OverflowError):
        big.merge(big)


def test_merge_returns_a_new_stats_and_changes_neither_operand() -> None:
    a, b = stats_of([1.0]), stats_of([2.0, None])
    merged = a.merge(b)
    assert (a.count, b.count, merged.count, merged.sum) == (1, 2, 3, 3.0)
    with pytest.raises(TypeError):
        a.merge({"count": 1})  # type: ignore[arg-type]


def test_record_round_trip_keeps_every_field() -> None:
    stats = stats_of([0.1, 0.2, None, -5.0])
    record = stats.to_record()
    assert record == {"count": 4, "measured": 3, "sum": math.fsum([0.1, 0.2, -5.0]),
                      "partials": list(stats.partials), "min": -5.0, "max": 0.2}
    assert Stats.from_record(record) == stats
    assert Stats.from_record(Stats().to_record()) == Stats()


GOOD = {"count": 3, "measured": 2, "sum": 3.0, "partials": [3.0], "min": 1.0, "max": 2.0}


@pytest.mark.parametrize(("change", "message"), [
    ({"count": -1}, "'count'"),
    ({"count": True}, "'count'"),
    ({"count": 2**63}, "'count'"),
    ({"measured": 4}, "'measured'"),
    ({"measured": 2.0}, "'measured'"),
    ({"partials": [math.nan], "sum": math.nan}, "'partials'"),
    ({"partials": [math.inf]}, "'partials'"),
    ({"partials": ["3.0"]}, "'partials'"),
    ({"partials": [1.0] * (MAX_PARTIALS + 1)}, "'partials'"),
    ({"partials": "3.0"}, "'partials'"),
    ({"partials": [1e308, 1e308], "sum": 1e308}, "float range"),
    ({"partials": [10**400]}, "'partials'"),
    ({"sum": 3.5}, "'sum'"),
    ({"sum": math.nan}, "'sum'"),
    ({"min": 3.0}, "above"),
    ({"min": None}, "'min'"),
    ({"max": math.inf}, "'max'"),
    ({"measured": 0}, "measured = 0"),
])
def test_hostile_stats_records_are_rejected_naming_the_problem(change: dict, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        Stats.from_record({**GOOD, **change})


@pytest.mark.parametrize("record", [None, [1, 2], {**GOOD, "extra": 1}, {k: v for k, v in GOOD.items() if k != "sum"}])
def test_records_of_the_wrong_shape_are_rejected(record: object) -> None:
    with pytest.raises(SerializationError):
        Stats.from_record(record)  # type: ignore[arg-type]
