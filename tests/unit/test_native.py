"""The compiled ``streams-native`` against its Python twins, on exact oracles.

Each compiled function may decline (answer None) wherever Python must decide, but
whatever it does answer must be exactly the Python twin's answer: the event scan
(identity hash, the float spelling inside it and the value's type included),
canonical key bytes and the two placers. The scan must also take the plain producer
envelope (the worker's hot path), and the worker must give identical outputs, counts
and state with and without it.

These tests fail, never skip, when the extension is missing: ``make setup`` builds it.
"""

from __future__ import annotations

import json
import math
import struct
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from streams.core.config import WorkerSettings
from streams.core.errors import InvalidKeyError
from streams.core.eventscan import EventScan, native_scanner, reference_scan
from streams.core.ids import TWITTER_EPOCH_MS, Snowflake, UUIDv7Generator, uuid7
from streams.core.ids.parse import MAX_DATETIME_MS
from streams.core.native import NATIVE, load_native
from streams.core.routing import hashing, placement
from streams.worker.processor import EventProcessor, InMessage, Output, Stage1Store, TickResult

pytestmark = pytest.mark.native

_MISSING = ("streams_native (the compiled extension in native/) is not importable: run `make setup` to build "
            "and install it; these tests check it and fail without it")
SCAN = native_scanner()
INT64 = st.integers(-(2**63), 2**63 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)


@pytest.fixture(autouse=True, scope="module")
def _native_required() -> None:
    """Every test here fails (never skips) when the extension is missing."""
    if NATIVE is None:
        pytest.fail(_MISSING, pytrace=False)


def test_streams_native_is_installed_and_every_twin_trusts_it() -> None:
    """The extension loads, and each user of it kept it after its import-time probes."""
    assert NATIVE is not None, _MISSING
    assert SCAN is not None, "the compiled event scan disagreed with reference_scan on a probe"
    assert hashing.fast_canonical_key is not None, "the compiled canonical_key disagreed on a probe"
    assert isinstance(hashing.murmur2_partitioner(12), NATIVE.Murmur2Placer)
    assert placement._jump_xxh3 is not placement._jump_xxh3_python
    assert placement._jump_murmur2 is not placement._jump_murmur2_python
    assert isinstance(placement._jump_xxh3(12), NATIVE.JumpPlacer)


def test_load_native_honours_streams_native_0() -> None:
    """``STREAMS_NATIVE=0`` turns the extension off (saying so); without it the module loads."""
    module, status = load_native({"STREAMS_NATIVE": "0"})
    assert module is None and "STREAMS_NATIVE" in status
    module, status = load_native({})
    assert module is NATIVE and module is not None and status == "streams-native"


# --- a float's spelling in the identity hash -------------------------------------------------------

EDGE_FLOATS = (0.0, -0.0, 1e16, 1e15, 1e-4, 1e-5, 5e-324, 1.7976931348623157e308, 0.1, 123456789012345678.0,
               9999999999999998.0, 1e16 - 2, 1e22, 1e23, 2.2250738585072014e-308, 2.225073858507201e-308,
               0.0001, 0.00009999999999999999, 1 / 3, 2**53 + 0.0, 2**63 + 0.0)
# Doubles exactly halfway between two shortest decimal spellings: Python's repr picks the even last digit
# (562949953421312.2), a plain shortest-digits writer the other (562949953421312.3).
TIE_FLOATS = (562949953421312.25, 68719476736.015625, 1099511627776.03125, 549755813888.15625)


def _assert_spelled_as_repr(x: float) -> None:
    """The compiled scan spells ``x`` as ``repr(x)``: its identity hash covers the value's spelling."""
    payload = orjson.dumps({"id": "0190a8f2-6b1c-7d3e-8f40-123456789abc", "id_kind": "uuid7", "ts_ms": 1,
                            "key": "k", "value": x, "attributes": {}})
    got, want = SCAN(payload), reference_scan(payload)
    assert got is not None and _same(got, want), (x, got, want)


@settings(max_examples=1500)
@given(FINITE)
def test_float_spelling_is_pythons_repr(x: float) -> None:
    """Every finite double is spelled exactly as Python's ``repr`` spells it."""
    _assert_spelled_as_repr(x)


