"""``streams tail``'s decoding and rendering: by header, by the topic's role, else raw bytes shown safely."""

from __future__ import annotations

import base64

import orjson

from streams.cli.tail import bytes_text, decode_record, json_line, text_line, topic_role
from streams.core.config import TopicNames
from streams.core.routing.directory import HotKeyNotice, encode_notice, notice_headers
from streams.core.routing.maps import encode_map, map_headers
from streams.core.routing.router import RoutingMap
from streams.core.serde import CONTENT_TYPE, AvroCodec, JsonCodec, schema_header

AGGREGATE = {"bucket": "20261202T1100Z", "bucket_start_ms": 1_764_673_200_000, "key": "tenant-1", "slot": -1,
             "count": 3, "measured": 3, "sum": 6.0, "sum_partials": [6.0], "min": 1.0, "max": 3.0, "final": True}
DEAD = {"reason": "bad \x1b[31mjson", "field": None, "source_topic": "streams.events", "source_partition": 1,
        "source_offset": 7, "failed_at_ms": 5, "original_key": b"k", "original": bytes(range(40)),
        "original_size": 40, "original_key_size": 1, "truncated": False, "original_sha256": None}


class Msg:
    """A consumed record, as confluent-kafka's Message shows it."""

    def __init__(self, value: bytes | None, key: bytes | None = b"k", headers: list | None = None) -> None:
        self._value, self._key, self._headers = value, key, headers

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list | None:
        return self._headers

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 9

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_764_673_200_000)


def test_a_record_naming_its_schema_decodes_by_it_whatever_the_topic() -> None:
    decoded = decode_record(None, AvroCodec("aggregate").encode(AGGREGATE), [schema_header("aggregate")])
    assert decoded.schema == "aggregate/1" and decoded.value == AGGREGATE and decoded.error is None


def test_a_record_without_a_header_decodes_by_the_topics_role_earlier_versions_too() -> None:
    role = topic_role("streams.late-events", TopicNames())
    old = {"event_id": "e", "bucket": "b", "bucket_start_ms": 0, "event_ts_ms": 1, "watermark_ms": 2,
           "lateness_ms": 3, "reason": "late", "source_topic": "s", "source_partition": 0, "source_offset": 4,
           "original": b"{}", "content_type": "application/json"}
    decoded = decode_record(role, AvroCodec("late_event_v1").encode(old), None)
    assert role == "late_events" and decoded.schema == "late_event (by topic)"
    assert decoded.value is not None and decoded.value["event_id"] == "e" and decoded.value["original"] == b"{}"


def test_hot_key_notices_and_routing_maps_decode_through_their_own_readers() -> None:
    notice = HotKeyNotice(key=b"tenant-9", key_display="tenant-9", placement=(3, 5), home=1, estimated_rate=10.0,
                          share=0.1, partitions=12, detected_at_ms=2_000, hot_since_ms=1_000, map_version=1,
                          detector="w1")
    decoded = decode_record("hot_keys", encode_notice(notice), notice_headers())
    assert decoded.schema == "hot_key_notice/2" and decoded.value == notice.to_record()
    routing = RoutingMap(version=2, partitions=16, first_bucket_ms=60_000, topic="streams.events")
    decoded = decode_record(None, encode_map(routing), map_headers())
    assert decoded.value == routing.to_record()
    assert decode_record("hot_keys", None, None).schema == "tombstone"


def test_events_decode_by_their_content_type() -> None:
    event = {"id": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "id_kind": "uuid7", "key": "k", "ts_ms": 1, "value": 2.5,
             "attributes": {}}
    for fmt, codec in (("json", JsonCodec("event")), ("avro", AvroCodec("event"))):
        decoded = decode_record(None, codec.encode(event), [("content-type", CONTENT_TYPE[fmt])])
        assert decoded.schema == f"event ({fmt})" and decoded.value is not None
        assert decoded.value["key"] == "k" and decoded.error is None


def test_an_unknown_topic_or_undecodable_record_is_raw_bytes_with_the_reason() -> None:
    assert decode_record(None, b"\x00\xff", None) == ("raw", None, None)
    assert decode_record(None, b'{"a": 1}', None) == ("json", {"a": 1}, None), "JSON of a topic of no role"
    broken = decode_record("aggregates", b"\x00\xff", None)
    assert broken.schema == "raw" and broken.error and "aggregate" in broken.error
    unknown = decode_record(None, b"x", [("streams-schema", b"martian/7")])
    assert unknown.schema == "raw" and "martian" in (unknown.error or "")


def test_bytes_fields_are_base64_with_their_size_in_json_and_a_short_hex_preview_in_text() -> None:
    msg = Msg(AvroCodec("dead_letter").encode(DEAD), headers=[schema_header("dead_letter")])
    decoded = decode_record(None, msg.value(), msg.headers())
    record = orjson.loads(json_line(msg, decoded))
    assert record["value"]["original"] == {"size": 40, "base64": base64.b64encode(bytes(range(40))).decode()}
    assert (record["schema"], record["offset"], record["time"]) == ("dead_letter/2", 9, "2025-12-02T11:00:00.000Z")
    line = text_line(msg, decoded)
    assert bytes_text(bytes(range(40))) in line and "<40 bytes: 000102" in line
    assert "\x1b" not in line and "bad \\x1b[31mjson" in line, "control characters are escaped"


def test_a_raw_record_prints_safely_in_text_and_as_base64_in_json() -> None:
    msg = Msg(b"\x1b]0;pwned\x07", key=b"\xff\x00")
    decoded = decode_record(None, msg.value(), msg.headers())
    line = text_line(msg, decoded)
    assert "\x1b" not in line and "\x07" not in line and "key=<2 bytes: ff00>" in line
    assert '"\\x1b]0;pwned\\x07" (10 bytes)' in line
    assert text_line(Msg(b"\xff" * 30), decode_record(None, b"\xff" * 30, None)).endswith("ffff...>")
    assert orjson.loads(json_line(msg, decoded))["raw"]["size"] == 10
