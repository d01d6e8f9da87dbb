"""Bad input to the bucket roller: non-int timestamps, bad partitions, bad reasons, bad checkpoints.

Every failure is a typed error naming the field, and a rejected call changes nothing.
"""

from __future__ import annotations

import pytest

from streams.core.errors import InvalidBucketError
from streams.core.time.buckets import TimeBuckets
from streams.core.time.roller import BucketRoller
from streams.core.time.watermark import WatermarkTracker

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z


def _roller() -> BucketRoller:
    return BucketRoller(TimeBuckets("1m", grace=5_000), 300_000, watermarks=WatermarkTracker(1_000, 30_000))


BAD_TIMES = [True, False, 1.0, float("nan"), None, "1796169600000", b"1", [1]]


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
def test_a_non_int_event_time_raises_an_error_naming_event_ts_ms_and_counts_nothing(bad: object) -> None:
    roller = _roller()
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        roller.classify(bad, now_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="event_ts_ms"):
        roller.add(bad, now_ms=T0)  # type: ignore[arg-type]
    assert roller.counts().received == 0 and roller.open_bucket_count() == 0


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
def test_a_non_int_wall_clock_raises_an_error_naming_now_ms(bad: object) -> None:
    roller = _roller()
    with pytest.raises(InvalidBucketError, match="now_ms"):
        roller.classify(T0, now_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="now_ms"):
        roller.add(T0, now_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidBucketError, match="now_ms"):
        roller.advance(now_ms=bad).closed  # type: ignore[arg-type]
    assert roller.counts().received == 0 and roller.closed_through == -1


@pytest.mark.parametrize("reason", [None, "", "x" * 201, 3])
def test_a_bad_dead_letter_reason_is_refused_and_not_counted(reason: object) -> None:
    roller = _roller()
    with pytest.raises(ValueError, match="reason"):
        roller.count_dead_letter(reason)  # type: ignore[arg-type]
    assert roller.counts().received == 0


def test_a_dead_letter_with_a_garbage_timestamp_is_still_counted_but_with_no_bucket() -> None:
    roller = _roller()
    roller.add(T0, now_ms=T0)
    for ts in (None, "x", -1, True, 2**80):
        roller.count_dead_letter("undecodable", event_ts_ms=ts)  # type: ignore[arg-type]
    assert roller.counts().dead_lettered == 5
    roller.add(T0 + 10 * 60_000, now_ms=T0)
    (closed,) = roller.advance(now_ms=T0).closed
    assert closed.bucket.start_ms == T0 and closed.dead_letters == 0


@pytest.mark.parametrize("bad", [-1, True, None, "0", 1.0])
def test_a_bad_partition_number_is_refused_before_anything_is_counted(bad: object) -> None:
    roller = _roller()
    with pytest.raises(ValueError, match="partition"):
        roller.add(T0, now_ms=T0, partition=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        roller.classify(T0, now_ms=T0, partition=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        roller.restore_closed_through(bad, 0)  # type: ignore[arg-type]
    assert roller.counts().received == 0 and roller.open_bucket_count() == 0


@pytest.mark.parametrize("bad", [-2, True, None, "3", 1.0, 2**80])
def test_a_bad_restored_closed_through_is_refused_and_changes_nothing(bad: object) -> None:
    roller = _roller()
    with pytest.raises(ValueError, match="closed-through"):
        roller.restore_closed_through(0, bad)  # type: ignore[arg-type]
    assert roller.closed_for(0) == -1