@settings(max_examples=1500)
@given(st.integers(0, 2**64 - 1))
def test_float_spelling_over_raw_bit_patterns(bits: int) -> None:
    """Every exponent and subnormal alike: doubles from raw bits are spelled as ``repr`` spells them."""
    x = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    assume(math.isfinite(x))
    _assert_spelled_as_repr(x)


def test_float_spelling_breaks_ties_as_python_does() -> None:
    """A double halfway between two shortest spellings gets Python's choice (the even last digit)."""
    for x in TIE_FLOATS:
        _assert_spelled_as_repr(x)
        _assert_spelled_as_repr(-x)


def test_float_spelling_of_edge_values() -> None:
    """The layout switches (1e16, 1e-4), subnormals, the extremes and both zeros, with both signs."""
    for x in EDGE_FLOATS:
        _assert_spelled_as_repr(x)
        _assert_spelled_as_repr(-x)


# --- the event scan -----------------------------------------------------------------------------


def _same(got: EventScan | None, want: EventScan | None) -> bool:
    """Equal and of the same types (1 is not 1.0, -0.0 is not 0.0): repr tells them apart."""
    return got == want and repr(got) == repr(want)


def _uuid7_at(ms: int) -> str:
    """A UUIDv7 minted by the project's generator with its clock at ``ms``."""
    return str(UUIDv7Generator(clock=lambda: ms).next())


def _snowflake_at(ms: int, worker: int) -> str:
    """A Snowflake minted by the project's generator (Twitter layout) with its clock at ``ms``."""
    return str(Snowflake(worker, clock=lambda: ms).next())


UUID7_TEXT = st.one_of(
    st.builds(lambda: str(uuid7())),
    st.integers(0, 2**48 - 1).map(_uuid7_at),  # past year 9999 too: both must refuse those
    st.sampled_from([MAX_DATETIME_MS, MAX_DATETIME_MS + 1]).map(_uuid7_at),
)
SNOWFLAKE_TEXT = st.one_of(
    st.builds(_snowflake_at, st.integers(TWITTER_EPOCH_MS, TWITTER_EPOCH_MS + 2**41 - 1), st.integers(0, 1023)),
    st.integers(0, 2**63 - 1).map(str),
    st.integers(2**63, 10**20).map(str),  # past the layout
    st.integers(0, 10**6).map(lambda n: f"{n:021d}"),  # 21 digits
)
ODD_IDS = st.one_of(
    UUID7_TEXT.map(str.upper),
    UUID7_TEXT.map(lambda u: u.replace("-", "")),
    UUID7_TEXT.map(lambda u: "{" + u + "}"),
    UUID7_TEXT.map(lambda u: "uRn:UuId:" + u),
    st.builds(lambda: str(uuid.uuid4())),
    st.sampled_from(["", "-1", "0", "42", "00000000-0000-0000-0000-000000000000",
                     "0190a8f2-6b1c-7d3e-4f40-123456789abc", "0190a8f2-6b1c-7d3e-cf40-123456789abc", "\u0663\u0664"]),
    st.text(max_size=40),
)
KEYS = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=40),
    st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003\u3000", max_size=6),
    st.just(""),
    st.text(min_size=300, max_size=1100),
    st.sampled_from(["x" * 1024, "x" * 1025, "\u00e9" * 512, "\u00e9" * 512 + "x", "k", " k ", "\u00a0",
                     "caf\u00e9", "\U0001f600", "a\x00b", "\\\"/"]),
)
VALUES = st.one_of(st.none(), FINITE, INT64)
JSON_LEAVES = st.one_of(st.none(), st.booleans(), INT64, FINITE, st.text(max_size=10))
NESTED_JSON = st.recursive(
    JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3)),
    max_leaves=8)
_FIELDS = ("id", "id_kind", "ts_ms", "key", "value", "attributes")


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """An event envelope as a producer might write it, the plain one and its odder cousins."""
    event_id = draw(st.one_of(UUID7_TEXT, SNOWFLAKE_TEXT, ODD_IDS))
    event: dict[str, Any] = {"id": event_id, "id_kind": draw(st.sampled_from(["uuid7", "snowflake"])),
                             "ts_ms": draw(st.one_of(INT64, st.integers(-10**4, 10**4))),
                             "key": draw(KEYS)}
    if draw(st.booleans()):
        event["value"] = draw(VALUES)
    if draw(st.booleans()):
        event["attributes"] = draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3))
    extra = draw(st.dictionaries(st.text(max_size=8).filter(lambda k: k not in _FIELDS and k != "-type"),
                                 NESTED_JSON, max_size=2))
    event.update(extra)
    order = draw(st.permutations(list(event)))
    return {name: event[name] for name in order}


