"""Event-time vocabulary: what the roller tells its callers, and the checks it shares.

The first part names what the bucket roller (:mod:`streams.core.time.roller`) tells its
callers: where an event belongs (:class:`Placement`), what a closing bucket emits
(:class:`ClosedBucket`), what a late correction returns (:class:`Correction`), the
counters (:class:`Counts`), and how per-key values fold (:class:`Aggregation`). The
faust worker, the late-event router and replay import these without importing the
state machine. The checks below it are the one place where the roller and the
watermark tracker validate times, partitions, settings and snapshot fields.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from streams.core.aggregate import Stats
from streams.core.errors import ConfigError, InvalidBucketError, StreamsError
from streams.core.time.buckets import Bucket

__all__ = [
    "Aggregation",
    "ClosedBucket",
    "Correction",
    "Counts",
    "LateCorrectionError",
    "Placement",
    "PlacementKind",
    "REASON_BEFORE_MIN",
    "REASON_FUTURE",
    "REASON_LATE",
    "REASON_TOO_OLD",
    "RollerStateError",
    "STATS",
    "check_config_int",
    "check_ms",
    "check_partition",
    "check_record_fields",
    "record_int",
]

V = TypeVar("V")
A = TypeVar("A")

REASON_LATE = "bucket closed"
REASON_TOO_OLD = "bucket beyond retention"
REASON_FUTURE = "timestamp in the future"
REASON_BEFORE_MIN = "timestamp before the minimum event time"


class RollerStateError(StreamsError, ValueError):
    """A roller snapshot (watermarks included) is malformed, hostile, or inconsistent; the message names the field."""


class LateCorrectionError(StreamsError, ValueError):
    """A late correction does not fit: its bucket is still open, or beyond retention."""


class PlacementKind(enum.Enum):
    """Where an event belongs (the table in :mod:`streams.core.time.roller` says when).

    ON_TIME goes into its bucket; LATE and TOO_OLD go to the late-events topic;
    FUTURE and BEFORE_EPOCH go to dead letters.
    """

    ON_TIME = "on_time"
    LATE = "late"
    TOO_OLD = "too_old"
    FUTURE = "future"
    BEFORE_EPOCH = "before_epoch"


class Placement(NamedTuple):
    """The verdict on one event time.

    ``bucket`` is None for FUTURE and BEFORE_EPOCH (dead letters). ``watermark_ms``
    is the low watermark the verdict used. ``lateness_ms`` is, for LATE and TOO_OLD,
    how far the watermark had passed the bucket's close time (0 otherwise).
    ``reason`` is "" for ON_TIME, else one of the ``REASON_*`` constants.
    """

    kind: PlacementKind
    bucket: Bucket | None
    watermark_ms: int | None
    lateness_ms: int
    reason: str


class Counts(NamedTuple):
    """Event counters. ``received == on_time + late + too_old + dead_lettered`` always.

    ``corrections`` (late corrections applied on replay) is not part of that sum:
    those events were counted as late when they first arrived.
    """

    received: int
    on_time: int
    late: int
    too_old: int
    dead_lettered: int
    corrections: int


@dataclass(frozen=True)
class Aggregation(Generic[V, A]):
    """How per-key values fold into an aggregate, and how aggregates are snapshotted.

    ``add(aggregate, value)`` returns the updated aggregate: a new value, or its
    argument changed in place (then give ``copy``, so a late correction never changes
    an aggregate already handed out in a :class:`ClosedBucket`). If ``add`` raises,
    it must leave its argument unchanged. ``from_record(to_record(a))`` must equal
    ``a`` and raise ValueError (or TypeError) on a malformed record. :data:`STATS`
    is the ready-made one for :class:`streams.core.aggregate.Stats`.
    """

    empty: Callable[[], A]
    add: Callable[[A, V], A]
    to_record: Callable[[A], Any]
    from_record: Callable[[Any], A]
    copy: Callable[[A], A] | None = None


def _stats_add(stats: Stats, value: float | None) -> Stats:
    stats.add(value)  # in place; counts nothing if it raises
    return stats


def _stats_copy(stats: Stats) -> Stats:
    return Stats.empty().merge(stats)  # merge returns a new Stats


#: Count / exact sum / min / max per key (values: a float measure or None).
STATS: Aggregation[float | None, Stats] = Aggregation(
    empty=Stats.empty,
    add=_stats_add,
    to_record=Stats.to_record,
    from_record=Stats.from_record,
    copy=_stats_copy,
)


@dataclass(frozen=True)
class ClosedBucket(Generic[A]):
    """A bucket at its close (emit-on-close).

    ``aggregates`` maps each key to its final aggregate (read-only); ``events`` are
    the on-time events folded in; ``late_events`` the events that arrived after the
    watermark passed the close time but before this emission; ``dead_letters`` those
    attributed to the bucket via :meth:`BucketRoller.count_dead_letter`;
    ``closed_at_ms`` the wall clock and ``watermark_ms`` the low watermark at close.
    """

    bucket: Bucket
    aggregates: Mapping[str, A]
    events: int
    late_events: int
    dead_letters: int
    closed_at_ms: int
    watermark_ms: int


class Correction(NamedTuple):
    """The result of a late correction: the full corrected ``aggregate`` of (``bucket``, ``key``).

    ``emitted`` is True if the bucket was already emitted, so the caller must publish
    this value; False if it is still pending close and the value will be part of the
    coming :class:`ClosedBucket`.
    """

    bucket: Bucket
    key: str
    aggregate: Any
    emitted: bool


# -- checks shared by the roller and the watermark tracker --------------------------

_MAX_MS = 2**62  # far beyond any real clock; keeps snapshots sane


def check_ms(value: object, field: str) -> int:
    """Return ``value`` if it is an int (not bool) of milliseconds within +-2**62, else raise.

    Any sign is accepted (range rules belong to the caller). Raises
    InvalidBucketError naming ``field`` for bool, float, None, str and friends.
    """
    if value.__class__ is int and -_MAX_MS <= value <= _MAX_MS:  # type: ignore[operator]
        return value  # type: ignore[return-value]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidBucketError(f"{field} must be an int of milliseconds, got {type(value).__name__}")
    if not -_MAX_MS <= value <= _MAX_MS:
        raise InvalidBucketError(f"{field} {value} is outside -2**62..2**62 ms")
    return int(value)


def check_config_int(value: object, field: str, low: int, high: int = _MAX_MS) -> int:
    """Return ``value`` if it is an int (not bool) in ``low..high``; else raise ConfigError naming ``field``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{field} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ConfigError(f"{field} must be in {low}..{high}, got {value}")
    return int(value)


