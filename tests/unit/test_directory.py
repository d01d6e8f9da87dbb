"""The key directory: moves and splits on explicit partitions, salts, and placement notices (v2 and v1)."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, HotKeyNoticeError, InvalidIdError
from streams.core.routing.directory import (
    MAX_KEY_BYTES,
    NOTICE_V2,
    HotKeyNotice,
    KeyDirectory,
    decode_notice,
    encode_notice,
    event_id_bytes,
    salt_for,
    salted_key,
)
from streams.core.routing.hashing import canonical_key, kafka_partition
from streams.core.routing.placement import PLACEMENTS
from streams.core.routing.router import UNSPLIT, Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
MINUTE = 60_000
T0 = 1_764_000_000_000  # a 5-minute boundary
FIVE_MIN = TimeBuckets("5m")


def a_map(**overrides: Any) -> RoutingMap:
    return RoutingMap(**{"version": 1, "partitions": 12, "topic": "events", **overrides})


def a_notice(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "key": b"tenant-1", "key_display": "tenant-1", "placement": [7, 2, 10, 4], "home": 3,
        "estimated_rate": 5000.0, "share": 0.25, "partitions": 12, "detected_at_ms": T0,
        "hot_since_ms": T0 - MINUTE, "map_version": 1, "detector": "decider-0",
    }
    record.update(overrides)
    return record


keys = st.one_of(st.text(min_size=1, max_size=40), st.binary(min_size=1, max_size=40), st.integers(), st.uuids())
times = st.integers(T0 - 3_600_000, T0 + 3_600_000)


# --- moves and splits ------------------------------------------------------------------------


@settings(deadline=None)
@given(st.integers(1, 40), st.data())
def test_a_split_keys_k_salts_land_on_exactly_its_k_chosen_partitions(n: int, data: st.DataObject) -> None:
    placement = tuple(data.draw(st.permutations(range(n)))[:data.draw(st.integers(2, max(2, n)))]) if n > 1 else (0,)
    key = data.draw(st.binary(min_size=1, max_size=20))
    router = Router(FIVE_MIN, [a_map(partitions=n, placement=data.draw(st.sampled_from(PLACEMENTS)))])
    router.directory.set(key, placement, n)
    seen: dict[int, int] = {}
    for event_id in range(200 * len(placement)):
        decision = router.route(key, T0, event_id)
        seen[decision.salt] = decision.partition
        if len(seen) == len(placement):
            break
    if len(placement) == 1:
        assert seen == {0: placement[0]}
    else:
        assert seen == dict(enumerate(placement)), "salt i goes to placement[i]"


def test_a_moved_key_keeps_its_record_key_and_goes_to_its_one_partition() -> None:
    router = Router(FIVE_MIN, [a_map()])
    home = kafka_partition(b"mid", 12)
    target = (home + 5) % 12
    router.directory.set(b"mid", (target,), 12)
    for event_id in range(50):
        decision = router.route("mid", T0, event_id)
        assert (decision.partition, decision.key, decision.salt) == (target, b"mid", 0)
    assert router.route("mid", T0).partition == target  # a move needs no event ID
    assert router.home_of("mid") == home


def test_a_split_event_carries_the_salted_key_and_its_salt() -> None:
    router = Router(FIVE_MIN, [a_map()])
    router.directory.set(b"hot", (9, 1, 6, 3), 12)
    event_id = uuid.UUID("0190a0b1-7c2d-7abc-8def-0123456789ab")
    salt = xxhash.xxh3_64_intdigest(event_id.bytes) % 4
    decision = router.route("hot", T0, event_id)
    assert decision.salt == salt == salt_for(event_id, 4)
    assert decision.key == b"hot#%d" % salt == salted_key(b"hot", salt)
    assert decision.partition == (9, 1, 6, 3)[salt]


@given(st.one_of(st.binary(min_size=1, max_size=16), st.integers(0, 2**64 - 1), st.uuids()), st.integers(2, 12))
def test_the_same_event_id_always_gets_the_same_salt(event_id: object, k: int) -> None:
    first = Router(FIVE_MIN, [a_map()])
    again = Router(FIVE_MIN, [a_map()], memo_size=0)
    for router in (first, again):
        router.directory.set(b"hot", tuple(range(k)), 12)
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
    router.directory.set(b"hot", (0, 4, 8), 12)
    with pytest.raises(InvalidIdError, match="event_id"):
        router.route("hot", T0)
    assert router.route("cold", T0).salt == UNSPLIT


def test_placing_and_sending_home_take_effect_on_the_next_event() -> None:
    router = Router(FIVE_MIN, [a_map()])
    home = router.route("hot", T0, 1)
    assert home.salt == UNSPLIT
    router.directory.set(b"hot", (2, 5, 11), 12)
    assert router.route("hot", T0, 1).partition in (2, 5, 11)
    router.directory.set(b"hot", ((home.partition + 1) % 12,), 12)
    assert router.route("hot", T0, 1).partition == (home.partition + 1) % 12
    router.directory.remove(b"hot")
    assert router.route("hot", T0, 1) == home


@settings(deadline=None)
@given(st.lists(st.tuples(keys, times, st.integers(0, 2**64 - 1)), min_size=1, max_size=30), st.integers(1, 6))
def test_route_never_returns_a_partition_outside_the_map_in_force(events: list[tuple[object, int, int]], small: int) -> None:
    # Placements made for 12 partitions, then a map with fewer: such keys go home.
    router = Router(FIVE_MIN, [a_map(version=1, partitions=12, first_bucket_ms=T0 - 3_600_000)])
    router.install(a_map(version=2, partitions=small, placement="jump", hash="xxh3", first_bucket_ms=T0))
    for key, _, _ in events:
        router.directory.set(canonical_key(key), (11, 0, 5), 12)
    for key, ts, event_id in events:
        assert 0 <= router.route(key, ts, event_id).partition < router.map_for(ts).partitions


# --- the directory's limits ----------------------------------------------------------------------


@pytest.mark.parametrize("placement", [(), (12,), (-1,), (3, 3), (1.0,), (True,), tuple(range(13))])
def test_a_placement_out_of_range_repeated_or_too_long_is_rejected_and_counted(placement: tuple) -> None:
    directory = KeyDirectory()
    with pytest.raises(HotKeyNoticeError, match="placement"):
        directory.set(b"k", placement, 12)
    assert directory.rejected == 1 and directory.placement(b"k") is None


def test_the_directory_caps_key_length_and_size_and_counts_rejections() -> None:
    directory = KeyDirectory(max_entries=2)
    directory.set(b"a", (1, 2), 4)
    directory.set(b"b", (3,), 4)
    directory.set(b"a", (0, 1, 2), 4)  # updating an existing key is fine when full
    with pytest.raises(HotKeyNoticeError, match="full"):
        directory.set(b"c", (1,), 4)
    with pytest.raises(HotKeyNoticeError, match=str(MAX_KEY_BYTES)):
        directory.set(b"x" * (MAX_KEY_BYTES + 1), (1,), 4)
    with pytest.raises(HotKeyNoticeError):
        directory.set(b"", (1,), 4)
    with pytest.raises(HotKeyNoticeError):
        directory.set("a", (1,), 4)  # type: ignore[arg-type]
    assert directory.rejected == 4
    assert directory.snapshot() == {b"a": (0, 1, 2), b"b": (3,)}
    directory.remove(b"a")
    assert len(directory) == 1 and directory.lookup(b"a") is None


def test_bad_memo_and_directory_limits_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="memo_size"):
        Router(FIVE_MIN, [a_map()], memo_size=-1)
    with pytest.raises(ConfigError, match="max_entries"):
        KeyDirectory(max_entries=0)


def test_a_notice_for_a_larger_map_than_the_one_in_force_is_rejected() -> None:
    router = Router(FIVE_MIN, [a_map(partitions=6)])
    with pytest.raises(HotKeyNoticeError):
        router.apply_notice(HotKeyNotice.from_record(a_notice()))  # names partition 7 and 10 of 12
    assert router.directory.rejected == 1 and len(router.directory) == 0


def test_the_directory_is_safe_to_update_while_routing() -> None:
    router = Router(FIVE_MIN, [a_map()])
    stop = threading.Event()

    def updater() -> None:
        i = 0
        while not stop.is_set():
            router.directory.set(b"k%d" % (i % 50), tuple(range(i % 12, 12)), 12)
            i += 1

    thread = threading.Thread(target=updater)
    thread.start()
    try:
        for i in range(20_000):
            assert 0 <= router.route(b"k%d" % (i % 50), T0, i).partition < 12
    finally:
        stop.set()
        thread.join()


# --- notices on the wire ---------------------------------------------------------------------------


def test_a_notice_round_trips_through_avro_and_matches_its_schema() -> None:
    notice = HotKeyNotice.from_record(a_notice())
    assert HotKeyNotice.from_record(notice.to_record()) == notice
    assert notice.placement == (7, 2, 10, 4) and notice.split_factor == 4
    assert decode_notice(encode_notice(notice), NOTICE_V2, home=lambda key, n: 0, partitions=12) == notice
    schema = json.loads((SCHEMAS / "hot_key_notice.avsc").read_text())
    assert [f["name"] for f in schema["fields"]] == list(notice.to_record())


def test_a_version_1_notice_still_decodes_as_its_consecutive_placement() -> None:
    v1 = {name: value for name, value in a_notice().items() if name not in ("placement", "home")}
    v1["split_factor"] = 3
    raw = AvroCodec("hot_key_notice_v1").encode(v1)
    notice = decode_notice(raw, None, home=lambda key, n: 10, partitions=12)
    assert notice.placement == (10, 11, 0) and notice.home == 10


@pytest.mark.parametrize(
    "change",
    [
        {"partitions": -1}, {"partitions": 0}, {"split_factor": 0}, {"split_factor": 13}, {"split_factor": -3},
        {"partitions": 2, "split_factor": 3}, {"share": 1.5}, {"share": float("nan")},
        {"estimated_rate": -1.0}, {"estimated_rate": float("inf")}, {"map_version": 0}, {"map_version": -5},
        {"detected_at_ms": -1}, {"hot_since_ms": T0 + 1}, {"detector": ""}, {"key_display": "x" * 2000},
        {"key": b""}, {"key": b"x" * 1025},
    ],
)
def test_a_malformed_version_1_notice_is_rejected_on_its_own_fields_whatever_map_is_in_force(
        change: dict[str, Any]) -> None:
    """Issue 26: a v1 notice with partitions = -1 was accepted because the map's count stood in for its own."""
    v1 = {name: value for name, value in a_notice().items() if name not in ("placement", "home")}
    v1["split_factor"] = 2
    v1.update(change)
    raw = AvroCodec("hot_key_notice_v1").encode(v1)
    with pytest.raises(HotKeyNoticeError):
        decode_notice(raw, None, home=lambda key, n: 0, partitions=12)


