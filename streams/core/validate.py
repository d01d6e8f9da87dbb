"""The one home of the project's input checks: settings, record fields, ints, topic names, durations.

Every settings class, record reader and command-line argument validates through
these, so every message reads the same: ``<name> must be <allowed>, got <value>``.
Each function takes the error class to raise (ConfigError by default), so a routing
map raises RoutingMapError, a hostile notice HotKeyNoticeError and a bucket width
InvalidBucketError with the same wording.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from streams.core.errors import ConfigError, StreamsError

__all__ = [
    "BUCKET_PLACEHOLDER",
    "MAX_TOPIC_LENGTH",
    "require",
    "require_duration",
    "require_fields",
    "require_int",
    "require_topic",
]

#: Marks a topic template: one topic per bucket, e.g. ``"events.{bucket}"``.
BUCKET_PLACEHOLDER = "{bucket}"
#: Kafka's limit on a topic name's length.
MAX_TOPIC_LENGTH = 249
_LONGEST_LABEL = "00000000T000000Z"  # the longest bucket label a template's {bucket} becomes
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]{1,12})(ms|[smhd])")


def require(ok: bool, name: str, allowed: str, value: Any, error: type[StreamsError] = ConfigError) -> None:
    """Raise ``error`` (ConfigError by default) naming the field, the allowed range and the value, unless ``ok``."""
    if not ok:
        raise error(f"{name} must be {allowed}, got {value!r}")


def require_int(name: str, value: object, low: int, high: int | None = None,
                error: type[StreamsError] = ConfigError) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[low, high]`` (no upper bound if None), else raise ``error``.

    The message names the field and the range: ``worker_id must be an int in [0, 1023], got -1``.
    """
    if value.__class__ is not int or value < low or (high is not None and value > high):  # type: ignore[operator]
        allowed = f"in [{low}, {high}]" if high is not None else f">= {low}"
        shown = repr(value) if value.__class__ is int else f"{value!r:.80} ({type(value).__name__})"
        raise error(f"{name} must be an int {allowed}, got {shown}")
    return value  # type: ignore[return-value]


def require_topic(name: str, value: object, *, template: bool = True, error: type[StreamsError] = ConfigError) -> str:
    """Return ``value`` if it is a Kafka topic name, else raise ``error`` naming ``name``.

    Kafka's rule: 1..249 characters of ``[A-Za-z0-9._-]``, not ``.`` or ``..``. With
    ``template`` a name may hold ``{bucket}`` once, and must still fit when it becomes
    the longest bucket label.
    """
    if value.__class__ is not str:
        raise error(f"{name} must be a topic name (str), got {type(value).__name__}")
    text: str = value  # type: ignore[assignment]
    holes = text.count(BUCKET_PLACEHOLDER)
    if holes > (1 if template else 0):
        raise error(f"{name} must be a Kafka topic name" + (f" holding {BUCKET_PLACEHOLDER} at most once" if template
                    else f" without {BUCKET_PLACEHOLDER}") + f", got {text!r}")
    longest = text.replace(BUCKET_PLACEHOLDER, _LONGEST_LABEL)
    if not 1 <= len(longest) <= MAX_TOPIC_LENGTH or longest in (".", ".."):
        with_label = f" (with {BUCKET_PLACEHOLDER} as a {len(_LONGEST_LABEL)}-character label)" if holes else ""
        raise error(f"{name} must be a Kafka topic name of 1..{MAX_TOPIC_LENGTH} characters{with_label}, "
                    f"other than '.' and '..', got {text!r}")
    if _TOPIC_CHARS.fullmatch(text.replace(BUCKET_PLACEHOLDER, "")) is None:
        raise error(f"{name} must be a Kafka topic name of [A-Za-z0-9._-] only"
                    + (f" outside {BUCKET_PLACEHOLDER}" if holes else "") + f", got {text!r}")
    return text


def require_duration(name: str, value: object, error: type[StreamsError] = ConfigError) -> int:
    """Return the milliseconds in ``value``, a duration, else raise ``error`` naming ``name`` and the value.

    The project's one duration grammar, for settings, the worker and the command line
    alike: a whole number (up to 12 digits) and a unit, ``ms``, ``s``, ``m``, ``h`` or
    ``d`` (``"500ms"``, ``"90s"``, ``"5m"``, ``"1h"``, ``"7d"``), or a ``timedelta`` that
    is not negative and is a whole number of milliseconds. A bare number is refused,
    since ``90`` could mean seconds or milliseconds; the message suggests ``90s`` or
    ``90000ms``.
    """
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros < 0:
            raise error(f"{name} {value!r} is negative")
        if micros % 1_000:
            raise error(f"{name} {value!r} is not a whole number of milliseconds")
        return micros // 1_000
    if not isinstance(value, str):
        raise error(f"{name} must be a str like '5m' or a timedelta, got {type(value).__name__}")
    match = _DURATION.fullmatch(value)
    if match is None:
        bare = value.isascii() and value.isdigit() and len(value) <= 12
        hint = f": give a unit, e.g. '{value}s' or '{int(value) * 1_000}ms'" if bare else ""
        raise error(f"{name} {value!r} is not a duration like '500ms', '30s', '5m', '1h' or '7d'{hint}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def require_fields(record: object, fields: frozenset[str], what: str, error: type[StreamsError]) -> None:
    """Raise ``error`` unless ``record`` is a mapping with exactly ``fields`` (names the missing or unknown ones)."""
    if not isinstance(record, Mapping):
        raise error(f"{what} must be a mapping, got {type(record).__name__}")
    missing = fields - record.keys()
    if missing:
        raise error(f"{what} is missing field(s) {sorted(missing)}")
    extra = record.keys() - fields
    if extra:
        raise error(f"{what} has unknown field(s) {sorted(map(str, extra))}")
