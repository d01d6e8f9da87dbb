"""RoutingProducer on the real broker: every record where the router said, none lost or doubled."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from worker_harness import consume_all

from streams.core.errors import RoutingMapError
from streams.core.ids import parse_id
from streams.core.routing.directory import notice_headers
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec, JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer


def test_100000_routed_events_land_where_the_router_decided_exactly_once_and_in_order(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("routed", partitions=12)
    buckets = TimeBuckets("1m")
    now = int(time.time() * 1000)
    router = Router(buckets, [RoutingMap(version=1, partitions=12, topic=topic, placement="jump", hash="xxh3")])
    rng = random.Random(11)
    keys = [f"device-{rng.randrange(5000)}" for _ in range(100_000)]
    # Spread events over five buckets (the last few minutes), in time order per key.
    times = sorted(now - rng.randrange(5 * 60_000) for _ in keys)
    decided = {}
    with RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, serializer="json") as producer:
        for key, ts in zip(keys, times):
            d = producer.send(key, 1.0, ts_ms=ts)
            decided_key = d.key
            decided[(decided_key, ts, d.bucket_index)] = d.partition
    stats = producer.stats()
    assert (stats.sent, stats.delivered, stats.failed) == (100_000, 100_000, 0)

    got = consume_all(kafka_bootstrap, topic, 100_000)
    codec = JsonCodec("event")
    events = [(m, codec.decode(m.value())) for m in got]
    ids = [e["id"] for _, e in events]
    assert len(ids) == 100_000 and len(set(ids)) == 100_000, "lost or duplicated events"
    assert len({p for m, _ in events for p in [m.partition()]}) == 12
    last_id: dict[tuple[int, str], int] = {}
    for msg, event in events:
        # The router, asked again from what the record carries, names the partition it sits on.
        again = router.route(event["key"], event["ts_ms"], parse_id(event["id"]).value)
        assert msg.partition() == again.partition
        # Only what a reader needs: the content type (the key is not split, so no streams-salt).
        assert msg.headers() == [("content-type", b"application/json")]
        # Per (bucket, key), IDs (time-ordered, monotonic) appear in the order they were sent.
        slot = (again.bucket_index, event["key"])
        this_id = parse_id(event["id"]).value.int
        assert last_id.get(slot, -1) < this_id
        last_id[slot] = this_id


def test_mod_placement_puts_a_key_on_the_same_partition_as_an_aiokafka_producer(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("compat", partitions=7)
    router = Router(TimeBuckets("1h"), [RoutingMap(version=1, partitions=7, topic=topic)])
    keys = [f"user-{i}" for i in range(2_000)] + [str(uuid.uuid4()) for _ in range(500)]
    ours = {}
    with RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}) as producer:
        for key in keys:
            ours[key] = producer.send(key).partition

    async def theirs() -> dict[str, int]:
        p = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await p.start()
        try:
            out = {}
            for key in keys:
                meta = await (await p.send(topic, b"x", key=router.route(key, 0).key))
                out[key] = meta.partition
            return out
        finally:
            await p.stop()

    assert asyncio.run(theirs()) == ours


def test_a_topic_whose_partition_count_no_map_covers_is_refused_with_both_numbers(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("mismatch", partitions=5)
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=6, topic=topic)])
    producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
    with pytest.raises(RoutingMapError, match=r"has 5 partitions .* expects 6"):
        producer.send("k")
    producer.close()


def test_the_producer_follows_placement_notices_and_rejects_hostile_ones(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    events = make_topic("ev", partitions=8)
    hot = make_topic("hot", partitions=1, config={"cleanup.policy": "compact"})
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=8, topic=events)])
    codec = AvroCodec("hot_key_notice")
    v1 = AvroCodec("hot_key_notice_v1")
    now = int(time.time() * 1000)
    v2 = notice_headers()

    def notice(key: bytes, placement: list[int], partitions: int = 8) -> dict:
        return {"key": key, "key_display": key.decode(errors="replace")[:50], "placement": placement, "home": 0,
                "estimated_rate": 1000.0, "share": 0.5, "partitions": partitions, "detected_at_ms": now,
                "hot_since_ms": now, "map_version": 1, "detector": "test"}

    def old(key: bytes, k: int) -> dict:
        fields = {n: v for n, v in notice(key, [0]).items() if n not in ("placement", "home")}
        return {**fields, "split_factor": k}

    raw = Producer({"bootstrap.servers": kafka_bootstrap})
    raw.produce(hot, codec.encode(notice(b"tenant-hot", [6, 1, 3, 4])), b"tenant-hot", headers=v2)
    raw.produce(hot, codec.encode(notice(b"mid", [5])), b"mid", headers=v2)  # moved whole
    raw.produce(hot, v1.encode(old(b"legacy", 2)), b"legacy")  # version 1: no header, a split factor
    raw.produce(hot, codec.encode(notice(b"too-many", [8, 0], partitions=9)), b"too-many", headers=v2)  # 8 of 8
    raw.produce(hot, codec.encode(notice(b"twice", [2, 2])), b"twice", headers=v2)  # a repeated partition
    raw.produce(hot, b"\x00\x01garbage", b"garbage", headers=v2)  # wrong schema
    raw.produce(hot, codec.encode(notice(b"mismatch", [1, 2])), b"other-key", headers=v2)  # key disagrees
    raw.produce(hot, codec.encode(notice(b"k" * 2000, [1, 2])), b"k" * 2000, headers=v2)  # enormous key
    raw.produce(hot, codec.encode(notice(b"who", [1])), b"who", headers=[("streams-schema", b"x/9")])  # unknown
    assert raw.flush(10) == 0

    producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, hot_keys_topic=hot)
    try:
        assert producer.follower.wait_until_current(30), producer.follower.error
        assert producer.follower.applied == 3
        assert producer.follower.rejected == 6
        home = router.home_of(b"legacy")
        assert router.directory.snapshot() == {b"tenant-hot": (6, 1, 3, 4), b"mid": (5,),
                                               b"legacy": (home, (home + 1) % 8)}
        parts = {producer.send("tenant-hot").partition for _ in range(400)}
        assert parts == {6, 1, 3, 4}, "a key split over 4 chosen partitions uses exactly those"
        assert {producer.send("mid").partition for _ in range(20)} == {5}
        assert producer.send("too-many").salt == -1

        raw.produce(hot, None, b"tenant-hot")  # tombstone: home again
        assert raw.flush(10) == 0
        assert producer.follower.wait_for(lambda: b"tenant-hot" not in router.directory.snapshot(), timeout=10)
    finally:
        producer.close()
