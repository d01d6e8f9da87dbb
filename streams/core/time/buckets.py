"""Fixed-width, UTC-aligned time buckets.

A bucket of width ``w`` milliseconds holds the timestamps ``[start, start + w)``
where ``start = floor(ts / w) * w`` counted from the Unix epoch, so every process
(and every language) cuts time at the same instants without sharing state. Widths
are a whole number of seconds that divides a day evenly (``30s``, ``5m``, ``1h``,
``6h`` …), so buckets never straddle midnight UTC, or a whole number of days
(``1d``, ``7d``) between 1 s and 31 d. Multi-day buckets are aligned to the epoch
too: ``7d`` buckets start on Thursdays, 00:00 UTC (1970-01-01 was a Thursday).

A bucket *closes* ``grace`` after it ends; events that arrive later are "late".

Labels such as ``20261202T1105Z`` (``20261202T110530Z`` when the width is under a
minute) sort as text in time order and use only characters that are legal in a
Kafka topic name, so they can name a topic per bucket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from streams.core.errors import InvalidBucketError
from streams.core.validate import require_duration

__all__ = [
    "Bucket",
    "TimeBuckets",
    "parse_duration",
    "parse_width",
    "MAX_TIMESTAMP_MS",
    "check_timestamp",
]

_SECOND_MS = 1_000
_MINUTE_MS = 60_000
_DAY_MS = 86_400_000
_MIN_WIDTH_MS = _SECOND_MS
_MAX_WIDTH_MS = 31 * _DAY_MS
_MAX_GRACE_MS = 366 * _DAY_MS

#: Last millisecond of year 9999: labels keep four-digit years, so they sort as text.
MAX_TIMESTAMP_MS = 253_402_300_799_999

_WIDTH_RULE = (
    "a width must be a whole number of seconds that divides a day evenly "
    "(e.g. 30s, 1m, 5m, 15m, 1h, 6h) or a whole number of days (e.g. 1d, 7d), "
    "between 1s and 31d"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LABEL_MINUTES = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})Z")
_LABEL_SECONDS = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})Z")


class Bucket(NamedTuple):
    """One time bucket: ``[start_ms, end_ms)``, closing at ``close_ms``.

    ``close_ms`` is ``end_ms + grace``; ``index`` is ``start_ms // width_ms``;
    ``label`` sorts as text in time order and is valid inside a Kafka topic name.
    """

    start_ms: int
    end_ms: int
    close_ms: int
    label: str
    index: int


def parse_duration(value: str | timedelta, what: str = "duration") -> int:
    """Milliseconds in a duration such as ``"0s"``, ``"500ms"``, ``"90s"``, ``"1h"`` or a timedelta.

    The project's one duration grammar, :func:`streams.core.validate.require_duration`
    (a bare number such as ``90`` is refused), raising InvalidBucketError. Unlike
    :func:`parse_width` any whole number of units is allowed. Raises
    InvalidBucketError naming ``what`` and the value if it is not such a duration
    (negative, or not a whole number of milliseconds).
    """
    return require_duration(what, value, InvalidBucketError)


def parse_width(value: str | timedelta) -> int:
    """Return the bucket width ``value`` in milliseconds.

    Accepts ``"30s"``, ``"1m"``, ``"5m"``, ``"15m"``, ``"1h"``, ``"6h"``, ``"1d"``,
    ``"7d"`` (any ``<n><s|m|h|d>``) or a ``timedelta``. Raises InvalidBucketError,
    naming the value and the rule, unless the width is a whole number of seconds that
    divides a day evenly or a whole number of days, between 1 s and 31 d.
    """
    width_ms = require_duration("bucket width", value, InvalidBucketError)
    if not _MIN_WIDTH_MS <= width_ms <= _MAX_WIDTH_MS:
        raise InvalidBucketError(f"bucket width {value!r} is out of range: {_WIDTH_RULE}")
    if width_ms % _SECOND_MS or (_DAY_MS % width_ms if width_ms < _DAY_MS else width_ms % _DAY_MS):
        raise InvalidBucketError(f"bucket width {value!r} is not allowed: {_WIDTH_RULE}")
    return width_ms


def _parse_grace(value: str | timedelta | int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        grace_ms = value
    else:
        grace_ms = require_duration("grace", value, InvalidBucketError)
    if not 0 <= grace_ms <= _MAX_GRACE_MS:
        raise InvalidBucketError(f"grace {value!r} must be between 0 and 366d")
    return grace_ms


def _bad_timestamp(ts_ms: object) -> InvalidBucketError:
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        return InvalidBucketError(
            f"timestamp must be an int of milliseconds since the epoch, got {type(ts_ms).__name__}"
        )
    return InvalidBucketError(
        f"timestamp {ts_ms} ms is outside 0..{MAX_TIMESTAMP_MS} (1970 to the end of year 9999)"
    )


def check_timestamp(ts_ms: object) -> int:
    """Return ``ts_ms`` as a plain int if it is a valid event time, else raise.

    Valid: an ``int`` (not ``bool``) in ``0..MAX_TIMESTAMP_MS``. Int subclasses such
    as numpy integers are converted. Raises InvalidBucketError otherwise.
    """
    if isinstance(ts_ms, int) and not isinstance(ts_ms, bool) and 0 <= ts_ms <= MAX_TIMESTAMP_MS:
        return int(ts_ms)
    try:
        as_int = ts_ms.__index__()  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        raise _bad_timestamp(ts_ms) from None
    if isinstance(ts_ms, bool) or not 0 <= as_int <= MAX_TIMESTAMP_MS:
        raise _bad_timestamp(ts_ms if isinstance(ts_ms, bool) else as_int)
    return as_int


@dataclass(frozen=True)
class TimeBuckets:
    """A bucket width and grace period; turns event times into buckets.

    ``width`` is a str like ``"5m"`` or a timedelta (see :func:`parse_width`);
    ``grace`` is a str, a timedelta or an int of milliseconds, 0..366 d. Equality
    compares ``width_ms`` and ``grace_ms``. Raises InvalidBucketError on a bad
    width or grace.
    """

    width: str | timedelta = field(compare=False)
    grace: str | timedelta | int = field(default=0, compare=False)
    width_ms: int = field(init=False)
    grace_ms: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "width_ms", parse_width(self.width))
        object.__setattr__(self, "grace_ms", _parse_grace(self.grace))

    def bucket_index(self, ts_ms: int) -> int:
        """Return ``ts_ms // width_ms``, the index of the bucket holding ``ts_ms``.

        The cheap call for the hot path. Raises InvalidBucketError if ``ts_ms`` is
        not an int (bools rejected) in ``0..MAX_TIMESTAMP_MS``.
        """
        if ts_ms.__class__ is not int or not 0 <= ts_ms <= MAX_TIMESTAMP_MS:
            ts_ms = check_timestamp(ts_ms)
        return ts_ms // self.width_ms

    def bucket_of(self, ts_ms: int) -> Bucket:
        """Return the bucket holding ``ts_ms``; raises InvalidBucketError like bucket_index."""
        return self.bucket_at_index(self.bucket_index(ts_ms))

    def bucket_at_index(self, index: int) -> Bucket:
        """Return the bucket number ``index`` (its start is ``index * width_ms``).

        Raises InvalidBucketError if ``index`` is not a non-negative int whose bucket
        starts at or before MAX_TIMESTAMP_MS.
        """
        if index.__class__ is not int or index < 0 or index * self.width_ms > MAX_TIMESTAMP_MS:
            if not isinstance(index, int) or isinstance(index, bool):
                raise InvalidBucketError(f"bucket index must be an int, got {type(index).__name__}")
            if not 0 <= index * self.width_ms <= MAX_TIMESTAMP_MS:
                raise InvalidBucketError(f"bucket index {index} starts outside 0..{MAX_TIMESTAMP_MS} ms")
            index = int(index)
        start = index * self.width_ms
        end = start + self.width_ms
        return Bucket(start, end, end + self.grace_ms, self.label_of(start), index)

    def is_boundary(self, ts_ms: int) -> bool:
        """Return True if ``ts_ms`` is the first millisecond of a bucket.

        Raises InvalidBucketError for an invalid timestamp, like bucket_index.
        """
        return check_timestamp(ts_ms) % self.width_ms == 0

    def label_of(self, start_ms: int) -> str:
        """Return the label of the bucket starting at ``start_ms``, e.g. ``20261202T1105Z``.

        Seconds are included (``20261202T110530Z``) when the width is under a minute.
        Raises InvalidBucketError if ``start_ms`` is invalid or not a bucket start.
        """
        start_ms = check_timestamp(start_ms)
        if start_ms % self.width_ms:
            raise InvalidBucketError(
                f"{start_ms} ms is not the start of a {self.width_ms} ms bucket"
            )
        t = _EPOCH + timedelta(milliseconds=start_ms)
        if self.width_ms < _MINUTE_MS:
            return f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}Z"
        return f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}Z"

    def parse_label(self, label: str) -> Bucket:
        """Return the bucket whose label is ``label``; the inverse of ``bucket_of(...).label``.

        Raises InvalidBucketError if ``label`` is not a str in this width's label
        format, names an impossible date, or is not the start of a bucket.
        """
        if not isinstance(label, str):
            raise InvalidBucketError(f"bucket label must be a str, got {type(label).__name__}")
        pattern = _LABEL_SECONDS if self.width_ms < _MINUTE_MS else _LABEL_MINUTES
        match = pattern.fullmatch(label)
        if match is None:
            example = "20261202T110530Z" if self.width_ms < _MINUTE_MS else "20261202T1105Z"
            raise InvalidBucketError(f"bucket label {label!r} is not in the form {example!r}")
        parts = [int(group) for group in match.groups()]
        try:
            t = datetime(*parts, tzinfo=timezone.utc)  # type: ignore[misc]
        except ValueError as exc:
            raise InvalidBucketError(f"bucket label {label!r} is not a valid UTC time: {exc}") from None
        delta = t - _EPOCH
        start_ms = (delta.days * 86_400 + delta.seconds) * 1_000
        if start_ms < 0 or start_ms % self.width_ms:
            raise InvalidBucketError(
                f"bucket label {label!r} is not the start of a {self.width_ms} ms bucket"
            )
        return self.bucket_at_index(start_ms // self.width_ms)
