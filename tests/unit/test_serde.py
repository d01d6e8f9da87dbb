"""Codecs round-trip every schema and turn corrupt input into SerializationError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import SerializationError
from streams.core.serde import (
    AvroCodec,
    JsonCodec,
    codec_for,
    load_schema,
    schema_files,
)

EVENT = {"id": "0190a0b1-7c2d-7abc-8def-0123456789ab", "id_kind": "uuid7", "ts_ms": 1_700_000_000_000,
         "key": "tenant-1", "value": 2.5, "attributes": {"region": "eu"}}

events = st.fixed_dictionaries({
    "id": st.text(min_size=1, max_size=40), "id_kind": st.sampled_from(["uuid7", "snowflake"]),
    "ts_ms": st.integers(0, 2**62), "key": st.text(min_size=1, max_size=50),
    "value": st.none() | st.floats(allow_nan=False, allow_infinity=False), "attributes": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
})


def test_every_schema_file_parses() -> None:
    names = sorted(p.name[:-5] for p in schema_files().iterdir() if p.name.endswith(".avsc"))
    assert {"event", "aggregate", "bucket_closed", "late_event", "dead_letter"} <= set(names)
    for name in names:
        assert load_schema(name)["type"] == "record"


@given(events)
def test_avro_and_json_round_trip_any_valid_event(record: dict[str, Any]) -> None:
    for codec in (AvroCodec("event"), JsonCodec("event")):
        assert codec.decode(codec.encode(record)) == record


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\xff" * 30, AvroCodec("event").encode(EVENT) + b"junk"])
def test_corrupt_avro_raises_serialization_error(payload: bytes) -> None:
    with pytest.raises(SerializationError, match="event: "):
        AvroCodec("event").decode(payload)


@pytest.mark.parametrize(("payload", "message"), [
    (b"{", "invalid JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"id": 5, "id_kind": "uuid7", "ts_ms": 1, "key": "k"}', "field 'id'"),
    (b'{"id": "x", "id_kind": "uuid7", "ts_ms": "yesterday", "key": "k"}', "field 'ts_ms'"),
])
def test_json_that_breaks_the_schema_names_the_field(payload: bytes, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        JsonCodec("event").decode(payload)


def test_json_decode_fills_schema_defaults() -> None:
    record = JsonCodec("event").decode(b'{"id": "x", "id_kind": "snowflake", "ts_ms": 1, "key": "k"}')
    assert record["value"] is None and record["attributes"] == {}


def test_encoding_a_record_missing_a_field_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="event"):
        AvroCodec("event").encode({"id": "x"})


def test_unknown_serializer_and_schema_are_rejected_by_name() -> None:
    with pytest.raises(SerializationError, match="'avro' or 'json', got 'xml'"):
        codec_for("xml", "event")
    with pytest.raises(SerializationError, match="schema 'nope' not found"):
        load_schema("nope")


# --- every bad-input kind names its field -----------------------------------------------------------

def _zigzag(n: int) -> bytes:
    """Avro's int/long encoding, written out here so the test does not trust the codec it tests."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_str(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return _zigzag(len(raw)) + raw


AVRO_ID = _avro_str(EVENT["id"])
AVRO_HEAD = AVRO_ID + _zigzag(0) + _zigzag(1_700_000_000_000)  # id, id_kind uuid7, ts_ms
AVRO_GOOD = AVRO_HEAD + _avro_str("k") + _zigzag(1) + b"\x00" * 8 + _zigzag(1) + _avro_str("a") + _avro_str("b") + b"\x00"
JSON_GOOD = JsonCodec("event").encode(EVENT)


def _json(**changes: Any) -> bytes:
    """EVENT as JSON with fields replaced (a value of ``...`` drops the field)."""
    record = {**EVENT, **changes}
    return JsonCodec("event").encode({k: v for k, v in record.items() if v is not ...})


