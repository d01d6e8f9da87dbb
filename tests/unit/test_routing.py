"""Routing maps, the router, hot-key splitting and hot-key notices."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import (
    ConfigError,
    HotKeyNoticeError,
    InvalidBucketError,
    InvalidIdError,
    InvalidKeyError,
    RoutingMapError,
)
from streams.core.routing.hashing import canonical_key, jump_hash, kafka_partition, murmur2
from streams.core.routing.placement import HASHES, PLACEMENTS, make_placer
from streams.core.routing.router import UNSPLIT, Router, RoutingDecision, RoutingMap, partition_for
from streams.core.routing.splits import (
    MAX_KEY_BYTES,
    HotKeyNotice,
    SplitTable,
    event_id_bytes,
    salt_for,
    salted_key,
    salted_partition,
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


def a_notice(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "key": b"tenant-1", "key_display": "tenant-1", "split_factor": 4, "estimated_rate": 5000.0,
        "share": 0.25, "partitions": 12, "detected_at_ms": T0, "hot_since_ms": T0 - MINUTE,
        "map_version": 1, "detector": "detector-0",
    }
    record.update(overrides)
    return record


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


def test_partition_for_is_the_routed_partition() -> None:
    router = Router(FIVE_MIN, [a_map(placement="jump", hash="xxh3")])
    router.splits.set(b"hot", 5, 12)
    for key, event_id in [("tenant-1", None), ("hot", 1), ("hot", 2), ("hot", uuid.uuid4())]:
        assert partition_for(key, T0, router, event_id) == router.route(key, T0, event_id).partition


# --- hot-key splitting ---------------------------------------------------------------------


@settings(deadline=None)
@given(st.integers(1, 40), st.data())
def test_a_split_keys_k_sub_keys_land_on_k_distinct_partitions_for_every_k_up_to_n(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, n))
    key = data.draw(st.binary(min_size=1, max_size=20))
    routing_map = a_map(partitions=n, placement=data.draw(st.sampled_from(PLACEMENTS)))
    router = Router(FIVE_MIN, [routing_map])
    router.splits.set(key, k, n)
    p0 = routing_map.partition_of(key)
    seen: dict[int, int] = {}
    event_id = 0
    while len(seen) < k and event_id < 200 * k:
        decision = router.route(key, T0, event_id)
        seen[0 if decision.salt == UNSPLIT else decision.salt] = decision.partition  # k = 1 is unsplit
        event_id += 1
    assert len(seen) == k, "every salt should turn up"
    assert len(set(seen.values())) == k
    assert all(seen[i] == (p0 + i) % n for i in seen)


def test_a_split_event_carries_the_salted_key_and_its_salt() -> None:
    router = Router(FIVE_MIN, [a_map()])
    router.splits.set(b"hot", 4, 12)
    event_id = uuid.UUID("0190a0b1-7c2d-7abc-8def-0123456789ab")
    salt = xxhash.xxh3_64_intdigest(event_id.bytes) % 4
    decision = router.route("hot", T0, event_id)
    assert decision.salt == salt == salt_for(event_id, 4)
    assert decision.key == b"hot#%d" % salt == salted_key(b"hot", salt)
    assert decision.partition == (kafka_partition(b"hot", 12) + salt) % 12
    assert decision.partition == salted_partition(kafka_partition(b"hot", 12), salt, 12)


@given(st.one_of(st.binary(min_size=1, max_size=16), st.integers(0, 2**64 - 1), st.uuids()), st.integers(2, 12))
def test_the_same_event_id_always_gets_the_same_salt(event_id: object, k: int) -> None:
    first = Router(FIVE_MIN, [a_map()])
    again = Router(FIVE_MIN, [a_map()], memo_size=0)
    for router in (first, again):
        router.splits.set(b"hot", k, 12)
    decisions = {first.route("hot", T0, event_id), first.route("hot", T0 + 1, event_id), again.route("hot", T0, event_id)}
    assert len(decisions) == 1
    assert decisions.pop().salt == xxhash.xxh3_64_intdigest(event_id_bytes(event_id)) % k


def test_an_int_event_id_contributes_8_big_endian_bytes_and_a_uuid_16() -> None:
    assert event_id_bytes(1) == b"\x00" * 7 + b"\x01"
    assert event_id_bytes(uuid.UUID(int=1)) == b"\x00" * 15 + b"\x01"
    for bad in (None, -1, 2**64, True, "id", b"", 1.0):
        with pytest.raises(InvalidIdError):
            event_id_bytes(bad)


def test_a_split_key_without_an_event_id_raises() -> None:
    router = Router(FIVE_MIN, [a_map()])
    router.splits.set(b"hot", 3, 12)
    with pytest.raises(InvalidIdError, match="event_id"):
        router.route("hot", T0)
    assert router.route("cold", T0).salt == UNSPLIT


def test_splitting_and_unsplitting_take_effect_on_the_next_event() -> None:
    router = Router(FIVE_MIN, [a_map()])
    assert router.route("hot", T0, 1).salt == UNSPLIT
    router.splits.set(b"hot", 3, 12)
    assert router.route("hot", T0, 1).salt in range(3)
    router.splits.set(b"hot", 1, 12)
    assert router.route("hot", T0, 1) == router.route("hot", T0)
    assert router.route("hot", T0).salt == UNSPLIT


def test_a_split_factor_above_the_partition_count_is_rejected() -> None:
    table = SplitTable()
    with pytest.raises(HotKeyNoticeError, match="1..12"):
        table.set(b"hot", 13, 12)
    with pytest.raises(HotKeyNoticeError):
        Router(FIVE_MIN, [a_map()], splits=table).apply_notice(HotKeyNotice.from_record(a_notice(split_factor=13, partitions=20)))
    assert table.factor(b"hot") == 1
    assert table.rejected == 2


@settings(deadline=None)
@given(st.lists(st.tuples(keys, times, st.integers(0, 2**64 - 1)), min_size=1, max_size=30), st.integers(1, 6))
def test_route_never_returns_a_partition_outside_the_map_in_force(events: list[tuple[object, int, int]], small: int) -> None:
    # Splits sized for 12 partitions, then a map with fewer: the router must cap k at n.
    table = SplitTable()
    router = Router(FIVE_MIN, [a_map(version=1, partitions=12, first_bucket_ms=T0 - 3_600_000)], splits=table)
    router.install(a_map(version=2, partitions=small, placement="jump", hash="xxh3", first_bucket_ms=T0))
    for key, _, _ in events:
        table.set(canonical_key(key), 12, 12)
    for key, ts, event_id in events:
        decision = router.route(key, ts, event_id)
        n = router.map_for(ts).partitions
        assert 0 <= decision.partition < n
        assert decision.salt < n


# --- the split table --------------------------------------------------------------------


def test_the_split_table_caps_key_length_and_size_and_counts_rejections() -> None:
    table = SplitTable(max_entries=2)
    table.set(b"a", 2, 4)
    table.set(b"b", 2, 4)
    table.set(b"a", 3, 4)  # updating an existing key is fine when full
    with pytest.raises(HotKeyNoticeError, match="full"):
        table.set(b"c", 2, 4)
    with pytest.raises(HotKeyNoticeError, match=str(MAX_KEY_BYTES)):
        table.set(b"x" * (MAX_KEY_BYTES + 1), 2, 4)
    with pytest.raises(HotKeyNoticeError):
        table.set(b"", 2, 4)
    with pytest.raises(HotKeyNoticeError):
        table.set("a", 2, 4)  # type: ignore[arg-type]
    for bad_k in (0, -1, True, 2.0):
        with pytest.raises(HotKeyNoticeError):
            table.set(b"a", bad_k, 4)  # type: ignore[arg-type]
    assert table.rejected == 8
    assert table.snapshot() == {b"a": 3, b"b": 2}
    table.remove(b"a")
    table.set(b"b", 1, 4)
    assert len(table) == 0 and table.factor(b"b") == 1 and table.lookup(b"b") is None


def test_bad_memo_and_table_limits_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="memo_size"):
        Router(FIVE_MIN, [a_map()], memo_size=-1)
    with pytest.raises(ConfigError, match="max_entries"):
        SplitTable(max_entries=0)


def test_the_split_table_applies_records_and_counts_malformed_ones() -> None:
    table = SplitTable()
    notice = table.apply_record(a_notice(), partitions=12)
    assert notice.split_factor == 4 and table.factor(b"tenant-1") == 4
    with pytest.raises(HotKeyNoticeError):
        table.apply_record(a_notice(split_factor=0), partitions=12)
    with pytest.raises(HotKeyNoticeError):
        table.apply_record(a_notice(split_factor=8), partitions=6)  # valid notice, smaller map in force
    assert table.rejected == 2
    assert table.factor(b"tenant-1") == 4


def test_the_split_table_is_safe_to_update_while_routing() -> None:
    router = Router(FIVE_MIN, [a_map()])
    stop = threading.Event()

    def updater() -> None:
        i = 0
        while not stop.is_set():
            router.splits.set(b"k%d" % (i % 50), 1 + i % 12, 12)
            i += 1

    thread = threading.Thread(target=updater)
    thread.start()
    try:
        for i in range(20_000):
            assert 0 <= router.route(b"k%d" % (i % 50), T0, i).partition < 12
    finally:
        stop.set()
        thread.join()


# --- hot-key notices ----------------------------------------------------------------------


def test_a_notice_round_trips_and_matches_its_schema() -> None:
    notice = HotKeyNotice.from_record(a_notice())
    assert HotKeyNotice.from_record(notice.to_record()) == notice
    schema = json.loads((SCHEMAS / "hot_key_notice.avsc").read_text())
    assert (schema["name"], schema["namespace"]) == ("HotKeyNotice", "streams")
    assert [f["name"] for f in schema["fields"]] == list(notice.to_record())


def test_a_notice_takes_an_int_rate_as_a_float() -> None:
    assert HotKeyNotice.from_record(a_notice(estimated_rate=10)).estimated_rate == 10.0


@pytest.mark.parametrize(
    "change",
    [
        {"split_factor": 0}, {"split_factor": -2}, {"split_factor": 2.0}, {"split_factor": True},
        {"split_factor": 13}, {"key": b""}, {"key": b"x" * 1025}, {"key": "tenant-1"},
        {"share": 1.5}, {"share": float("nan")}, {"estimated_rate": -1.0}, {"estimated_rate": float("inf")},
        {"partitions": 0}, {"partitions": True}, {"map_version": 0}, {"detected_at_ms": -1},
        {"hot_since_ms": T0 + 1}, {"detector": ""}, {"detector": 7}, {"key_display": "x" * 2000},
        {"extra": 1},
    ],
)
def test_a_malformed_notice_is_rejected(change: dict[str, Any]) -> None:
    with pytest.raises(HotKeyNoticeError):
        HotKeyNotice.from_record(a_notice(**change))


@pytest.mark.parametrize("field", ["key", "split_factor", "partitions", "detector"])
def test_a_notice_missing_a_field_is_rejected_naming_it(field: str) -> None:
    record = a_notice()
    del record[field]
    with pytest.raises(HotKeyNoticeError, match=field):
        HotKeyNotice.from_record(record)