def _encodings(event: dict[str, Any]) -> list[bytes]:
    """The encodings producers use: orjson's compact UTF-8, json's spaced ASCII (\\u escapes) and compact UTF-8."""
    return [orjson.dumps(event), json.dumps(event, ensure_ascii=True).encode(),
            json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()]


@settings(max_examples=400)
@given(envelopes())
def test_scan_of_any_envelope_is_the_reference_or_declined(event: dict[str, Any]) -> None:
    """Whatever envelope it is given, a tuple from the compiled scan is exactly reference_scan's."""
    for payload in _encodings(event):
        got = SCAN(payload)
        want = reference_scan(payload)
        if want is None:
            assert got is None, payload
        elif got is not None:
            assert _same(got, want), (payload, got, want)


PLAIN_KEYS = st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=1024).filter(str.strip)


@settings(max_examples=400)
@given(st.one_of(st.builds(lambda: str(uuid7())), st.integers(0, MAX_DATETIME_MS).map(_uuid7_at)),
       INT64, PLAIN_KEYS, st.one_of(st.none(), FINITE))
@example("0190a8f2-6b1c-7d3e-8f40-123456789abc", 0, "k" * 1024, 5e-324)
@example("0190a8f2-6b1c-7d3e-8f40-123456789abc", -(2**63), "\x1f\"k\\\x7f", -0.0)
@example("0190a8f2-6b1c-7d3e-8f40-123456789abc", 1720000000000, "tenant-7", 562949953421312.25)  # a repr tie
def test_scan_takes_the_plain_producer_envelope(event_id: str, ts: int, key: str, value: float | None) -> None:
    """The envelope producers write (canonical UUIDv7, ASCII key) never falls back to Python: the hot path holds."""
    event = {"id": event_id, "id_kind": "uuid7", "ts_ms": ts, "key": key, "value": value, "attributes": {}}
    for payload in _encodings(event):
        want = reference_scan(payload)
        assert want is not None, payload
        got = SCAN(payload)
        assert got is not None, payload
        assert _same(got, want), (payload, got, want)