BAD_INPUTS: list[tuple[str, str, Any, str]] = [
    # (kind, format, payload, the field named)
    ("empty JSON payload", "json", b"", "payload"),
    ("whitespace only", "json", b"  \n\t ", "payload"),
    ("truncated JSON", "json", JSON_GOOD[:-7], "payload"),
    ("trailing garbage after the object", "json", JSON_GOOD + b" extra", "payload"),
    ("two objects", "json", JSON_GOOD + JSON_GOOD, "payload"),
    ("non-UTF-8 byte in a string", "json", JSON_GOOD.replace(b"tenant-1", b"tenant-\xff"), "payload"),
    ("UTF-8 byte order mark", "json", b"\xef\xbb\xbf" + JSON_GOOD, "payload"),
    ("NaN literal", "json", JSON_GOOD.replace(b"2.5", b"NaN"), "payload"),
    ("Infinity literal", "json", JSON_GOOD.replace(b"2.5", b"Infinity"), "payload"),
    ("number beyond a double", "json", JSON_GOOD.replace(b"2.5", b"1e400"), "payload"),
    ("lone surrogate escape", "json", JSON_GOOD.replace(b"tenant-1", b"\\ud800"), "payload"),
    ("nesting beyond the parser's depth", "json", b'{"attributes": ' + b"[" * 2000 + b"]" * 2000 + b"}", "payload"),
    ("top-level array", "json", b"[1, 2]", "payload"),
    ("top-level string", "json", b'"tenant-1"', "payload"),
    ("top-level number", "json", b"17.5", "payload"),
    ("top-level null", "json", b"null", "payload"),
    ("not bytes at all", "json", None, "payload"),
    ("Avro bytes read as JSON", "json", AvroCodec("event").encode(EVENT), "content-type"),
    ("missing id", "json", _json(id=...), "id"),
    ("missing id_kind", "json", _json(id_kind=...), "id_kind"),
    ("missing ts_ms", "json", _json(ts_ms=...), "ts_ms"),
    ("missing key", "json", _json(key=...), "key"),
    ("empty object", "json", b"{}", "id"),
    ("id a number", "json", _json(id=5), "id"),
    ("id null", "json", _json(id=None), "id"),
    ("id an object", "json", _json(id={"uuid": "x"}), "id"),
    ("id_kind not a symbol", "json", _json(id_kind="uuid8"), "id_kind"),
    ("id_kind a number", "json", _json(id_kind=7), "id_kind"),
    ("id_kind null", "json", _json(id_kind=None), "id_kind"),
    ("ts_ms a string", "json", _json(ts_ms="yesterday"), "ts_ms"),
    ("ts_ms a float", "json", _json(ts_ms=1.7e12), "ts_ms"),
    ("ts_ms a boolean", "json", _json(ts_ms=True), "ts_ms"),
    ("ts_ms null", "json", _json(ts_ms=None), "ts_ms"),
    ("ts_ms above a long", "json", _json(ts_ms=2**63), "ts_ms"),
    ("ts_ms below a long", "json", JSON_GOOD.replace(b"1700000000000", b"-9223372036854775809"), "ts_ms"),
    ("key a number", "json", _json(key=42), "key"),
    ("key null", "json", _json(key=None), "key"),
    ("key a list", "json", _json(key=["a", "b"]), "key"),
    ("key an object", "json", _json(key={"k": 1}), "key"),
    ("value a string", "json", _json(value="2.5"), "value"),
    ("value a boolean", "json", _json(value=False), "value"),
    ("value a list", "json", _json(value=[1.0]), "value"),
    ("attributes a list", "json", _json(attributes=["region"]), "attributes"),
    ("attributes with a number", "json", _json(attributes={"n": 1}), "attributes"),
    ("attributes with a null", "json", _json(attributes={"n": None}), "attributes"),
    ("attributes null", "json", _json(attributes=None), "attributes"),
    ("empty Avro payload", "avro", b"", "payload"),
    ("trailing bytes after the record", "avro", AVRO_GOOD + b"\x00junk", "payload"),
    ("not bytes at all", "avro", "a string", "payload"),
    ("JSON read as Avro", "avro", JSON_GOOD, "content-type"),
    ("JSON with trailing spaces read as Avro", "avro", JSON_GOOD + b"   ", "content-type"),
    ("truncated inside id", "avro", AVRO_ID[:10], "id"),
    ("truncated before id_kind", "avro", AVRO_ID, "id_kind"),
    ("truncated before ts_ms", "avro", AVRO_ID + _zigzag(0), "ts_ms"),
    ("truncated inside ts_ms", "avro", AVRO_HEAD[:-2], "ts_ms"),
    ("truncated before key", "avro", AVRO_HEAD, "key"),
    ("truncated inside key", "avro", AVRO_HEAD + _zigzag(8) + b"ten", "key"),
    ("truncated before value", "avro", AVRO_HEAD + _avro_str("k"), "value"),
    ("truncated inside value", "avro", AVRO_HEAD + _avro_str("k") + _zigzag(1) + b"\x00\x00", "value"),
    ("truncated before attributes", "avro", AVRO_HEAD + _avro_str("k") + _zigzag(0), "attributes"),
    ("attributes block never ends", "avro", AVRO_GOOD[:-1], "attributes"),
    ("non-UTF-8 id", "avro", _avro_str(b"\xff\xfe") + AVRO_HEAD[len(AVRO_ID):] + _avro_str("k") + b"\x00\x00", "id"),
    ("non-UTF-8 key", "avro", AVRO_HEAD + _avro_str(b"tenant-\xc3") + b"\x00\x00", "key"),
    ("UTF-8-encoded surrogate in key", "avro", AVRO_HEAD + _avro_str(b"\xed\xa0\x80") + b"\x00\x00", "key"),
    ("non-UTF-8 attribute value", "avro", AVRO_HEAD + _avro_str("k") + b"\x00" + _zigzag(1) + _avro_str("a")
     + _avro_str(b"\x80") + b"\x00", "attributes"),
    ("id_kind index out of range", "avro", AVRO_ID + _zigzag(2) + _zigzag(1) + _avro_str("k") + b"\x00\x00", "id_kind"),
    ("value union index out of range", "avro", AVRO_HEAD + _avro_str("k") + _zigzag(2) + b"\x00", "value"),
    ("negative string length", "avro", AVRO_HEAD + _zigzag(-5) + b"abcde\x00\x00", "key"),
    ("string length beyond the payload", "avro", AVRO_HEAD + _zigzag(1 << 40) + b"abc", "key"),
    ("attribute count beyond the payload", "avro", AVRO_HEAD + _avro_str("k") + b"\x00" + _zigzag(1 << 40)
     + _avro_str("a") + _avro_str("b"), "attributes"),
]


