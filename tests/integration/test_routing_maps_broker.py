"""Routing maps over Kafka on the real broker: publish, read the history, follow it live, refuse hostile records."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from confluent_kafka import Producer
from worker_harness import consume_all

from streams.core.errors import RoutingMapError
from streams.core.routing.maps import encode_map, map_headers, map_record_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.maps import RoutingMapFollower, publish_map, read_maps
from streams.kafka.monitor import Monitor
from streams.kafka.producer import RoutingProducer

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


def test_producers_route_each_bucket_under_the_map_in_force_for_it_whether_started_before_or_after_a_change(
        kafka_bootstrap: str, make_topic: Callable[..., str], maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    events = make_topic("ev", partitions=8)  # grown ahead of v2: a 6-partition v1 still writes to it
    now = int(time.time() * 1000)
    v1 = RoutingMap(version=1, partitions=6, topic=events)
    v2 = RoutingMap(version=2, partitions=8, topic=events, first_bucket_ms=next_bucket(now, 2))
    publish_map(config, maps_topic, v1, bucket_width_ms=MINUTE)
    buckets = TimeBuckets("1m")

    early = RoutingProducer(Router(buckets, [v1]), config, routing_maps_topic=maps_topic)
    late = None
    try:
        assert early.router.maps == (v1,)
        publish_map(config, maps_topic, v2, bucket_width_ms=MINUTE, events_partitions=8)
        assert early.map_follower.wait_for(lambda: early.router.current == v2, timeout=15), early.map_follower.error
        late = RoutingProducer(Router(buckets, [v1]), config, routing_maps_topic=maps_topic)
        assert late.router.maps == (v1, v2), "a producer started after the change read the history first"
        assert late.stats().sent == 0

        # Explicit event times on both sides of v2's first bucket: the clock plays no part.
        times = [v2.first_bucket_ms - 2 * MINUTE + i * 997 for i in range(4 * MINUTE // 997)]
        sent = {}
        for i, ts in enumerate(times):
            key = f"device-{i % 500}"
            for producer in (early, late):
                d = producer.send(key, 1.0, ts_ms=ts)
                oracle = v1 if ts < v2.first_bucket_ms else v2
                assert (d.partition, d.map_version) == (oracle.partition_of(key), oracle.version), (key, ts)
                sent[(producer is late, d.key, ts)] = d.partition
        assert {d for (_, _, ts), d in sent.items() if ts >= v2.first_bucket_ms} >= {6, 7}, "v2 uses its new partitions"
        assert max(d for (_, _, ts), d in sent.items() if ts < v2.first_bucket_ms) <= 5
    finally:
        early.close()
        if late is not None:
            late.close()
    got = consume_all(kafka_bootstrap, events, len(sent))
    assert len(got) == len(sent)
    codec = JsonCodec("event")
    landed = {}
    for msg in got:
        landed.setdefault((msg.key(), codec.decode(msg.value())["ts_ms"]), set()).add(msg.partition())
    assert all(landed[(key, ts)] == {p} for (_, key, ts), p in sent.items())


def test_a_configured_map_that_disagrees_with_the_topic_is_refused_at_start(
        kafka_bootstrap: str, make_topic: Callable[..., str], maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    events = make_topic("ev", partitions=6)
    publish_map(config, maps_topic, RoutingMap(version=1, partitions=6, topic=events), bucket_width_ms=MINUTE)
    with pytest.raises(RoutingMapError, match="disagrees") as info:
        RoutingProducer(Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=4, topic=events)]), config,
                        routing_maps_topic=maps_topic)
    assert info.value.reason == "version conflict"
    unpublished = RoutingMap(version=2, partitions=6, topic=events, first_bucket_ms=MINUTE)
    with pytest.raises(RoutingMapError, match="v2 is not on the topic"):
        RoutingProducer(Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=6, topic=events), unpublished]),
                        config, routing_maps_topic=maps_topic)
    with pytest.raises(RoutingMapError, match="cannot read the routing-map history"):
        RoutingProducer(Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=6, topic=events)]), config,
                        routing_maps_topic=maps_topic + "-missing", maps_timeout_s=2)


def test_an_event_a_newer_map_puts_on_a_partition_the_topic_lacks_is_refused_and_not_sent(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    events = make_topic("ev", partitions=6)
    v1 = RoutingMap(version=1, partitions=6, topic=events)
    v2 = RoutingMap(version=2, partitions=12, topic=events, first_bucket_ms=10 * MINUTE)
    producer = RoutingProducer(Router(TimeBuckets("1m"), [v1, v2]), {"bootstrap.servers": kafka_bootstrap})
    try:
        keys = [f"k{i}" for i in range(200)]
        lacking = next(k for k in keys if v2.partition_of(k) >= 6)
        fitting = next(k for k in keys if v2.partition_of(k) < 6)
        assert producer.send(lacking, ts_ms=MINUTE).partition == v1.partition_of(lacking)  # v1's bucket: fine
        assert producer.send(fitting, ts_ms=10 * MINUTE).partition == v2.partition_of(fitting)
        with pytest.raises(RoutingMapError, match=rf"partition {v2.partition_of(lacking)} of topic .* has 6 partitions"):
            producer.send(lacking, ts_ms=10 * MINUTE)
        assert producer.stats().sent == 2
    finally:
        producer.close()


def test_streams_produce_follows_the_routing_map_history_of_a_grown_topic(
        kafka_bootstrap: str, make_topic: Callable[..., str], maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    events = make_topic("ev", partitions=8)  # grown for a v2 that starts later: the history's v1 has 6
    v1 = RoutingMap(version=1, partitions=6, topic=events)
    publish_map(config, maps_topic, v1, bucket_width_ms=MINUTE)
    publish_map(config, maps_topic, RoutingMap(version=2, partitions=8, topic=events,
                                               first_bucket_ms=next_bucket(int(time.time() * 1000), 30)),
                bucket_width_ms=MINUTE, events_partitions=8)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    result = subprocess.run([sys.executable, "-m", "streams.cli", "produce", "--bootstrap-server", kafka_bootstrap,
                             "--topic", events, "--routing-maps-topic", maps_topic, "--count", "300", "--json"],
                            capture_output=True, text=True, timeout=120, env=clean)
    assert result.returncode == 0, result.stderr
    got = consume_all(kafka_bootstrap, events, 300)
    codec = JsonCodec("event")
    assert len(got) == 300
    assert all(m.partition() == v1.partition_of(codec.decode(m.value())["key"]) for m in got)


def test_a_monitor_snapshot_shows_the_map_in_force_and_the_next_one_and_streams_monitor_prints_them(
        kafka_bootstrap: str, make_topic: Callable[..., str], maps_topic: str) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    events = make_topic("ev", partitions=4)
    hot = make_topic("hot", partitions=1, config=COMPACT)
    now = int(time.time() * 1000)
    v1 = RoutingMap(version=1, partitions=4, topic=events)
    v2 = RoutingMap(version=2, partitions=6, topic=events, placement="jump", hash="xxh3",
                    first_bucket_ms=next_bucket(now, 60))
    with Monitor(config, events_topic=events, hot_keys_topic=hot, group="g",
                 routing_maps_topic=maps_topic + "-missing") as missing:
        snap = missing.snapshot()
        assert (snap.map_in_force, snap.next_map) == (None, None)  # no topic: nothing to show, no error
    with Monitor(config, events_topic=events, hot_keys_topic=hot, group="g", routing_maps_topic=maps_topic) as monitor:
        assert (monitor.snapshot().map_in_force, monitor.snapshot().next_map) == (None, None)  # empty
        publish_map(config, maps_topic, v1, bucket_width_ms=MINUTE)
        publish_map(config, maps_topic, v2, bucket_width_ms=MINUTE)
        snap = monitor.snapshot()
        assert (snap.map_in_force, snap.next_map) == (v1, v2)
        record = snap.to_record()["routing_maps"]
        assert record["in_force"]["version"] == 1 and record["next"]["partitions"] == 6
        assert record["next"]["first_bucket_utc"] == datetime.fromtimestamp(
            v2.first_bucket_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    result = subprocess.run([sys.executable, "-m", "streams.cli", "monitor", "--bootstrap-server", kafka_bootstrap,
                             "--hot-keys-topic", hot, "--events-topic", events, "--routing-maps-topic", maps_topic,
                             "--once", "--interval", "100ms"], capture_output=True, text=True, timeout=120, env=clean)
    assert result.returncode == 0, result.stderr
    lines = {name: line[len(name):].strip() for line in result.stdout.splitlines()
             for name in ("routing map", "next routing map") if line.startswith(name + " ")}
    assert lines["routing map"].startswith(f"v1: 4 partitions, mod + murmur2, {events}, since 1970-01-01 00:00:00Z")
    when = datetime.fromtimestamp(v2.first_bucket_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    assert lines["next routing map"].startswith(f"v2: 6 partitions, jump + xxh3, {events}, from {when} (in ")