# Raw JSON text per field, to splice in where a producer (or an attacker) might: (acceptable, odd).
_LONG_MAX = "17976931348623157" + "0" * 292 + ".0"
_RAW: dict[str, tuple[list[str], list[str]]] = {
    "id": (['"0190a8f2-6b1c-7d3e-8f40-123456789abc"', '"0190A8F2-6B1C-7D3E-8F40-123456789ABC"',
            '"1541815603606036480"', '"0"', '"\\u0034\\u0032"', '"0190a8f2-6b1c-7d3e-8f40-123456789ab\\u0063"',
            '"{0190a8f2-6b1c-7d3e-8f40-123456789abc}"', '"0190a8f26b1c7d3e8f40123456789abc"'],
           ['"000000000000000000042"', '"9223372036854775808"', "42", "null", '""', '"\\ud800"', '"-1"',
            '"0190a8f2-6b1c-7d3e-4f40-123456789abc"', '"ffffffff-ffff-7fff-bfff-ffffffffffff"']),
    "id_kind": (['"uuid7"', '"snowflake"', '"uuid\\u0037"'], ['"other"', '"UUID7"', "null", "7"]),
    "ts_ms": (["0", "-0", "1720000000000", "-5", "9223372036854775807", "-9223372036854775808"],
              ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "100000000000000000000000",
               "1.0", "1e3", "-1E3", "01", "true", "null", '"7"', "+1", "- 1", "1.", ".5"]),
    "key": (['"k"', '" k "', '"\\u0000x"', '"caf\\u00e9"', '"\\ud83d\\ude00k"', '"\\/\\b\\f\\n\\r\\tz"',
             '"tab\\there"', '"' + "x" * 1024 + '"', '"' + "\\u00e9" * 512 + '"', '"\\u00e9t\\u00e9"',
             '"\\u00a0k"', '"\\u2003k"'],
            ['"   "', '""', '"\\u00a0"', '"\\u001c"', '"\\ud800"', '"\\udc00x"', '"\\ud83dx"', '"a\\qb"',
             '"a\\u12"', '"tab\there"', '"' + "x" * 1025 + '"', '"' + "\\u00e9" * 512 + 'x"', "7", "null",
             '["k"]']),
    "value": (["null", "1.5", "-3", "-0", "-0.0", "0", "1e16", "1E+16", "1e-400", "-1e-400", "9223372036854775807",
               "9223372036854775808", "18446744073709551615", "100000000000000000000000",
               "0.1000000000000000055511151231257827021181583404541015625", "2.2250738585072011e-308",
               "4.9406564584124654e-324", "2.4703282292062328e-324", "2.4703282292062327e-324",
               "1.7976931348623158e308", _LONG_MAX, "123456789012345678901234567890e-10",
               "1.00000000000000011102230246251565404236316680908203125", "0.30000000000000004", "1e22", "1e23"],
              ["1e400", "-1e400", "1.7976931348623159e308", "NaN", "Infinity", "-Infinity", "nan", "true", '"1.5"',
               "[]", "01", "1.", "+1", ".5", "1e", "0x10", "1e+", "--1"]),
    "attributes": (["{}", '{"a":"b"}', '{"a":"b","a":"c"}', '{"\\u00e9":"\\n"}'],
                   ['{"a":1}', '{"a":null}', "[]", "null", '{"\\ud800":"x"}', '{"a":"b",}', '{"a" "b"}']),
    "extra": (['"x"', '[1,{"y":null}]', "{}", "[]", "true", "false", "null", "-1.5e-3", '"streams.Event"',
               "[" * 60 + "]" * 60, "[" * 70 + "]" * 70, '{"id":"nested","key":"nested"}', "123456789012345678901234"],
              ["1e400", "NaN", '"\\ud800"', '{"a":}', "[1,]", "tru", "[" * 1100 + "]" * 1100, '{"a":1,}']),
}
_INVALID_UTF8 = [b"\xff", b"\xc3", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80",
                 b"\xef\xbb\xbf"]
_TRAILING = [b"x", b"{}", b" ,", b"\x00", b"\n}", b" \t\r\n", b"\x0c", b"//", b"]"]


def _raw(draw: st.DrawFn, field: str) -> str:
    """Raw JSON for ``field``: acceptable seven times in eight, odd otherwise."""
    good, odd = _RAW[field]
    return draw(st.sampled_from(odd if draw(st.integers(0, 7)) == 0 else good))


@st.composite
def hostile_payloads(draw: st.DrawFn) -> bytes:
    """A JSON envelope with fields spliced, missing, doubled or unknown, then perhaps cut, padded or corrupted."""
    pairs = [(f'"{name}"', _raw(draw, name)) for name in _FIELDS
             if draw(st.integers(0, 15)) != 0]  # now and then a field is missing
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from([*_FIELDS, "-type", "extra", "i\\u0064", "k\\u0065y", "Key", "ts_ms "]))
        pairs.insert(draw(st.integers(0, len(pairs))), (f'"{name}"', _raw(draw, name if name in _RAW else "extra")))
    sep, colon = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t"), (",\r\n", ":")]))
    text = "{" + sep.join(f"{name}{colon}{value}" for name, value in pairs) + "}"
    payload = text.encode()
    harm = draw(st.sampled_from(["none"] * 10 + ["truncate", "trailing", "invalid utf-8", "leading", "flip"]))
    if harm == "truncate":
        payload = payload[:draw(st.integers(0, len(payload) - 1))]
    elif harm == "trailing":
        payload += draw(st.sampled_from(_TRAILING))
    elif harm == "invalid utf-8":
        at = draw(st.integers(0, len(payload)))
        payload = payload[:at] + draw(st.sampled_from(_INVALID_UTF8)) + payload[at:]
    elif harm == "leading":
        payload = draw(st.sampled_from([b"\xef\xbb\xbf", b" ", b"\n\t", b"\x0c", b"\x00"])) + payload
    elif harm == "flip":
        at = draw(st.integers(0, len(payload) - 1))
        payload = payload[:at] + bytes([payload[at] ^ (1 << draw(st.integers(0, 7)))]) + payload[at + 1:]
    return payload