def test_a_notice_with_an_unknown_schema_header_is_rejected() -> None:
    raw = encode_notice(HotKeyNotice.from_record(a_notice()))
    with pytest.raises(HotKeyNoticeError, match="unknown schema"):
        decode_notice(raw, b"hot_key_notice/99", home=lambda key, n: 0, partitions=12)


@pytest.mark.parametrize(
    "change",
    [
        {"placement": []}, {"placement": [12]}, {"placement": [1, 1]}, {"placement": [-1]},
        {"placement": [True]}, {"placement": list(range(13))}, {"placement": "1,2"}, {"home": 12},
        {"key": b""}, {"key": b"x" * 1025}, {"key": "tenant-1"},
        {"share": 1.5}, {"share": float("nan")}, {"estimated_rate": -1.0}, {"estimated_rate": float("inf")},
        {"partitions": 0}, {"partitions": True}, {"map_version": 0}, {"detected_at_ms": -1},
        {"hot_since_ms": T0 + 1}, {"detector": ""}, {"detector": 7}, {"key_display": "x" * 2000},
        {"extra": 1},
    ],
)
def test_a_malformed_notice_is_rejected(change: dict[str, Any]) -> None:
    with pytest.raises(HotKeyNoticeError):
        HotKeyNotice.from_record(a_notice(**change))


