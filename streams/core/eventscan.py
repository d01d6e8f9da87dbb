"""Stage 1's per-record scan of a JSON event: decode, validate, classify the ID, hash the identity.

:func:`reference_scan` is the rule in Python: what the worker makes of one JSON
payload it accepts, as ``(ts_ms, key, value, identity, plain_id)``, or None for a
payload it would dead-letter (the worker's own path then names the reason and field).
:func:`native_scanner` returns the compiled twin (``streams-native``): the same tuple
for the envelopes producers write and None for anything else, which the worker hands
to its Python path, so the compiled scan never decides a dead letter. It is checked
against :func:`reference_scan` on probes before it is trusted.

The identity (:func:`identity_hash`) is persisted with stage 1's state, so both must
give the same 64 bits for every event: a restarted worker that swapped one for the
other would otherwise count a re-read event twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xxhash import xxh3_64_intdigest

from streams.core.errors import InvalidIdError, SerializationError
from streams.core.ids import IdKind, classify_id
from streams.core.ids.parse import MAX_DATETIME_MS
from streams.core.ids.snowflake import DEFAULT_SNOWFLAKE_LAYOUT, SnowflakeLayout
from streams.core.native import NATIVE
from streams.core.routing.hashing import MAX_KEY_BYTES
from streams.core.serde import JsonCodec

__all__ = ["EventScan", "Scanner", "identity_hash", "native_scanner", "plain_id", "reference_scan"]

#: ``(ts_ms, key, value, identity, plain_id)`` of an accepted event.
EventScan = tuple[int, str, "float | int | None", int, int]
Scanner = Callable[[bytes], "EventScan | None"]

_LOW64 = (1 << 64) - 1
_UUID7 = IdKind.UUID7


def identity_hash(kind: IdKind, number: int, key: str, ts: int, value: float | None) -> int:
    """A 64-bit hash of an event's identity: its ID's canonical value, key, event time and value.

    A resend of one event has the same identity and is folded once; two distinct
    events that share an ID (a Snowflake collision) differ in key, time or value and
    are both folded. The seed tells the ID kinds apart.
    """
    text = f"{number}|{ts}|{value!r}|{key}".encode("utf-8", "surrogatepass")
    return xxh3_64_intdigest(text, 0 if kind is _UUID7 else 1)  # the seed


def plain_id(number: int) -> int:
    """64 bits of an event ID alone (a UUID's halves folded together): what a collision is counted on."""
    return (number & _LOW64) ^ (number >> 64)


_CODEC = JsonCodec("event")


def reference_scan(payload: bytes, layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> EventScan | None:
    """What stage 1 makes of one JSON event payload, or None if it would dead-letter it."""
    try:
        event = _CODEC.decode(payload)
        kind, number = classify_id(event["id"], layout=layout)
    except (SerializationError, InvalidIdError):
        return None
    key, value = event["key"], event["value"]
    if not key.strip() or len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return None
    if value is not None and not math.isfinite(value):
        return None
    ts = event["ts_ms"]
    return ts, key, value, identity_hash(kind, number, key, ts, value), plain_id(number)


_PROBES = (
    b'{"id":"0190a8f2-6b1c-7d3e-8f40-123456789abc","id_kind":"uuid7","ts_ms":1720000000000,'
    b'"key":"tenant-7","value":1.5,"attributes":{}}',
    b'{"id": "0190a8f2-6b1c-7d3e-bf40-123456789abc", "id_kind": "uuid7", "ts_ms": 1720000000001, '
    b'"key": "caf\\u00e9 \\"q\\"", "value": 1e-7, "attributes": {"a": "b"}, "extra": [1, {"x": null}]}',
    b'{"id":"1541815603606036480","id_kind":"snowflake","ts_ms":-5,"key":"\xc3\xa9t\xc3\xa9","value":null}',
    b'{"id":"000000000000000000042","id_kind":"snowflake","ts_ms":0,"key":"k","value":12345678901234567890.0}',
    b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":" k ","value":-3}',
    # halfway between two shortest spellings: Python's repr picks ...312.2, a plain shortest-digits writer ...312.3
    b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":562949953421312.2}',
    b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"   ","value":1.0}',
    b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":1.0,"id":"43"}',
    b'{"id":"0190A8F2-6B1C-7D3E-8F40-123456789ABC","id_kind":"uuid7","ts_ms":7,"key":"k","value":0.1}',
    b'{"id":"42","id_kind":"other","ts_ms":7,"key":"k","value":1.0}',
    b'[1, 2]',
    b'{"id":"42","id_kind":"snowflake","ts_ms":7.0,"key":"k","value":1.0}',
)


def native_scanner(layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> Scanner | None:
    """The compiled scan for ``layout``, or None when ``streams-native`` is absent or disagrees on a probe.

    It returns :func:`reference_scan`'s tuple for every event it accepts; None for
    any other payload (the caller's Python path decides those).
    """
    if NATIVE is None:
        return None
    scan: Scanner = NATIVE.EventScanner(layout.total_bits, layout.timestamp_shift, layout.epoch_ms,
                                        layout.time_unit_ms, MAX_DATETIME_MS).scan
    for probe in _PROBES:
        got = scan(probe)
        if got is not None and got != reference_scan(probe, layout):
            return None
    return scan
