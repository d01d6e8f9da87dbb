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