@pytest.mark.parametrize("field", ["key", "placement", "partitions", "detector"])
def test_a_notice_missing_a_field_is_rejected_naming_it(field: str) -> None:
    record = a_notice()
    del record[field]
    with pytest.raises(HotKeyNoticeError, match=field):
        HotKeyNotice.from_record(record)


# --- hostile notices, generated ----------------------------------------------------------

hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.binary(max_size=30), st.lists(st.integers(-5, 20), max_size=30),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


def v1_notice(**overrides: Any) -> dict[str, Any]:
    record = {name: value for name, value in a_notice().items() if name not in ("placement", "home")}
    record.update(split_factor=3, **overrides)
    return record


@settings(max_examples=400)
@given(st.sampled_from(["v1", "v2"]), st.data())
def test_a_hostile_notice_of_either_version_is_refused_naming_its_field_or_read_within_its_own_bounds(
        version: str, data: st.DataObject) -> None:
    record = v1_notice() if version == "v1" else a_notice()
    for _ in range(data.draw(st.integers(1, 3))):  # corrupt, drop or add one to three fields
        action = data.draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "add":
            record[data.draw(st.text(min_size=1, max_size=8))] = data.draw(hostile_values)
        elif record:
            name = data.draw(st.sampled_from(sorted(record)))
            if action == "drop":
                del record[name]
            else:
                record[name] = data.draw(hostile_values)
    try:
        if version == "v1":
            notice = HotKeyNotice.from_v1_record(record, lambda key, n: kafka_partition(key, n),
                                                 data.draw(st.sampled_from([None, 12, 24])))
        else:
            notice = HotKeyNotice.from_record(record)
    except HotKeyNoticeError as exc:
        assert "'" in str(exc) or "field" in str(exc), f"the error must name what is wrong: {exc}"
        return
    # Accepted: only a record every field of which is still in bounds.
    assert notice.key.__class__ is bytes and notice.key
    assert 1 <= notice.partitions and len(set(notice.placement)) == len(notice.placement) >= 1
    assert all(0 <= p < notice.partitions for p in notice.placement) and 0 <= notice.home < notice.partitions
    if version == "v1":
        assert record["partitions"].__class__ is int and record["partitions"] >= 1, "its own count checked too"
