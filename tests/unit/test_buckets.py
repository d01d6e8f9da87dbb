"""Time buckets: UTC alignment, widths, grace, labels that sort as text."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import InvalidBucketError
from streams.core.time.buckets import (
    MAX_TIMESTAMP_MS,
    Bucket,
    TimeBuckets,
    check_timestamp,
    parse_duration,
    parse_width,
)

WIDTHS = ["1s", "30s", "1m", "5m", "15m", "1h", "6h", "1d", "7d"]
timestamps = st.integers(0, MAX_TIMESTAMP_MS)
widths = st.sampled_from(WIDTHS)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("30s", 30_000), ("1m", 60_000), ("5m", 300_000), ("15m", 900_000), ("1h", 3_600_000),
     ("6h", 21_600_000), ("1d", 86_400_000), ("7d", 604_800_000), ("90m", 5_400_000), ("31d", 2_678_400_000)],
)
def test_parse_width_reads_the_documented_spellings(text: str, ms: int) -> None:
    assert parse_width(text) == ms


def test_parse_width_accepts_a_timedelta() -> None:
    assert parse_width(timedelta(minutes=5)) == 300_000
    assert parse_width(timedelta(days=2)) == 172_800_000


@pytest.mark.parametrize(
    "bad",
    ["0s", "7m", "25h", "32d", "1.5h", "5 m", "5M", "m", "", "-5m", "1500ms", "1w",
     timedelta(milliseconds=1500), timedelta(0), timedelta(hours=-1), timedelta(hours=36)],
)
def test_widths_that_do_not_tile_a_day_or_fall_outside_1s_to_31d_raise(bad: object) -> None:
    with pytest.raises(InvalidBucketError) as info:
        parse_width(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


def test_the_width_error_states_the_rule() -> None:
    with pytest.raises(InvalidBucketError, match="divides a day evenly"):
        parse_width("7m")


@pytest.mark.parametrize("bad", [300_000, 5.0, None, b"5m"])
def test_width_of_another_type_raises_naming_the_type(bad: object) -> None:
    with pytest.raises(InvalidBucketError, match=type(bad).__name__):
        parse_width(bad)  # type: ignore[arg-type]


def test_parse_duration_takes_any_whole_number_of_units_but_nothing_negative() -> None:
    assert parse_duration("0s") == 0
    assert parse_duration("7m") == 420_000
    assert parse_duration(timedelta(milliseconds=1500)) == 1_500
    for bad in (timedelta(seconds=-1), "-1s", "1.5s", 5):
        with pytest.raises(InvalidBucketError, match="retention"):
            parse_duration(bad, "retention")  # type: ignore[arg-type]


def test_grace_accepts_str_timedelta_and_milliseconds() -> None:
    assert TimeBuckets("5m", "30s").grace_ms == 30_000
    assert TimeBuckets("5m", timedelta(minutes=2)).grace_ms == 120_000
    assert TimeBuckets("5m", 1_500).grace_ms == 1_500
    assert TimeBuckets("5m").grace_ms == 0


@pytest.mark.parametrize("bad", [-1, True, "367d", 2.5, "-1s"])
def test_bad_grace_raises(bad: object) -> None:
    with pytest.raises(InvalidBucketError):
        TimeBuckets("5m", bad)  # type: ignore[arg-type]


def test_time_buckets_are_equal_when_their_milliseconds_are() -> None:
    assert TimeBuckets("1h") == TimeBuckets(timedelta(hours=1)) == TimeBuckets("60m")
    assert TimeBuckets("1h") != TimeBuckets("1h", "1s")


def test_time_buckets_are_frozen() -> None:
    with pytest.raises(AttributeError):
        TimeBuckets("5m").width_ms = 1  # type: ignore[misc]


@given(timestamps, widths)
def test_a_bucket_is_utc_aligned_and_holds_its_timestamp(ts: int, width: str) -> None:
    buckets = TimeBuckets(width, "10s")
    bucket = buckets.bucket_of(ts)
    assert bucket.start_ms % buckets.width_ms == 0
    assert bucket.start_ms <= ts < bucket.end_ms
    assert bucket.end_ms - bucket.start_ms == buckets.width_ms
    assert bucket.index == bucket.start_ms // buckets.width_ms == buckets.bucket_index(ts)
    assert bucket.close_ms == bucket.end_ms + 10_000


def test_a_five_minute_bucket_matches_the_wall_clock() -> None:
    ts = int(datetime(2026, 12, 2, 11, 7, 31, tzinfo=timezone.utc).timestamp() * 1000)
    bucket = TimeBuckets("5m", "1m").bucket_of(ts)
    start = int(datetime(2026, 12, 2, 11, 5, tzinfo=timezone.utc).timestamp() * 1000)
    assert bucket == Bucket(start, start + 300_000, start + 360_000, "20261202T1105Z", start // 300_000)


def test_labels_carry_seconds_only_for_widths_under_a_minute() -> None:
    ts = int(datetime(2026, 12, 2, 11, 5, 31, tzinfo=timezone.utc).timestamp() * 1000)
    assert TimeBuckets("30s").bucket_of(ts).label == "20261202T110530Z"
    assert TimeBuckets("1m").bucket_of(ts).label == "20261202T1105Z"
    assert TimeBuckets("1d").bucket_of(ts).label == "20261202T0000Z"


def test_seven_day_buckets_start_on_thursdays_like_the_epoch() -> None:
    bucket = TimeBuckets("7d").bucket_of(1_764_000_000_000)
    start = datetime.fromtimestamp(bucket.start_ms / 1000, tz=timezone.utc)
    assert start.weekday() == 3 and (start.hour, start.minute) == (0, 0)


@given(timestamps, timestamps, widths)
def test_labels_sort_as_text_in_time_order(a: int, b: int, width: str) -> None:
    buckets = TimeBuckets(width)
    first, second = buckets.bucket_of(min(a, b)), buckets.bucket_of(max(a, b))
    if first.index == second.index:
        assert first.label == second.label
    else:
        assert first.label < second.label


@given(timestamps, widths)
def test_labels_are_legal_in_kafka_topic_names_and_parse_back(ts: int, width: str) -> None:
    buckets = TimeBuckets(width, "1m")
    bucket = buckets.bucket_of(ts)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", bucket.label)
    assert buckets.parse_label(bucket.label) == bucket


@pytest.mark.parametrize(
    "bad", ["20261202T1107Z", "20261202T1105", "2026-12-02T11:05Z", "20261302T1105Z", "20261202T110500Z", "", 5]
)
def test_a_label_that_is_malformed_or_not_a_bucket_start_raises(bad: object) -> None:
    with pytest.raises(InvalidBucketError):
        TimeBuckets("5m").parse_label(bad)  # type: ignore[arg-type]


def test_bucket_at_index_is_the_inverse_of_bucket_index() -> None:
    buckets = TimeBuckets("15m")
    assert buckets.bucket_at_index(buckets.bucket_index(1_764_000_123_456)).start_ms == 1_764_000_000_000
    with pytest.raises(InvalidBucketError):
        buckets.bucket_at_index(-1)
    with pytest.raises(InvalidBucketError):
        buckets.bucket_at_index(True)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.0, True, False, "1000", None, MAX_TIMESTAMP_MS + 1])
def test_negative_non_int_bool_and_far_future_timestamps_raise(bad: object) -> None:
    buckets = TimeBuckets("5m")
    with pytest.raises(InvalidBucketError):
        buckets.bucket_index(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError):
        buckets.bucket_of(bad)  # type: ignore[arg-type]


def test_int_like_timestamps_are_converted_and_bools_named() -> None:
    class Millis(int):
        pass

    assert TimeBuckets("5m").bucket_index(Millis(600_000)) == 2
    with pytest.raises(InvalidBucketError, match="bool"):
        check_timestamp(True)


def test_is_boundary_is_true_only_on_a_bucket_start() -> None:
    buckets = TimeBuckets("1h")
    assert buckets.is_boundary(3_600_000)
    assert not buckets.is_boundary(3_600_001)
