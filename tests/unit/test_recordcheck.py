"""The quick record check is never more lenient than fastavro's strict validation, and accepts well-formed events."""

from __future__ import annotations

from typing import Any

import fastavro.validation
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.recordcheck import compile_check
from streams.core.serde import load_schema

EVENT = load_schema("event")
ACCEPT = compile_check(EVENT)

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                     st.floats(allow_nan=False), st.text(max_size=8), st.sampled_from(["uuid7", "snowflake", "uuid4"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=6)


@st.composite
def event_like(draw: Any) -> dict[str, Any]:
    """Records shaped like events, each field sometimes of the right type, sometimes not."""
    good = {"id": st.text(max_size=40), "id_kind": st.sampled_from(["uuid7", "snowflake"]),
            "ts_ms": st.integers(min_value=-(1 << 64), max_value=1 << 64), "key": st.text(max_size=10),
            "value": st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-(1 << 64), 1 << 64)),
            "attributes": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3)}
    record = {name: draw(st.one_of(strategy, _values)) for name, strategy in good.items()}
    if draw(st.booleans()):
        record["-type"] = draw(st.sampled_from(["streams.Event", "other"]))
    return record


def test_the_event_schema_gets_a_quick_check_and_nested_schemas_do_not() -> None:
    assert ACCEPT is not None
    assert compile_check(load_schema("aggregate")) is None or compile_check(load_schema("hot_key_notice")) is None


def test_a_well_formed_event_is_accepted_quickly() -> None:
    assert ACCEPT is not None
    assert ACCEPT({"id": "0190d7c4-8a3e-7b12-9c3d-0123456789ab", "id_kind": "uuid7", "ts_ms": 1_733_400_000_000,
                   "key": "tenant-1", "value": 2, "attributes": {"region": "eu"}})


@settings(max_examples=3000, deadline=None)
@given(event_like())
def test_the_quick_check_accepts_only_what_fastavro_accepts(record: dict[str, Any]) -> None:
    assert ACCEPT is not None
    if ACCEPT(record):
        assert fastavro.validation.validate(record, EVENT, raise_errors=False, strict=True), record


@given(st.sampled_from([("value", True), ("ts_ms", 1.5), ("ts_ms", True), ("ts_ms", 1 << 63), ("id_kind", "uuid4"),
                        ("key", b"k"), ("attributes", {"a": 1}), ("id", None)]))
def test_each_wrong_field_type_is_refused_by_both(change: tuple[str, Any]) -> None:
    assert ACCEPT is not None
    record = {"id": "1", "id_kind": "snowflake", "ts_ms": 0, "key": "k", "value": None, "attributes": {}}
    record[change[0]] = change[1]
    assert not ACCEPT(record)
    assert not fastavro.validation.validate(record, EVENT, raise_errors=False, strict=True)