def check_partition(partition: object) -> int:
    """Return ``partition`` if it is an int (not bool) >= 0; else raise ValueError naming it."""
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ValueError(f"partition must be an int >= 0, got {partition!r}")
    return int(partition)


def check_record_fields(record: object, fields: tuple[str, ...], what: str) -> Mapping[str, Any]:
    """Return ``record`` if it is a mapping with exactly ``fields``; else raise RollerStateError naming ``what``."""
    if not isinstance(record, Mapping):
        raise RollerStateError(f"{what} must be a mapping, got {type(record).__name__}")
    missing = set(fields) - set(record)
    if missing:
        raise RollerStateError(f"{what} is missing field(s) {sorted(missing)}")
    extra = set(record) - set(fields)
    if extra:
        raise RollerStateError(f"{what} has unknown field(s) {sorted(map(str, extra))}")
    return record


def record_int(record: Mapping[str, Any], name: str, low: int = -_MAX_MS, high: int = _MAX_MS) -> int:
    """Return ``record[name]`` if it is an int (not bool) in ``low..high``; else raise RollerStateError naming it."""
    value = record[name]
    if value.__class__ is not int:
        raise RollerStateError(f"snapshot field {name!r} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise RollerStateError(f"snapshot field {name!r} must be in {low}..{high}, got {value}")
    return value  # type: ignore[no-any-return]
