"""Deleting a bucket topic only when it is safe: closed, past retention, consumed to the end by the group."""

from __future__ import annotations

import pytest

from streams.core.errors import InvalidArgumentError
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import (
    PartitionProgress,
    Refusal,
    TopicPlan,
    deletion_refusals,
    gate_deletions,
    partitions_in_force,
    plan_bucket_topics,
)

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z
HOUR = 3_600_000
HOURLY = TimeBuckets("1h", grace="10m")
BUCKET = HOURLY.bucket_of(T0 - 2 * HOUR)  # 2026-12-01T22:00, ended 23:00, closes 23:10
DONE = (PartitionProgress(0, 0, 5, 5), PartitionProgress(1, 3, 9, 12))


def refusals(now_ms: int, retention_ms: int = 0, partitions: tuple[PartitionProgress, ...] = DONE) -> tuple[str, ...]:
    return deletion_refusals(BUCKET, now_ms=now_ms, retention_ms=retention_ms, group="workers", partitions=partitions)


def test_a_closed_bucket_past_retention_consumed_to_the_end_may_be_deleted() -> None:
    assert refusals(BUCKET.close_ms) == ()
    assert refusals(BUCKET.end_ms + HOUR, retention_ms=HOUR) == ()


def test_a_bucket_inside_its_grace_is_not_closed() -> None:
    assert refusals(BUCKET.close_ms - 1) == ("not closed (the bucket closes at 2026-12-01T23:10:00Z)",)


def test_a_bucket_inside_retention_is_refused_as_within_retention() -> None:
    assert refusals(BUCKET.close_ms, retention_ms=HOUR) == ("within retention (until 2026-12-02T00:00:00Z)",)


def test_a_partition_behind_its_end_names_the_group_the_partition_and_both_offsets() -> None:
    behind = (PartitionProgress(1, 0, 9, 4), PartitionProgress(0, 0, 5, 5))
    assert refusals(BUCKET.close_ms, partitions=behind) == (
        "group workers has not consumed partition 1: committed 4 of end 9",)


def test_a_partition_with_records_and_no_committed_offset_is_refused() -> None:
    never = (PartitionProgress(2, 0, 3, None), PartitionProgress(0, 0, 0, None))
    assert refusals(BUCKET.close_ms, partitions=never) == ("group workers has no committed offset on partition 2",)


def test_a_partition_holding_no_records_counts_as_consumed_whatever_the_group_committed() -> None:
    empty = (PartitionProgress(0, 0, 0, None), PartitionProgress(1, 7, 7, None), PartitionProgress(2, 7, 7, 3))
    assert refusals(BUCKET.close_ms, partitions=empty) == ()


def test_every_failed_condition_is_reported_in_order() -> None:
    behind = (PartitionProgress(3, 0, 2, None), PartitionProgress(1, 0, 9, 8))
    assert refusals(BUCKET.end_ms, retention_ms=HOUR, partitions=behind) == (
        "not closed (the bucket closes at 2026-12-01T23:10:00Z)",
        "within retention (until 2026-12-02T00:00:00Z)",
        "group workers has not consumed partition 1: committed 8 of end 9",
        "group workers has no committed offset on partition 3",
    )


def test_gating_keeps_refused_topics_out_of_the_deletions_and_says_why() -> None:
    existing = ["e.20261201T2000Z", "e.20261201T2100Z", "e.20261201T2300Z"]
    due = plan_bucket_topics("e.{bucket}", HOURLY, T0, ahead=0, retention_ms=HOUR, existing=existing)
    assert due.delete == tuple(existing[:2])  # 23:00 ended at 00:00, within the hour of retention
    progress = {"e.20261201T2000Z": DONE, "e.20261201T2100Z": (PartitionProgress(0, 0, 10, 6),)}
    gated = gate_deletions(due, "e.{bucket}", HOURLY, now_ms=T0, retention_ms=HOUR, group="workers",
                           progress=progress)
    assert gated == TopicPlan(due.create, ("e.20261201T2000Z",), (
        Refusal("e.20261201T2100Z", ("group workers has not consumed partition 0: committed 6 of end 10",)),))


def test_a_short_retention_does_not_delete_a_bucket_that_is_still_open_for_late_events() -> None:
    minute = TimeBuckets("1m", grace="10s")
    topic = "e." + minute.bucket_of(T0 - 60_000).label  # ended at T0, closes at T0 + 10 s
    due = plan_bucket_topics("e.{bucket}", minute, T0 + 5_000, ahead=0, retention_ms=0, existing=[topic])
    assert due.delete == (topic,)
    gated = gate_deletions(due, "e.{bucket}", minute, now_ms=T0 + 5_000, retention_ms=0, group="g", progress={})
    assert gated.delete == () and gated.refused[0].topic == topic
    assert gated.refused[0].reasons[0].startswith("not closed")


def test_gating_a_topic_outside_the_template_is_a_bug_it_reports() -> None:
    with pytest.raises(InvalidArgumentError, match="does not match"):
        gate_deletions(TopicPlan((), ("other",)), "e.{bucket}", HOURLY, now_ms=T0, retention_ms=0, group="g",
                       progress={})


def test_new_bucket_topics_get_the_partition_count_of_the_map_in_force_for_their_bucket() -> None:
    maps = [RoutingMap(version=1, partitions=6, topic="e.{bucket}"),
            RoutingMap(version=2, partitions=8, topic="e.{bucket}", first_bucket_ms=T0 + HOUR),
            RoutingMap(version=3, partitions=99, topic="other.{bucket}", first_bucket_ms=T0)]
    topics = ["e.20261202T0000Z", "e.20261202T0100Z", "e.20261202T0200Z"]
    assert partitions_in_force(topics, "e.{bucket}", HOURLY, maps, default=12) == dict(zip(topics, (6, 8, 8)))
    assert partitions_in_force(topics, "e.{bucket}", HOURLY, maps[1:], default=12) == dict(zip(topics, (12, 8, 8)))
    assert partitions_in_force(topics, "e.{bucket}", HOURLY, [], default=12) == dict.fromkeys(topics, 12)