def test_the_bad_input_table_covers_enough_kinds() -> None:
    assert len(BAD_INPUTS) >= 40
    assert len({(kind, fmt) for kind, fmt, _, _ in BAD_INPUTS}) == len(BAD_INPUTS), "kinds are unique"


@pytest.mark.parametrize(("kind", "fmt", "payload", "field"), BAD_INPUTS, ids=[f"{f}: {k}" for k, f, _, _ in BAD_INPUTS])
def test_every_bad_input_kind_is_a_serialization_error_naming_its_field(kind: str, fmt: str, payload: Any,
                                                                         field: str) -> None:
    with pytest.raises(SerializationError) as caught:
        codec_for(fmt, "event").decode(payload)
    assert caught.value.field == field, f"{kind}: {caught.value}"
    named = field if field in ("payload", "content-type") else f"field {field!r}"
    assert named in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("event: ")


def test_the_hand_written_avro_of_the_table_is_a_valid_event() -> None:
    assert AvroCodec("event").decode(AVRO_GOOD) == {**EVENT, "key": "k", "value": 0.0, "attributes": {"a": "b"}}


FIELDS = {"id", "id_kind", "ts_ms", "key", "value", "attributes", "payload", "content-type"}


@given(st.binary(max_size=120))
def test_random_bytes_either_decode_or_name_a_field(data: bytes) -> None:
    for codec in (AvroCodec("event"), JsonCodec("event")):
        try:
            codec.decode(data)
        except SerializationError as exc:
            assert exc.field in FIELDS, exc


@given(st.integers(0, len(AVRO_GOOD) * 8 - 1), st.integers(0, len(AVRO_GOOD)))
def test_bit_flipped_and_truncated_avro_either_decodes_or_names_a_field(bit: int, cut: int) -> None:
    flipped = bytearray(AVRO_GOOD)
    flipped[bit // 8] ^= 1 << (bit % 8)
    for data in (bytes(flipped), AVRO_GOOD[:cut]):
        try:
            AvroCodec("event").decode(data)
        except SerializationError as exc:
            assert exc.field in FIELDS, exc


def test_encoding_names_the_missing_or_mistyped_field() -> None:
    with pytest.raises(SerializationError) as caught:
        AvroCodec("event").encode({k: v for k, v in EVENT.items() if k != "key"})
    assert caught.value.field == "key"
    with pytest.raises(SerializationError) as caught:
        AvroCodec("event").encode({**EVENT, "ts_ms": "soon"})
    assert caught.value.field == "ts_ms"


def test_errors_outside_a_record_carry_no_field() -> None:
    with pytest.raises(SerializationError) as caught:
        load_schema("nope")
    assert caught.value.field is None
