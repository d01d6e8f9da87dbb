"""Read an event ID back: its kind, time, worker and sequence.

Accepted spellings:

* UUIDv7: :class:`uuid.UUID`; text in upper or lower case, with or without
  hyphens, in braces, or with a ``urn:uuid:`` prefix; 16 raw bytes.
* Snowflake: a non-negative int; its decimal text; 8 big-endian bytes (what
  :func:`id_bytes` returns). Fields are read with the given layout.

Everything else raises :class:`InvalidIdError` saying what is wrong. A UUID of
another version or variant is reported as such, never misread as a UUIDv7.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from uuid import UUID

from streams.core.errors import InvalidIdError
from streams.core.ids.snowflake import DEFAULT_SNOWFLAKE_LAYOUT, SnowflakeLayout

__all__ = ["IdKind", "ParsedId", "parse_id", "classify_id", "id_time_ms", "id_bytes"]

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_DATETIME_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _UNIX_EPOCH) // timedelta(
    milliseconds=1
)
#: The last millisecond a ``datetime`` can hold (the end of year 9999): IDs past it are refused.
MAX_DATETIME_MS = _MAX_DATETIME_MS
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
#: A UUIDv7 (version 7, variant 10) in the canonical text producers write: one C-level match.
_CANONICAL_UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_MAX_UUID = (1 << 128) - 1


class IdKind(StrEnum):
    """Which generator an ID came from."""

    UUID7 = "uuid7"
    SNOWFLAKE = "snowflake"


@dataclass(frozen=True, slots=True)
class ParsedId:
    """An ID taken apart.

    ``value`` is the canonical form: a :class:`uuid.UUID` for UUIDv7, an int for a
    Snowflake. ``timestamp_ms`` counts milliseconds since the Unix epoch and
    ``timestamp`` is the same instant as an aware UTC datetime. ``worker`` and
    ``sequence`` are None for UUIDv7 (its counter is not a sequence number).
    """

    kind: IdKind
    timestamp_ms: int
    timestamp: datetime
    worker: int | None
    sequence: int | None
    value: UUID | int


def parse_id(value: object, *, layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> ParsedId:
    """Take a UUIDv7 or Snowflake apart; ``layout`` says how to read a Snowflake.

    Raises:
        InvalidIdError: ``value`` is not one of the accepted spellings (the message
            names its type and the problem: bool, float, negative int, 15 bytes,
            bad hex, UUID version 4, ...), or its time is after year 9999.
    """
    kind, number = classify_id(value, layout=layout)
    timestamp_ms = _time_ms(kind, number, layout)
    if kind is IdKind.UUID7:
        worker = sequence = None
        canonical: UUID | int = value if type(value) is UUID else UUID(int=number)
    else:
        worker = (number >> layout.worker_shift) & layout.max_worker
        sequence = (number >> layout.sequence_shift) & layout.max_sequence
        canonical = number
    timestamp = _UNIX_EPOCH + timedelta(milliseconds=timestamp_ms)
    return ParsedId(kind, timestamp_ms, timestamp, worker, sequence, canonical)


def classify_id(value: object, *, layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> tuple[IdKind, int]:
    """An ID's kind and its value as an int; accepts and rejects exactly what :func:`parse_id` does.

    The per-record form for hot paths (no datetime, no ParsedId); :func:`parse_id`
    builds on it. Raises InvalidIdError as :func:`parse_id` does.
    """
    if value.__class__ is str and len(value) == 36 and _CANONICAL_UUID7.fullmatch(value):  # type: ignore[arg-type]
        # What producers write (the worker's per-event case): one regex and one int(), no further calls.
        number = int(value.replace("-", ""), 16)  # type: ignore[attr-defined]
        if number >> 80 <= _MAX_DATETIME_MS:
            return IdKind.UUID7, number
    kind, number = _classify(value, layout)
    timestamp_ms = _time_ms(kind, number, layout)
    if timestamp_ms > _MAX_DATETIME_MS:
        raise InvalidIdError(f"{kind} ID time {timestamp_ms} ms is after year 9999, beyond datetime; "
                             "id_time_ms() still reads it")
    return kind, number


def id_time_ms(value: object, *, layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> int:
    """Return an ID's time in milliseconds since the Unix epoch; cheap for UUID and int.

    Accepts what :func:`parse_id` accepts and raises what it raises, without
    building a datetime (so years past 9999 are fine).
    """
    if type(value) is UUID:
        number = value.int
        if (number >> 76) & 0xF == 7 and (number >> 62) & 0b11 == 0b10:
            return number >> 80
    elif type(value) is int and value >= 0 and not value >> layout.total_bits:
        return layout.epoch_ms + (value >> layout.timestamp_shift) * layout.time_unit_ms
    kind, number = _classify(value, layout)
    return _time_ms(kind, number, layout)


def _time_ms(kind: IdKind, number: int, layout: SnowflakeLayout) -> int:
    """The time of a classified ID, in milliseconds since the Unix epoch."""
    if kind is IdKind.UUID7:
        return number >> 80
    return layout.epoch_ms + (number >> layout.timestamp_shift) * layout.time_unit_ms


def id_bytes(value: object, *, layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT) -> bytes:
    """Return an ID's canonical bytes: 16 for a UUIDv7, 8 big-endian for a Snowflake.

    Every spelling of one ID gives the same bytes, so a salt derived from them is
    stable. Accepts what :func:`parse_id` accepts and raises what it raises.
    """
    kind, number = _classify(value, layout)
    return number.to_bytes(16 if kind is IdKind.UUID7 else 8, "big")


def _classify(value: object, layout: SnowflakeLayout) -> tuple[IdKind, int]:
    """Return the ID's kind and its value as an int, validated; or raise InvalidIdError."""
    if isinstance(value, UUID):
        return IdKind.UUID7, _uuid7_int(value.int, value)
    if isinstance(value, bool):
        raise InvalidIdError(f"bool {value!r} is not an ID")
    if isinstance(value, int):
        return IdKind.SNOWFLAKE, _snowflake_int(int(value), layout, value)
    if isinstance(value, str):
        return _classify_text(value, layout)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) == 16:
            return IdKind.UUID7, _uuid7_int(int.from_bytes(raw, "big"), raw)
        if len(raw) == 8:
            return IdKind.SNOWFLAKE, _snowflake_int(int.from_bytes(raw, "big"), layout, raw)
        raise InvalidIdError(
            f"{type(value).__name__} of length {len(raw)} is not an ID: expected 16 bytes "
            "(UUID) or 8 bytes (big-endian Snowflake)"
        )
    raise InvalidIdError(
        f"{type(value).__name__} is not an ID: expected a uuid.UUID, UUID text, 16 bytes, "
        "or a Snowflake int, decimal text or 8 bytes"
    )


