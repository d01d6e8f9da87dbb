"""Routing maps over Kafka on the real broker: publish, read the history, follow it live, refuse hostile records."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from streams.core.errors import RoutingMapError
from streams.core.routing.maps import encode_map, map_headers, map_record_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.maps import RoutingMapFollower, publish_map, read_maps

MINUTE = 60_000
COMPACT = {"cleanup.policy": "compact"}


def next_bucket(after_ms: int, buckets_ahead: int = 1) -> int:
    """The start of the ``buckets_ahead``-th one-minute bucket after the one holding ``after_ms``."""
    return (after_ms // MINUTE + buckets_ahead) * MINUTE


def write_raw(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list | None]],
              timestamp_ms: int | None = None) -> None:
    """Write records as a hostile or careless client would: no checks at all."""
    raw = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in records:
        raw.produce(topic, value, key, headers=headers, timestamp=timestamp_ms or 0)
    assert raw.flush(10) == 0


@pytest.fixture
def maps_topic(make_topic: Callable[..., str]) -> str:
    return make_topic("maps", partitions=1, config=COMPACT)


def test_published_maps_are_read_back_oldest_first_and_an_empty_or_missing_topic_is_told_apart(
        kafka_bootstrap: str, make_topic: Callable[..., str], maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    assert read_maps(config, maps_topic) == []
    with pytest.raises(TopicNotFoundError):
        read_maps(config, maps_topic + "-missing")
    now = int(time.time() * 1000)
    v1 = RoutingMap(version=1, partitions=4, topic="ev")
    v2 = RoutingMap(version=2, partitions=6, topic="ev", first_bucket_ms=next_bucket(now, 2))
    publish_map(config, maps_topic, v1, bucket_width_ms=MINUTE)
    publish_map(config, maps_topic, v2, bucket_width_ms=MINUTE)
    publish_map(config, maps_topic, v2, bucket_width_ms=MINUTE)  # identical: nothing to do
    assert read_maps(config, maps_topic) == [v1, v2]


def test_hostile_records_are_rejected_by_reason_never_applied_and_publish_refuses_a_shrink(
        kafka_bootstrap: str, maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    now = int(time.time() * 1000)
    v1 = RoutingMap(version=1, partitions=4, topic="ev")
    v2 = RoutingMap(version=2, partitions=6, topic="ev", first_bucket_ms=next_bucket(now, 3))
    publish_map(config, maps_topic, v1, bucket_width_ms=MINUTE)
    publish_map(config, maps_topic, v2, bucket_width_ms=MINUTE, now_ms=now)
    h = map_headers()
    shrink = RoutingMap(version=3, partitions=5, topic="ev", first_bucket_ms=next_bucket(now, 5))
    down = RoutingMap(version=1, partitions=8, topic="ev", first_bucket_ms=next_bucket(now, 6))
    # after v2's first bucket, but already begun when it was written ten minutes from now
    past = RoutingMap(version=3, partitions=8, topic="ev", first_bucket_ms=next_bucket(now, 4))
    write_raw(kafka_bootstrap, maps_topic, [
        (b"v0000000003", b"\x00\xffgarbage", h),
        (map_record_key(shrink), encode_map(shrink), [("streams-schema", b"hot_key_notice/2")]),
        (map_record_key(shrink), encode_map(shrink), h),
        (map_record_key(down), encode_map(down), h),
    ], timestamp_ms=now)
    write_raw(kafka_bootstrap, maps_topic, [(map_record_key(past), encode_map(past), h)], timestamp_ms=now + 10 * MINUTE)

    with pytest.raises(RoutingMapError) as info:
        publish_map(config, maps_topic, shrink, bucket_width_ms=MINUTE)
    assert info.value.reason == "shrink"
    with pytest.raises(RoutingMapError) as info:
        publish_map(config, maps_topic, RoutingMap(version=3, partitions=6, topic="ev",
                                                   first_bucket_ms=next_bucket(now, 4)),
                    events_partitions=7, bucket_width_ms=MINUTE)
    assert info.value.reason == "shrink"  # fewer than the events topic has now
    assert read_maps(config, maps_topic) == [v1, v2]  # the history skips what a follower rejects

    router = Router(TimeBuckets("1m"), [v1])
    follower = RoutingMapFollower(router, config, maps_topic)
    follower.start()
    try:
        assert follower.wait_until_current(30), follower.error
        assert router.maps == (v1, v2)
        assert (follower.applied, follower.rejected) == (2, 5)
        assert follower.rejections == {"undecodable": 1, "wrong schema": 1, "shrink": 1, "version conflict": 1,
                                       "first bucket not in future": 1}
        # a valid successor published while it follows is installed live
        v3 = RoutingMap(version=3, partitions=9, topic="ev", first_bucket_ms=next_bucket(now, 8))
        publish_map(config, maps_topic, v3, bucket_width_ms=MINUTE)
        assert follower.wait_for(lambda: router.current == v3, timeout=15)
        assert follower.applied == 3
    finally:
        follower.stop()
