"""Routing maps on the wire and the successor rule: round trips, every refusal by its reason, hostile records."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import InvalidArgumentError, RoutingMapError, SerializationError
from streams.core.routing.maps import (
    MAP_SCHEMA,
    REASONS,
    check_successor,
    decode_map,
    encode_map,
    in_force_and_next,
    is_installed,
    map_headers,
    map_record_key,
)
from streams.core.routing.placement import HASHES, MAX_PARTITIONS, PLACEMENTS
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.maps import RoutingMapFollower
from streams.kafka.metrics import ProducerMetrics

MINUTE = 60_000
RAW = AvroCodec("routing_map")
V1 = RoutingMap(version=1, partitions=6, topic="events", first_bucket_ms=0)


def v(version: int, partitions: int = 6, first_bucket_ms: int = 10 * MINUTE, topic: str = "events",
      **kw: str) -> RoutingMap:
    return RoutingMap(version=version, partitions=partitions, topic=topic, first_bucket_ms=first_bucket_ms, **kw)


def raw_record(**changes: object) -> bytes:
    """The Avro of v1 with some fields replaced, bypassing RoutingMap's validation (what a hostile writer sends)."""
    return RAW.encode({**V1.to_record(), **changes})


def refusal(installed: list[RoutingMap], candidate: RoutingMap, *, published_ms: int | None = 0,
            topic_partitions: int | None = None) -> str | None:
    with pytest.raises(RoutingMapError) as info:
        check_successor(installed, candidate, published_ms=published_ms, topic_partitions=topic_partitions,
                        bucket_width_ms=MINUTE)
    assert info.value.reason in REASONS
    assert info.value.reason in str(info.value)
    return info.value.reason


@given(version=st.integers(1, 2**31 - 1), partitions=st.integers(1, MAX_PARTITIONS),
       placement=st.sampled_from(PLACEMENTS), hash_=st.sampled_from(HASHES),
       first_bucket=st.integers(0, 2**40), topic=st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True))
def test_every_valid_map_survives_encode_and_decode_unchanged(version: int, partitions: int, placement: str,
                                                             hash_: str, first_bucket: int, topic: str) -> None:
    if topic in (".", ".."):
        return
    m = RoutingMap(version=version, partitions=partitions, topic=topic, placement=placement, hash=hash_,
                   first_bucket_ms=first_bucket)
    assert decode_map(encode_map(m), map_headers()) == m


def test_records_carry_the_schema_header_and_one_sortable_key_per_version() -> None:
    assert map_headers() == [("streams-schema", MAP_SCHEMA.encode())]
    assert map_record_key(v(2)) == b"v0000000002"
    assert map_record_key(v(2**31 - 1)) == b"v2147483647"
    assert sorted(map_record_key(v(n)) for n in (10, 9, 100)) == [map_record_key(v(n)) for n in (9, 10, 100)]


def test_a_template_topic_round_trips() -> None:
    m = v(3, topic="events.{bucket}")
    assert decode_map(encode_map(m), map_headers()).topic == "events.{bucket}"


@pytest.mark.parametrize("headers", [None, [], [("streams-schema", b"hot_key_notice/2")],
                                     [("other", MAP_SCHEMA.encode())]])
def test_a_record_without_the_routing_map_schema_header_is_refused_as_wrong_schema(headers: object) -> None:
    with pytest.raises(RoutingMapError, match="streams-schema") as info:
        decode_map(encode_map(V1), headers)  # type: ignore[arg-type]
    assert info.value.reason == "wrong schema"


def test_a_tombstone_is_refused() -> None:
    with pytest.raises(RoutingMapError) as info:
        decode_map(None, map_headers())
    assert info.value.reason == "tombstone"


@pytest.mark.parametrize("value", [b"\x00\xff garbage", b"", encode_map(V1) + b"\x00", encode_map(V1)[:5]])
def test_garbage_bytes_are_a_serialization_error_naming_a_field(value: bytes) -> None:
    with pytest.raises(SerializationError) as info:
        decode_map(value, map_headers())
    assert info.value.field is not None


@pytest.mark.parametrize(("changes", "field"), [
    ({"partitions": 0}, "partitions"),
    ({"partitions": MAX_PARTITIONS + 1}, "partitions"),
    ({"partitions": -3}, "partitions"),
    ({"version": 0}, "version"),
    ({"version": -1}, "version"),
    ({"first_bucket_ms": -1}, "first_bucket_ms"),
    ({"placement": "random"}, "placement"),
    ({"hash": "md5"}, "hash"),
    ({"topic": ""}, "topic"),
    ({"topic": "x" * 100_000}, "topic"),
    ({"topic": "bad topic!"}, "topic"),
    ({"topic": "a{bucket}{bucket}"}, "topic"),
])
def test_a_hostile_field_is_refused_as_an_invalid_map_naming_the_field(changes: dict, field: str) -> None:
    with pytest.raises(RoutingMapError, match=field) as info:
        decode_map(raw_record(**changes), map_headers())
    assert info.value.reason == "invalid map"


def test_a_bool_is_not_an_int_in_a_map() -> None:
    # Avro has no bool-as-int on the wire; a map built in Python from a decoded record might.
    with pytest.raises(RoutingMapError, match="version"):
        RoutingMap.from_record({**V1.to_record(), "version": True})
    with pytest.raises(RoutingMapError, match="partitions"):
        RoutingMap.from_record({**V1.to_record(), "partitions": True})