def _check_hostile(payload: bytes) -> None:
    got = SCAN(payload)
    want = reference_scan(payload)
    if want is None:
        assert got is None, (payload, got)
    elif got is not None:
        assert _same(got, want), (payload, got, want)


@settings(max_examples=1200)
@given(hostile_payloads())
def test_scan_of_hostile_payloads_declines_or_agrees(payload: bytes) -> None:
    """Spliced, duplicated, cut or corrupted envelopes: the scan declines, or gives reference_scan's tuple;
    it never accepts what Python would dead-letter."""
    _check_hostile(payload)


@settings(max_examples=500)
@given(st.one_of(st.binary(), envelopes().map(orjson.dumps).flatmap(
    lambda p: st.integers(0, max(0, len(p) - 1)).map(lambda n: p[:n]))))
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":NaN}')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":1.0} x')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":1.0,"key":"j"}')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":1.0,"-type":"streams.Event"}')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"\\ud800","value":1.0}')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"\xff","value":1.0}')
@example(b'{"id":"42","id_kind":"snowflake","ts_ms":7,"key":"k","value":1.0')
def test_scan_of_random_and_truncated_bytes_declines_or_agrees(payload: bytes) -> None:
    """Random bytes and truncated envelopes (and the classic malformations): declined, or reference_scan's tuple."""
    _check_hostile(payload)


# --- canonical keys -----------------------------------------------------------------------------

_UUID_SPELLINGS: tuple[Callable[[uuid.UUID], str], ...] = (
    str, lambda u: str(u).upper(), lambda u: u.hex, lambda u: u.hex.upper(), lambda u: "{" + str(u) + "}",
    lambda u: "{" + str(u).upper() + "}", lambda u: "urn:uuid:" + str(u), lambda u: "URN:UUID:" + str(u),
    lambda u: "uRn:UuID:" + str(u).upper(), lambda u: "{" + u.hex + "}", lambda u: "urn:uuid:" + u.hex,
    lambda u: str(u)[:35] + "g", lambda u: str(u).replace("-", "", 1) + "-", lambda u: " " + str(u)[1:],
    lambda u: str(u)[:34] + " " + str(u)[35], lambda u: u.hex[:30] + " " + u.hex[31],
    lambda u: "(" + str(u) + ")", lambda u: "urn-uuid:" + str(u), lambda u: str(u).replace("a", "\u00e1"),
)
UUID_TEXTS = st.builds(lambda u, spell: spell(u), st.uuids(), st.sampled_from(_UUID_SPELLINGS))
ROUTING_KEYS = st.one_of(
    st.text(), st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=40),
    st.text(min_size=1000, max_size=1030), UUID_TEXTS, st.binary(), st.binary(min_size=16, max_size=16),
    st.binary(min_size=1020, max_size=1030), st.integers(), INT64, st.integers(2**63, 2**70),
    st.integers(-(2**70), -(2**63) - 1), st.booleans(), st.none(), FINITE, st.uuids(), st.binary().map(bytearray),
    st.sampled_from(["", "\ud800", "a\udc00b", "x" * 1024, "x" * 1025, "\u00e9" * 512, "\u00e9" * 512 + "x",
                     b"", b"x" * 1024, b"x" * 1025, 10**1023, 10**1024, -(10**1022), "0" * 32, "0" * 36]),
)


@settings(max_examples=1200)
@given(ROUTING_KEYS)
def test_fast_canonical_key_is_the_python_rule_or_declines(value: object) -> None:
    """Compiled bytes equal the Python rule's; where Python raises the compiled answer is None;
    the common str, bytes and int64 keys are taken, not declined."""
    python = hashing._canonical_key_python
    try:
        want: bytes | None = python(value)
    except InvalidKeyError:
        want = None
    got = hashing.fast_canonical_key(value)
    if want is None:
        assert got is None, (value, got)
    elif got is not None:
        assert type(got) is bytes and got == want, (value, got, want)
    if want is not None and (type(value) is bytes or type(value) is str
                             or (type(value) is int and -(2**63) <= value < 2**63)):  # type: ignore[operator]
        assert got is not None, value
    if want is not None:
        assert hashing.canonical_key(value) == want