def _classify_text(text: str, layout: SnowflakeLayout) -> tuple[IdKind, int]:
    if len(text) == 36 and _CANONICAL_UUID7.fullmatch(text):
        return IdKind.UUID7, int(text.replace("-", ""), 16)
    if text.isascii() and text.isdigit() and len(text) != 32:
        if len(text) > 20:
            raise InvalidIdError(f"decimal text of {len(text)} digits is too long for a Snowflake: {_show(text)}")
        return IdKind.SNOWFLAKE, _snowflake_int(int(text), layout, text)
    body = text
    if body[:9].lower() == "urn:uuid:":
        body = body[9:]
    elif body[:1] == "{" and body[-1:] == "}":
        body = body[1:-1]
    if len(body) == 36:
        if body[8] + body[13] + body[18] + body[23] != "----":
            raise InvalidIdError(f"UUID text with misplaced hyphens (want 8-4-4-4-12): {_show(text)}")
        body = body.replace("-", "")
    if len(body) != 32:
        raise InvalidIdError(
            f"str is neither UUID text (32 hex digits, 36 with hyphens) nor a decimal "
            f"Snowflake: {_show(text)}"
        )
    if not _HEX_DIGITS.issuperset(body):
        raise InvalidIdError(f"bad hex in UUID text: {_show(text)}")
    return IdKind.UUID7, _uuid7_int(int(body, 16), text)


def _uuid7_int(number: int, original: object) -> int:
    version = (number >> 76) & 0xF
    variant = (number >> 62) & 0b11
    if version == 7 and variant == 0b10:
        return number
    if number == 0:
        problem = "the nil UUID"
    elif number == _MAX_UUID:
        problem = "the max UUID"
    elif version != 7:
        problem = f"UUID version {version}, expected 7"
    else:
        problem = f"UUID variant bits {variant:02b}, expected 10 (RFC 9562)"
    raise InvalidIdError(f"{problem}, not a UUIDv7: {_show(original)}")


def _snowflake_int(number: int, layout: SnowflakeLayout, original: object) -> int:
    if number < 0:
        raise InvalidIdError(f"negative int {number} is not a Snowflake")
    if number >> layout.total_bits:
        raise InvalidIdError(
            f"{_show(original)} does not fit the {layout.total_bits}-bit Snowflake layout "
            f"(max {(1 << layout.total_bits) - 1})"
        )
    return number


def _show(value: object) -> str:
    """A short repr for error messages (IDs may come from untrusted input)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