def test_a_proper_successor_passes() -> None:
    check_successor([V1], v(2, partitions=8), published_ms=MINUTE, topic_partitions=8, bucket_width_ms=MINUTE)
    check_successor([], V1, published_ms=5 * MINUTE, topic_partitions=6, bucket_width_ms=MINUTE)  # the first map


def test_each_refusal_names_its_reason() -> None:
    installed = [V1, v(2, partitions=8)]
    assert refusal(installed, v(2, partitions=9, first_bucket_ms=20 * MINUTE)) == "version conflict"
    assert refusal(installed, v(1, first_bucket_ms=0)) == "version conflict"  # identical is still not a successor
    assert refusal([V1, v(3, partitions=8)], v(2, partitions=8, first_bucket_ms=20 * MINUTE)) == "version not newer"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=10 * MINUTE)) == "first bucket not later"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=5 * MINUTE)) == "first bucket not later"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE + 1)) == "first bucket not aligned"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE),
                   published_ms=20 * MINUTE) == "first bucket not in future"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE),
                   published_ms=25 * MINUTE) == "first bucket not in future"
    assert refusal(installed, v(3, partitions=7, first_bucket_ms=20 * MINUTE)) == "shrink"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE), topic_partitions=9) == "shrink"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE, topic="other")) == "topic changed"
    assert refusal(installed, v(3, partitions=8, first_bucket_ms=20 * MINUTE, topic="events.{bucket}")) == \
        "topic changed"


def test_without_a_publication_time_the_future_rule_is_not_checked() -> None:
    check_successor([V1], v(2), published_ms=None, topic_partitions=None, bucket_width_ms=MINUTE)


def test_a_bad_bucket_width_is_an_argument_error() -> None:
    with pytest.raises(InvalidArgumentError, match="bucket_width_ms"):
        check_successor([V1], v(2), published_ms=None, topic_partitions=None, bucket_width_ms=0)


def test_an_identical_record_is_installed_history_and_a_changed_one_is_not() -> None:
    installed = [V1, v(2)]
    assert is_installed(installed, v(2))
    assert not is_installed(installed, v(2, partitions=7))
    assert not is_installed(installed, v(3, first_bucket_ms=20 * MINUTE))


def test_the_map_in_force_and_the_next_one_follow_the_clock() -> None:
    history = [v(2, first_bucket_ms=10 * MINUTE), V1, v(3, partitions=8, first_bucket_ms=20 * MINUTE)]
    assert in_force_and_next(history, 5 * MINUTE) == (V1, history[0])
    assert in_force_and_next(history, 10 * MINUTE) == (history[0], history[2])
    assert in_force_and_next(history, 30 * MINUTE) == (history[2], None)
    assert in_force_and_next([v(2)], 0) == (None, v(2))
    assert in_force_and_next([], 0) == (None, None)


def test_the_follower_installs_valid_successors_and_counts_hostile_records_by_reason() -> None:
    router = Router(TimeBuckets("1m"), [V1])
    follower = RoutingMapFollower(router, {"bootstrap.servers": "127.0.0.1:9"}, "maps",
                                  events_topic_partitions=lambda topic: 8 if topic == "events" else None)
    h = map_headers()
    v2 = v(2, partitions=8, first_bucket_ms=20 * MINUTE)

    def send(m: RoutingMap | bytes | None, published_ms: int = 10 * MINUTE, key: bytes | None = None,
             headers: list | None = h) -> None:
        value = m if not isinstance(m, RoutingMap) else encode_map(m)
        record_key = key if key is not None or not isinstance(m, RoutingMap) else map_record_key(m)
        follower._handle(record_key, value, headers, published_ms)

    send(V1)  # a replay of the configured map: accepted, nothing new
    send(v(2, partitions=7, first_bucket_ms=20 * MINUTE))  # fewer than the topic's 8
    send(v2)
    send(b"\x00\xff garbage", key=b"v0000000003")
    send(encode_map(v(3, partitions=8, first_bucket_ms=30 * MINUTE)), key=b"v0000000003",
         headers=[("streams-schema", b"x/9")])
    send(v(3, partitions=8, first_bucket_ms=30 * MINUTE), key=b"v0000000004")
    send(v(3, partitions=8, first_bucket_ms=30 * MINUTE), published_ms=31 * MINUTE)
    send(v(1, partitions=8, first_bucket_ms=40 * MINUTE))
    send(None, key=b"v0000000005")
    assert router.maps == (V1, v2)
    assert (follower.applied, follower.rejected) == (2, 7)
    assert follower.rejections == {"shrink": 1, "undecodable": 1, "wrong schema": 1, "key mismatch": 1,
                                   "first bucket not in future": 1, "version conflict": 1, "tombstone": 1}
    # the first well-formed record of each version under its own key, valid or not
    assert follower.topic_maps == {1: V1, 2: v(2, partitions=7, first_bucket_ms=20 * MINUTE),
                                   3: v(3, partitions=8, first_bucket_ms=30 * MINUTE)}

    metrics = ProducerMetrics()
    stats = SimpleNamespace(sent=0, delivered=0, failed=0)
    metrics.update(SimpleNamespace(stats=lambda: stats, router=router, follower=None, map_follower=follower))
    samples = {(m.name, tuple(s.labels.values())): s.value for m in metrics.registry.collect() for s in m.samples}
    assert samples[("streams_producer_routing_map_version", ())] == 2.0
    assert samples[("streams_producer_applied_maps", ())] == 2.0
    assert {labels[0]: value for (name, labels), value in samples.items()
            if name == "streams_producer_rejected_maps"} == {r: 1.0 for r in follower.rejections}