# --- placers ------------------------------------------------------------------------------------

PARTITIONS = st.one_of(st.integers(1, 100_000), st.sampled_from([1, 2, 3, 12, 99_999, 100_000]))


@settings(max_examples=800)
@given(st.binary(max_size=300), PARTITIONS)
def test_murmur2_placer_is_kafkas_rule(key: bytes, n: int) -> None:
    """``Murmur2Placer(n)(key) == (murmur2(key) & 0x7fffffff) % n`` with the line-by-line Java port."""
    want = (hashing.murmur2_reference(key) & 0x7FFF_FFFF) % n
    assert NATIVE.Murmur2Placer(n)(key) == want
    assert hashing.murmur2_partitioner(n)(key) == want
    assert NATIVE.murmur2_unsigned(key) == hashing.murmur2_reference(key) & 0xFFFF_FFFF


@settings(max_examples=800)
@given(st.binary(max_size=300), PARTITIONS)
def test_jump_placers_are_their_python_twins(key: bytes, n: int) -> None:
    """``JumpPlacer(n, hash)`` places every key where the Python jump placement of xxh3 or murmur2 does."""
    assert NATIVE.JumpPlacer(n, "xxh3")(key) == placement._jump_xxh3_python(n)(key) == placement._jump_xxh3(n)(key)
    assert NATIVE.JumpPlacer(n, "murmur2")(key) == placement._jump_murmur2_python(n)(key) \
        == placement._jump_murmur2(n)(key)


# --- the worker with and without the compiled scan ------------------------------------------------

T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)  # a minute boundary
WORKER = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="10s", retention="10m",
                        hot_window_s=1.0, watermark_agreement=1)
JSON_HEADERS = {"content-type": b"application/json", "streams-salt": b"-1"}


