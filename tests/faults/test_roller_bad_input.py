"""Bad input to the bucket roller: hostile snapshots, non-int timestamps, bad keys.

Every failure is a typed error naming the field, and a rejected call changes nothing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.errors import InvalidBucketError, InvalidKeyError
from streams.core.time.buckets import TimeBuckets
from streams.core.time.eventtime import Aggregation, RollerStateError
from streams.core.time.roller import BucketRoller
from streams.core.time.watermark import WatermarkTracker

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z


def _sum_from_record(record: Any) -> int:
    if type(record) is not int:
        raise ValueError(f"not an int: {record!r}")
    return record


SUM: Aggregation[int, int] = Aggregation(
    empty=lambda: 0, add=lambda agg, value: agg + value, to_record=lambda agg: agg, from_record=_sum_from_record
)


def _roller() -> BucketRoller[int, int]:
    return BucketRoller(
        TimeBuckets("1m", grace=5_000), 300_000, aggregation=SUM, watermarks=WatermarkTracker(1_000, 30_000)
    )


def _valid_record() -> dict[str, Any]:
    """A snapshot with open and closed buckets, late events, dead letters and a correction."""
    roller = _roller()
    roller.add("a", T0 + 10, 3, now_ms=T0)
    roller.add("b", T0 + 71_000, 4, now_ms=T0 + 1, partition=1)
    roller.add("a", T0 + 130_000, 5, now_ms=T0 + 2)
    roller.add("late", T0 + 20, 1, now_ms=T0 + 3, partition=1)
    roller.count_dead_letter("undecodable", event_ts_ms=T0 + 130_001)
    roller.add("x", -5, 1, now_ms=T0 + 4)
    roller.advance(now_ms=T0 + 5)
    roller.apply_correction("a", T0 + 30, 2)
    record = json.loads(json.dumps(roller.to_record()))
    assert record["open"] and record["closed"]
    return record


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(record: dict[str, Any]) -> None:
        target: Any = record
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def _delete(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def mutate(record: dict[str, Any]) -> None:
        target: Any = record
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "missing field": (_delete(("counts",)), "missing field"),
    "unknown field": (_set(("extra",), 1), "unknown field"),
    "future version": (_set(("version",), 2), "version"),
    "bool version": (_set(("version",), True), "version"),
    "bad width": (_set(("width_ms",), 7), "width"),
    "width as str": (_set(("width_ms",), "60000"), "width_ms"),
    "negative retention": (_set(("retention_ms",), -1), "retention_ms"),
    "retention below grace": (_set(("retention_ms",), 10), "retention_ms"),
    "float max future": (_set(("max_future_ms",), 1.5), "max_future_ms"),
    "watermarks not a mapping": (_set(("watermarks",), [1, 2]), "watermarks"),
    "watermark partition twice": (
        lambda r: r["watermarks"]["partitions"].append(dict(r["watermarks"]["partitions"][0])),
        "twice",
    ),
    "watermark with bool delay": (_set(("watermarks", "allowed_delay_ms"), False), "allowed_delay_ms"),
    "closed ahead of watermark": (_set(("closed_through",), 10**9), "closed_through"),
    "closed through huge": (_set(("closed_through",), 10**30), "closed_through"),
    "dropped ahead of closed": (lambda r: r.update(dropped_through=r["closed_through"] + 1), "dropped_through"),
    "no watermark but closed": (_set(("watermarks", "low_watermark_ms"), None), "closed_through"),
    "negative count": (_set(("counts", "late"), -1), "late"),
    "counts do not add up": (_set(("counts", "received"), 999), "received == on_time"),
    "count as float": (_set(("counts", "on_time"), 2.0), "on_time"),
    "reasons do not add up": (_set(("dead_letter_reasons", "undecodable"), 5), "undecodable"),
    "empty reason": (_set(("dead_letter_reasons", ""), 1), "reason"),
    "reasons not a mapping": (_set(("dead_letter_reasons",), ["x"]), "dead_letter_reasons"),
    "open not a list": (_set(("open",), {"0": {}}), "open"),
    "open bucket already closed": (lambda r: r["open"][0].update(index=r["closed_through"]), "index"),
    "closed bucket not closed": (lambda r: r["closed"][0].update(index=r["closed_through"] + 1), "index"),
    "bucket listed twice": (lambda r: r["open"].append(copy.deepcopy(r["open"][0])), "twice"),
    "bucket missing events": (_delete(("open", 0, "events")), "missing field"),
    "negative bucket events": (_set(("open", 0, "events"), -3), "events"),
    "more events than counted": (_set(("open", 0, "events"), 10**6), "events"),
    "more corrections than counted": (_set(("closed", 0, "corrections"), 50), "corrections"),
    "empty aggregate key": (_set(("open", 0, "aggregates", ""), 1), "aggregate key"),
    "aggregates not a mapping": (_set(("closed", 0, "aggregates"), [["a", 1]]), "aggregates"),
    "aggregate rejected": (_set(("closed", 0, "aggregates", "a"), "lots"), "aggregate of key 'a'"),
    "bucket item not a mapping": (lambda r: r["closed"].append("bucket"), "mapping"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_snapshot_raises_a_roller_state_error_naming_the_problem(name: str) -> None:
    mutate, message = HOSTILE[name]
    record = _valid_record()
    mutate(record)
    with pytest.raises(RollerStateError, match=message):
        BucketRoller.from_record(record, aggregation=SUM)


@pytest.mark.parametrize("record", [None, [], "snapshot", 42, {}])
def test_a_snapshot_that_is_not_a_roller_record_at_all_is_rejected(record: object) -> None:
    with pytest.raises(RollerStateError):
        BucketRoller.from_record(record, aggregation=SUM)  # type: ignore[arg-type]


def test_the_valid_snapshot_used_above_restores() -> None:
    record = _valid_record()
    assert BucketRoller.from_record(record, aggregation=SUM).to_record() == record


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


_PATHS = _paths(_valid_record())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), junk=_json)
def test_any_single_corrupted_field_is_rejected_cleanly_or_restores_a_consistent_roller(path: tuple[Any, ...], junk: Any) -> None:
    record = _valid_record()
    _set(path, junk)(record)
    try:
        roller = BucketRoller.from_record(record, aggregation=SUM)
    except RollerStateError:
        return
    c = roller.counts()  # a corruption that survived validation still leaves the invariant intact
    assert c.received == c.on_time + c.late + c.too_old + c.dead_lettered


@settings(max_examples=200, deadline=None)
@given(junk=_json)
def test_arbitrary_json_is_rejected_with_a_roller_state_error(junk: Any) -> None:
    with pytest.raises(RollerStateError):
        BucketRoller.from_record(junk, aggregation=SUM)


# -- bad timestamps and keys -------------------------------------------------------

BAD_TIMES = [True, False, 1.0, float("nan"), None, "1796169600000", b"1", [1]]


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
def test_a_non_int_event_time_raises_an_error_naming_event_ts_ms_and_counts_nothing(bad: object) -> None:
    roller = _roller()
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        roller.classify(bad, now_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        roller.add("k", bad, 1, now_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        roller.apply_correction("k", bad, 1)  # type: ignore[arg-type]
    assert roller.counts().received == 0 and roller.tracked_bucket_count() == 0


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
def test_a_non_int_wall_clock_raises_an_error_naming_now_ms(bad: object) -> None:
    roller = _roller()
    with pytest.raises(InvalidBucketError, match="now_ms"):
        roller.add("k", T0, 1, now_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="now_ms"):
        roller.advance(now_ms=bad)  # type: ignore[arg-type]
    assert roller.counts().received == 0


@pytest.mark.parametrize("bad", [None, "", b"k", 5])
def test_a_missing_or_non_text_key_raises_an_invalid_key_error(bad: object) -> None:
    roller = _roller()
    with pytest.raises(InvalidKeyError, match="key"):
        roller.add(bad, T0, 1, now_ms=T0)  # type: ignore[arg-type]
    assert roller.counts().received == 0


def test_a_value_the_aggregation_rejects_changes_no_counter_and_no_bucket() -> None:
    roller = _roller()
    roller.add("k", T0, 1, now_ms=T0)
    before = roller.to_record()
    with pytest.raises(TypeError):
        roller.add("k", T0 + 1, "not a number", now_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        roller.add("fresh", T0 + 60_000, "not a number", now_ms=T0)  # type: ignore[arg-type]
    after = roller.to_record()
    del before["watermarks"], after["watermarks"]  # the low watermark may ratchet; it is monotone
    assert after == before


@pytest.mark.parametrize("reason", [None, "", "x" * 201, 3])
def test_a_bad_dead_letter_reason_is_refused_and_not_counted(reason: object) -> None:
    roller = _roller()
    with pytest.raises(ValueError, match="reason"):
        roller.count_dead_letter(reason)  # type: ignore[arg-type]
    assert roller.counts().received == 0


def test_a_dead_letter_with_a_garbage_timestamp_is_still_counted() -> None:
    roller = _roller()
    roller.add("k", T0, 1, now_ms=T0)
    for ts in (None, "x", -1, True, 2**80):
        roller.count_dead_letter("undecodable", event_ts_ms=ts)  # type: ignore[arg-type]
    assert roller.counts().dead_lettered == 5 and roller.to_record()["open"][0]["dead_letters"] == 0


@pytest.mark.parametrize("bad", [-1, True, None, "0", 1.0])
def test_a_bad_partition_number_is_refused_before_anything_is_counted(bad: object) -> None:
    roller = _roller()
    with pytest.raises(ValueError, match="partition"):
        roller.add("k", T0, 1, now_ms=T0, partition=bad)  # type: ignore[arg-type]
    assert roller.counts().received == 0 and roller.tracked_bucket_count() == 0
