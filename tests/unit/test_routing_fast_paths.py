"""The router's and producer's fast paths give what the plain paths give, bit for bit."""

from __future__ import annotations

import random
import uuid

import orjson
from hypothesis import given
from hypothesis import strategies as st

from streams.core.routing.directory import event_id_bytes
from streams.core.routing.hashing import canonical_key, kafka_partition
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import _Stamper, key_text

T0 = 1_764_000_000_000
FIVE_MIN = TimeBuckets("5m")


def a_router(memo_size: int = 65_536, **fields: object) -> Router:
    return Router(FIVE_MIN, [RoutingMap(version=1, partitions=12, topic="events", **fields)], memo_size=memo_size)


def test_a_stream_of_more_distinct_keys_than_the_memo_holds_routes_as_an_unmemoised_router() -> None:
    rng = random.Random(5)
    small, plain = a_router(memo_size=8), a_router(memo_size=0)
    keys = [f"user-{rng.randrange(40)}" for _ in range(2_000)] + [str(uuid.UUID(int=rng.getrandbits(128)))
                                                                   for _ in range(500)]
    rng.shuffle(keys)
    for i, key in enumerate(keys):
        ts = T0 + (i % 7) * 60_000 * 3  # crosses bucket boundaries too
        assert small.route(key, ts) == plain.route(key, ts)


def test_a_key_is_memoised_on_its_second_sighting_only_before_and_after_the_memo_fills() -> None:
    router = a_router(memo_size=4)
    router.route("first", T0)
    assert "first" not in router._memo  # a one-off key costs no memo entry
    router.route("first", T0)
    assert "first" in router._memo
    for i in range(5):  # routed twice each: the memo fills past its size and is cleared
        router.route(f"fill-{i}", T0)
        router.route(f"fill-{i}", T0)
    router.route("once", T0)
    assert "once" not in router._memo
    router.route("once", T0)
    assert "once" in router._memo
    assert router.route("once", T0) is router.route("once", T0)


def test_a_router_whose_keys_fit_its_memo_returns_one_decision_object_from_the_second_sighting_on() -> None:
    router = a_router(memo_size=100)
    router.route("tenant-1", T0)
    second = router.route("tenant-1", T0)
    assert router.route("tenant-1", T0) is second


def test_a_cold_key_routes_as_an_unmemoised_router_through_the_last_bucket_cache_across_buckets_and_maps() -> None:
    rng = random.Random(12)
    cached, plain = a_router(), a_router(memo_size=0)
    times = [T0 + rng.randrange(4) * 300_000 + rng.randrange(300_000) for _ in range(3_000)]
    keys = [rng.choice([str(uuid.UUID(int=rng.getrandbits(128))), f"k-{rng.randrange(50)}", b"raw",
                        rng.randrange(1000)]) for _ in times]
    for i, (key, ts) in enumerate(zip(keys, times)):
        if i == 1_500:  # a new map from the fourth bucket on: both routers take it over there
            for r in (cached, plain):
                r.install(RoutingMap(version=2, partitions=20, topic="events", first_bucket_ms=T0 + 3 * 300_000))
        assert cached.route(key, ts) == plain.route(key, ts)


@given(st.uuids())
def test_canonical_bytes_route_exactly_as_the_uuid_text_they_came_from(value: uuid.UUID) -> None:
    router = a_router()
    for spelling in (str(value), str(value).upper(), value.hex, f"{{{value}}}", f"urn:uuid:{value}"):
        canonical = canonical_key(spelling)
        assert canonical == value.bytes
        assert router.route(canonical, T0) == router.route(spelling, T0) == router.route(value, T0)
        assert router.route(spelling, T0).partition == kafka_partition(value.bytes, 12)
        assert key_text(spelling, canonical) == str(value)


@given(st.text(min_size=1, max_size=40))
def test_key_text_of_text_that_is_no_uuid_is_the_text_itself(text: str) -> None:
    try:
        canonical = canonical_key(text)
    except Exception:  # noqa: BLE001 - unencodable text is canonical_key's to refuse
        return
    if len(canonical) == 16 and len(text) >= 32:
        return  # a UUID spelling: the test above
    assert key_text(text, canonical) == text


@given(st.uuids())
def test_an_id_stamped_as_a_uuid_object_encodes_as_its_text_and_salts_as_its_bytes(value: uuid.UUID) -> None:
    record = {"id_kind": "uuid7", "ts_ms": T0, "key": "k", "value": 1.0, "attributes": {}}
    assert orjson.dumps({"id": value, **record}) == orjson.dumps({"id": str(value), **record})
    router = a_router()
    router.directory.set(b"hot", (0, 3, 6, 9), 12)
    assert router.route("hot", T0, value) == router.route("hot", T0, value.bytes)


def test_every_uuid7_stamp_gives_the_id_text_the_salt_bytes_and_the_time_of_one_id() -> None:
    for uuid_objects, compiled in ((False, False), (True, False), (False, True), (True, True)):
        stamp = _Stamper("uuid7", 0, uuid_objects=uuid_objects, compiled=compiled).stamp
        for _ in range(100):
            ident, salt_id, ms = stamp()
            parsed = uuid.UUID(str(ident))
            assert str(ident) == str(parsed) and parsed.version == 7
            assert event_id_bytes(salt_id) == parsed.bytes
            assert ms == parsed.int >> 80