class _Clock:
    """The fake wall clock both processors read."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _processor(clock: _Clock) -> tuple[EventProcessor, dict[str, Any], list[tuple[int, str, Any]]]:
    data: dict[str, Any] = {}
    changelog: list[tuple[int, str, Any]] = []
    processor = EventProcessor(WORKER, Stage1Store(data, lambda p, k, v: changelog.append((p, k, v))),
                               instance="test", clock_ms=clock)
    processor.assign([("events", 0), ("events", 1)])
    return processor, data, changelog


def _envelope(event_id: str, ts: int, key: str, value: Any, kind: str = "uuid7") -> bytes:
    return orjson.dumps({"id": event_id, "id_kind": kind, "ts_ms": ts, "key": key, "value": value, "attributes": {}})


def test_worker_gives_identical_results_with_and_without_the_compiled_scan() -> None:
    """Outputs, conservation counts, collisions and stage-1 state are the same whichever path reads the events,
    and the compiled processor really took the scan for the plain envelopes."""
    ids = UUIDv7Generator(clock=lambda: T0)
    snowflake = _snowflake_at(T0, 3)
    plain = [_envelope(str(ids.next()), T0 + 1000 + i, f"k{i % 4}", float(i) / 3) for i in range(12)]
    plain += [_envelope(str(ids.next()), T0 + 2000, "n", None),
              _envelope(snowflake, T0 + 3000, "snow", 1.5, "snowflake"),
              _envelope(snowflake, T0 + 3001, "snow", 2.5, "snowflake"),  # a Snowflake collision: both count
              _envelope(str(ids.next()), T0 + 4000, "int", 7),  # an int value stays an int
              _envelope(str(ids.next()), T0 + 4000, "big", 123456789012345678.0),
              _envelope(str(ids.next()), T0 + 4000, "tie", 562949953421312.25)]  # identities are in the store's ids|
    python_only = [
        _envelope(str(ids.next()).upper(), T0 + 5000, "upper-id", 1.0),  # valid, but not the producer's spelling
        _envelope(str(ids.next()), T0 + 5000, "\u00e9\u00a0\u00e9", 2.0),  # no ASCII non-space: Python decides
        json.dumps({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": T0 + 5000, "key": "\U0001f600",
                    "value": 3.0}).encode(),  # a surrogate pair escape
    ]
    malformed = [b"{not json", b'{"id":"nope","id_kind":"uuid7","ts_ms":1,"key":"c"}',
                 _envelope(str(ids.next()), T0 + 6000, "   ", 1.0),
                 _envelope(str(ids.next()), T0 + 6000, "x" * 1025, 1.0),
                 _envelope(str(ids.next()), T0 + 6000, "k", 1.0)[:-1],
                 _envelope(str(ids.next()), T0 + 6000, "k", 1.0).replace(b"1.0", b"NaN"),
                 _envelope(str(ids.next()), T0 + 6000, "k", 1.0)[:-1] + b',"key":"j"}']
    plain.append(_envelope(str(ids.next()), T0 + 10 * 3_600_000, "future", 1.0))  # scanned, then dead-lettered
    first = [*plain, plain[0], plain[5], *python_only, *malformed, plain[1]]  # resends of three events
    moving = [_envelope(str(ids.next()), T0 + 60_000 + 6_500, "tick", 1.0)]
    late = [_envelope(str(ids.next()), T0 + 7000, "late", 4.0), plain[2],
            _envelope(str(ids.next()), T0 - 3_600_000, "too-old", 5.0),
            _envelope(snowflake, T0 + 8000, "late-snow", -0.0, "snowflake")]

    runs = []
    for compiled in (True, False):
        clock = _Clock(T0 + 30_000)
        processor, data, changelog = _processor(clock)
        taken: list[tuple[bytes, EventScan | None]] = []
        if compiled:
            scan = processor._scan
            assert scan is not None

            def counting(payload: bytes, scan: Callable[[bytes], EventScan | None] = scan) -> EventScan | None:
                result = scan(payload)
                taken.append((payload, result))
                return result
            processor._scan = counting
        else:
            processor._scan = None
        outputs: list[list[Output] | TickResult] = []
        offsets = {0: 0, 1: 0}

        def batch(payloads: list[bytes], partition: int) -> list[Output]:
            msgs = []
            for payload in payloads:
                msgs.append(InMessage("events", partition, offsets[partition], b"k", payload, JSON_HEADERS))
                offsets[partition] += 1
            return processor.handle_batch(msgs)

        outputs.append(batch(first, 0))
        outputs.append(batch(first[:6], 1))
        clock.now = T0 + 60_000 + 6_500
        outputs.append(batch(moving, 0))
        outputs.append(batch(moving, 1))
        outputs.append(processor.tick())
        outputs.append(batch(late, 0))
        processor.store.flush()
        outputs.append(processor.tick())
        runs.append((outputs, processor.counts(), dict(data), changelog, taken))

    (fast_out, fast_counts, fast_data, fast_log, taken), (slow_out, slow_counts, slow_data, slow_log, none) = runs
    assert fast_out == slow_out
    assert fast_counts == slow_counts
    assert fast_data == slow_data and fast_log == slow_log
    assert none == []
    roles = [o.role for group in fast_out for o in (group.outputs if isinstance(group, TickResult) else group)]
    assert {"dead_letters", "late_events", "partials", "bucket_closed"} <= set(roles)
    assert fast_counts.duplicates >= 3 and fast_counts.collisions >= 1 and fast_counts.late >= 1
    results = dict(taken)
    for payload in plain + moving + late:
        assert results[payload] is not None, payload
    for payload in python_only + malformed:
        assert results[payload] is None, payload
    assert [r for _, r in taken if r is not None and type(r[2]) is int] != []  # the int value took the scan


# --- the router's compiled route() -----------------------------------------------------------------

_WIDTH_MS = 60_000
_ROUTE_KEYS = st.one_of(
    st.sampled_from(["tenant-1", "tenant-2", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "", " ", "\ud800"]),
    st.text(max_size=8), st.binary(max_size=6), st.integers(-3, 3), st.integers(2**63, 2**64),
    st.builds(uuid.UUID, st.sampled_from(["017f22e2-79b0-7cc3-98c4-dc0c0c07398f"])),
    st.sampled_from([None, True, 1.5, bytearray(b"k")]),
)
_ROUTE_TIMES = st.one_of(st.integers(0, 4 * _WIDTH_MS), st.sampled_from([-1, 2**70, True, 1.0, "5"]))
_ROUTE_IDS = st.one_of(st.none(), st.binary(min_size=1, max_size=16), st.sampled_from([b"", 5, "x"]))
_OPS = st.lists(st.one_of(
    st.tuples(st.just("route"), _ROUTE_KEYS, _ROUTE_TIMES, _ROUTE_IDS),
    st.tuples(st.just("place"), st.sampled_from([b"tenant-1", b"tenant-2", b"\x01"]),
              st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("home"), st.sampled_from([b"tenant-1", b"tenant-2", b"\x01"])),
), max_size=40)


def _python_router(router: Any) -> Any:
    """``router`` back on the class's Python route() and doorkeeper (its compiled ones are instance attributes)."""
    del router.route, router._remember
    router._route_core = None
    return router


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - both routers must fail alike, with the same error
        return type(exc).__name__, str(exc)


