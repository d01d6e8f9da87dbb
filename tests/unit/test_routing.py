"""Routing maps, the router, hot-key splitting and hot-key notices."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import (
    InvalidBucketError,
    InvalidKeyError,
    RoutingMapError,
)
from streams.core.routing.hashing import jump_hash, kafka_partition, murmur2
from streams.core.routing.placement import HASHES, PLACEMENTS, make_placer
from streams.core.routing.router import (
    UNSPLIT,
    Router,
    RoutingDecision,
    RoutingMap,
)
from streams.core.time.buckets import TimeBuckets

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
MINUTE = 60_000
T0 = 1_764_000_000_000  # 2025-11-24T16:00:00Z, a 5-minute boundary
FIVE_MIN = TimeBuckets("5m")


def a_map(**overrides: Any) -> RoutingMap:
    fields: dict[str, Any] = {"version": 1, "partitions": 12, "topic": "events"}
    fields.update(overrides)
    return RoutingMap(**fields)


keys = st.one_of(st.text(min_size=1, max_size=40), st.binary(min_size=1, max_size=40), st.integers(), st.uuids())
times = st.integers(T0 - 3_600_000, T0 + 3_600_000)


# --- placement ---------------------------------------------------------------------------


def test_the_default_map_is_kafkas_mod_murmur2() -> None:
    routing_map = a_map()
    assert (routing_map.placement, routing_map.hash) == ("mod", "murmur2")
    for key in (b"tenant-1", b"foobar", uuid.uuid4().bytes):
        assert routing_map.partition_of(key) == kafka_partition(key, 12)


@pytest.mark.parametrize("key", [b"tenant-1", b"\x00", uuid.UUID(int=7).bytes, b"x" * 300])
def test_every_hash_and_placement_follows_the_documented_formula(key: bytes) -> None:
    n = 13
    digest = hashlib.sha256(key).digest()
    expected = {
        ("mod", "murmur2"): (murmur2(key) & 0x7FFFFFFF) % n,
        ("mod", "xxh3"): xxhash.xxh3_64_intdigest(key) % n,
        ("mod", "sha256"): int.from_bytes(digest, "big") % n,
        ("jump", "murmur2"): jump_hash(murmur2(key) & 0x7FFFFFFF, n),
        ("jump", "xxh3"): jump_hash(xxhash.xxh3_64_intdigest(key), n),
        ("jump", "sha256"): jump_hash(int.from_bytes(digest[:8], "big"), n),
    }
    assert {(p, h): make_placer(h, p, n)(key) for p in PLACEMENTS for h in HASHES} == expected


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 60), st.integers(0, 2**32))
def test_growing_a_jump_map_moves_only_keys_to_the_new_partition_and_few_of_them(n: int, seed: int) -> None:
    rng = random.Random(seed)
    before, after = a_map(placement="jump", hash="xxh3", partitions=n), a_map(placement="jump", hash="xxh3", partitions=n + 1)
    moved = 0
    count = 3_000
    for _ in range(count):
        key = rng.randbytes(12)
        old, new = before.partition_of(key), after.partition_of(key)
        if old != new:
            assert new == n
            moved += 1
    p = 1 / (n + 1)
    assert abs(moved - count * p) <= 5 * (count * p * (1 - p)) ** 0.5


def test_growing_a_mod_map_moves_most_keys() -> None:
    rng = random.Random(3)
    keys_ = [rng.randbytes(12) for _ in range(3_000)]
    moved = sum(a_map(partitions=12).partition_of(k) != a_map(partitions=13).partition_of(k) for k in keys_)
    assert moved > 0.8 * len(keys_)


# --- routing maps -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("version", 0), ("version", True), ("version", 2**31), ("version", "1"),
        ("partitions", 0), ("partitions", 100_001), ("partitions", True), ("partitions", 12.0),
        ("placement", "ring"), ("placement", None), ("hash", "md5"), ("hash", "MURMUR2"),
        ("first_bucket_ms", -1), ("first_bucket_ms", False), ("first_bucket_ms", 2**63),
        ("topic", ""), ("topic", "."), ("topic", ".."), ("topic", "a b"), ("topic", "events/1"),
        ("topic", "x" * 250), ("topic", "e.{bucket}.{bucket}"), ("topic", "e.{hour}"), ("topic", "x" * 240 + "{bucket}"),
        ("topic", b"events"),
    ],
)
def test_a_routing_map_with_a_bad_field_raises_naming_it(field: str, bad: object) -> None:
    with pytest.raises(RoutingMapError, match=field):
        a_map(**{field: bad})


@pytest.mark.parametrize("topic", ["events", "a", "x" * 249, "Events_v2.eu-west-1", "events.{bucket}", "{bucket}"])
def test_legal_topic_names_and_templates_are_accepted(topic: str) -> None:
    assert a_map(topic=topic).topic == topic


def test_a_routing_map_round_trips_through_its_record() -> None:
    routing_map = a_map(version=3, partitions=48, placement="jump", hash="xxh3", first_bucket_ms=T0, topic="e.{bucket}")
    record = routing_map.to_record()
    assert RoutingMap.from_record(record) == routing_map
    schema = json.loads((SCHEMAS / "routing_map.avsc").read_text())
    assert [f["name"] for f in schema["fields"]] == list(record)


@pytest.mark.parametrize(
    "change",
    [
        {"drop": "hash"}, {"drop": "topic"}, {"add": ("owner", "me")}, {"set": ("version", True)},
        {"set": ("partitions", 10**12)}, {"set": ("placement", "hash")}, {"set": ("first_bucket_ms", "0")},
    ],
)
def test_from_record_rejects_missing_extra_and_ill_typed_fields(change: dict[str, Any]) -> None:
    record = a_map().to_record()
    if "drop" in change:
        del record[change["drop"]]
    if "add" in change:
        record[change["add"][0]] = change["add"][1]
    if "set" in change:
        record[change["set"][0]] = change["set"][1]
    with pytest.raises(RoutingMapError):
        RoutingMap.from_record(record)


def test_a_routing_map_survives_pickling() -> None:
    routing_map = a_map(placement="jump", hash="sha256")
    assert pickle.loads(pickle.dumps(routing_map)) == routing_map


def test_from_record_rejects_a_non_mapping() -> None:
    with pytest.raises(RoutingMapError, match="list"):
        RoutingMap.from_record([("version", 1)])  # type: ignore[arg-type]


# --- the router: maps over time -----------------------------------------------------------


def test_map_cutover_happens_exactly_at_the_bucket_boundary() -> None:
    old = a_map(version=1, partitions=6)
    new = a_map(version=2, partitions=7, first_bucket_ms=T0)
    router = Router(FIVE_MIN, [new, old])  # any order
    assert router.route("k", T0 - 1).map_version == 1
    assert router.route("k", T0).map_version == 2
    assert router.map_for(T0 - 1) is old and router.map_for(T0) is new
    assert router.route("k", T0 - 1).partition == kafka_partition(b"k", 6)
    assert router.route("k", T0).partition == kafka_partition(b"k", 7)


def test_an_older_bucket_keeps_its_map_after_a_newer_one_is_installed() -> None:
    router = Router(FIVE_MIN, [a_map(version=1, partitions=6)])
    future = router.route("k", T0 + 10 * MINUTE)
    assert future.map_version == 1
    router.install(a_map(version=2, partitions=9, first_bucket_ms=T0 + 5 * MINUTE))
    assert router.route("k", T0 + 10 * MINUTE).map_version == 2  # memo of the old answer dropped
    assert router.route("k", T0 + 10 * MINUTE).partition == kafka_partition(b"k", 9)
    assert router.route("k", T0).map_version == 1


@pytest.mark.parametrize(
    "newer",
    [
        a_map(version=2, first_bucket_ms=T0 + 1),  # misaligned
        a_map(version=2, first_bucket_ms=T0 + MINUTE),  # misaligned for 5-minute buckets
        a_map(version=2, first_bucket_ms=T0 + 5 * MINUTE),  # duplicate version
        a_map(version=1, first_bucket_ms=T0 + 10 * MINUTE),  # older version
        a_map(version=3, first_bucket_ms=T0),  # same first bucket as the newest
        a_map(version=3, first_bucket_ms=T0 - 5 * MINUTE),  # earlier first bucket
    ],
)
def test_installing_a_misaligned_older_or_duplicate_map_raises(newer: RoutingMap) -> None:
    router = Router(FIVE_MIN, [a_map(version=2, first_bucket_ms=T0)])
    with pytest.raises(RoutingMapError):
        router.install(newer)
    assert router.current.version == 2


def test_a_router_needs_a_map_and_refuses_a_misaligned_first_one() -> None:
    with pytest.raises(RoutingMapError):
        Router(FIVE_MIN, [])
    with pytest.raises(RoutingMapError):
        Router(FIVE_MIN, [a_map(first_bucket_ms=T0 + 1)])
    with pytest.raises(RoutingMapError):
        Router(FIVE_MIN, [a_map(), "not a map"])  # type: ignore[list-item]


def test_a_time_before_the_first_map_has_no_route() -> None:
    router = Router(FIVE_MIN, [a_map(first_bucket_ms=T0)])
    with pytest.raises(RoutingMapError):
        router.route("k", T0 - 1)
    with pytest.raises(RoutingMapError):
        router.map_for(T0 - 1)


@pytest.mark.parametrize("bad", [-1, 1.5e12, True, None, "1764000000000"])
def test_route_rejects_bad_timestamps(bad: object) -> None:
    router = Router(FIVE_MIN, [a_map()])
    router.route("k", T0)  # a memo entry must not let a bad time through
    with pytest.raises(InvalidBucketError):
        router.route("k", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "type_name"), [(None, "NoneType"), ("", "str"), (b"", "bytes"), (True, "bool"), (1.0, "float")])
def test_route_rejects_missing_and_empty_keys_naming_the_type(bad: object, type_name: str) -> None:
    router = Router(FIVE_MIN, [a_map()])
    router.route(1, T0)  # True == 1: the memo entry for 1 must not answer for True
    with pytest.raises(InvalidKeyError, match=type_name):
        router.route(bad, T0)


def test_a_decision_names_the_topic_bucket_and_map() -> None:
    router = Router(FIVE_MIN, [a_map(version=4, topic="events.{bucket}")])
    decision = router.route("tenant-1", T0 + 7 * MINUTE)
    assert decision == RoutingDecision(
        topic="events.20251124T1605Z", partition=kafka_partition(b"tenant-1", 12), key=b"tenant-1",
        bucket_index=(T0 + 5 * MINUTE) // (5 * MINUTE), bucket_start_ms=T0 + 5 * MINUTE,
        bucket_label="20251124T1605Z", map_version=4, salt=UNSPLIT,
    )
    assert router.route("tenant-1", T0 + 12 * MINUTE).topic == "events.20251124T1610Z"


def test_uuid_spellings_route_identically() -> None:
    router = Router(FIVE_MIN, [a_map()])
    u = uuid.uuid4()
    spellings = [str(u), str(u).upper(), u.hex, "{%s}" % u, "urn:uuid:%s" % u, u, u.bytes]
    assert len({router.route(s, T0)[:3] for s in spellings}) == 1


@given(st.lists(st.tuples(keys, times), min_size=1, max_size=40), st.sampled_from(PLACEMENTS), st.sampled_from(HASHES))
def test_memoised_routing_equals_unmemoised_routing(events: list[tuple[object, int]], placement: str, hash_: str) -> None:
    maps = [a_map(version=1, partitions=7, placement=placement, hash=hash_, first_bucket_ms=T0 - 3_600_000),
            a_map(version=2, partitions=11, placement=placement, hash=hash_, first_bucket_ms=T0)]
    memoised, plain = Router(FIVE_MIN, maps), Router(FIVE_MIN, maps, memo_size=0)
    for key, ts in events + events:
        assert memoised.route(key, ts) == plain.route(key, ts)