@settings(max_examples=300, deadline=None)
@given(_OPS, st.sampled_from([("mod", "murmur2"), ("jump", "xxh3"), ("jump", "murmur2"), ("mod", "sha256")]),
       st.sampled_from([0, 2, 65_536]))
def test_compiled_route_is_the_python_route(ops: list[tuple[Any, ...]], rule: tuple[str, str], memo_size: int) -> None:
    """Any sequence of routes (good and bad keys, times and IDs, across a map change) and directory changes
    gives the same decisions, or the same errors, and the same memo, through the compiled route() as through
    the Python one."""
    from streams.core.routing.router import Router, RoutingMap
    from streams.core.time.buckets import TimeBuckets

    def router() -> Router:
        maps = [RoutingMap(version=1, partitions=12, topic="t", placement=rule[0], hash=rule[1]),
                RoutingMap(version=2, partitions=16, topic="u.{bucket}", first_bucket_ms=2 * _WIDTH_MS)]
        return Router(TimeBuckets("1m"), maps, memo_size=memo_size)

    compiled, python = router(), _python_router(router())
    assert "route" in vars(compiled), "the router did not take the compiled route()"
    for op in ops:
        if op[0] == "route":
            _, key, ts, event_id = op
            got, want = _outcome(lambda: compiled.route(key, ts, event_id)), _outcome(lambda: python.route(key, ts, event_id))
            assert got == want and type(got[1]) is type(want[1]), (op, got, want)
            assert compiled._memo.keys() == python._memo.keys(), "the doorkeepers admit the same keys"
        elif op[0] == "place":
            for r in (compiled, python):
                r.directory.set(op[1], op[2], 16)
        else:
            for r in (compiled, python):
                r.directory.remove(op[1])


def test_a_router_with_the_compiled_route_is_collected_when_dropped() -> None:
    """The router and its compiled core refer to each other; the collector still frees them."""
    import gc
    import weakref

    from streams.core.routing.router import Router, RoutingMap
    from streams.core.time.buckets import TimeBuckets

    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=12, topic="t")])
    router.route("tenant-1", 0)
    ref = weakref.ref(router)
    del router
    gc.collect()
    assert ref() is None


def test_installing_a_map_makes_the_compiled_router_forget_keys_seen_once_as_the_python_one_does() -> None:
    """After ``install`` a key routed once before is a first sighting again: no memo entry, compiled or not."""
    from streams.core.routing.router import Router, RoutingMap
    from streams.core.time.buckets import TimeBuckets

    compiled, python = (Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=12, topic="t")]) for _ in "ab")
    _python_router(python)
    for r in (compiled, python):
        r.route("tenant-1", 0)
        r.route("tenant-1", 0)  # the hot bucket is set now: this is the key's first sighting there
        r.route("tenant-2", 0)
        r.install(RoutingMap(version=2, partitions=16, topic="t", first_bucket_ms=10 * _WIDTH_MS))
        r.route("tenant-2", 0)
        r.route("tenant-2", 0)
    assert ("tenant-2" in compiled._memo) == ("tenant-2" in python._memo)
    compiled.route("tenant-3", 0)
    compiled.install(RoutingMap(version=3, partitions=16, topic="t", first_bucket_ms=20 * _WIDTH_MS))
    compiled.route("tenant-3", 0)
    assert "tenant-3" not in compiled._memo, "a key seen once before install is a first sighting after it"
