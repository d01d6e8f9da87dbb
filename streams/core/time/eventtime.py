"""Event-time vocabulary: what the roller tells its callers, and the checks it shares.

The first part names what the bucket roller (:mod:`streams.core.time.roller`) tells its
callers: where an event belongs (:class:`Placement`), what a closing bucket reports
(:class:`ClosedBucket`) and the conservation counters (:class:`Counts`). The faust
worker imports these without importing the state machine. The checks below it are
the one place where the roller, the watermark tracker and the topic planner validate
times, partitions and settings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NamedTuple

from streams.core.errors import InvalidArgumentError, InvalidBucketError
from streams.core.time.buckets import Bucket
from streams.core.validate import require_int

__all__ = [
    "ClosedBucket",
    "Counts",
    "Placement",
    "PlacementKind",
    "REASON_BEFORE_MIN",
    "REASON_FUTURE",
    "REASON_LATE",
    "REASON_TOO_OLD",
    "check_ms",
    "check_partition",
    "utc_text",
]

REASON_LATE = "bucket closed"
REASON_TOO_OLD = "bucket beyond retention"
REASON_FUTURE = "timestamp in the future"
REASON_BEFORE_MIN = "timestamp before the minimum event time"


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
    is the low watermark the verdict used (None before any is known). ``lateness_ms``
    is, for LATE and TOO_OLD, how far the watermark had passed the bucket's close
    time (0 if it had not: a bucket closed before a restart). ``reason`` is "" for
    ON_TIME, else one of the ``REASON_*`` constants.
    """

    kind: PlacementKind
    bucket: Bucket | None
    watermark_ms: int | None
    lateness_ms: int
    reason: str


class Counts(NamedTuple):
    """Event counters. ``received == on_time + late + too_old + dead_lettered`` always."""

    received: int
    on_time: int
    late: int
    too_old: int
    dead_lettered: int


@dataclass(frozen=True)
class ClosedBucket:
    """A bucket at its close (emit-on-close), as :meth:`BucketRoller.advance` returns it.

    ``late_events`` are the events that arrived after the watermark passed the close
    time but before this close; ``dead_letters`` those attributed to the bucket via
    :meth:`BucketRoller.count_dead_letter` while it was open; ``closed_at_ms`` the
    wall clock and ``watermark_ms`` the low watermark at close.
    """

    bucket: Bucket
    late_events: int
    dead_letters: int
    closed_at_ms: int
    watermark_ms: int


# -- checks shared by the roller, the watermark tracker and the topic planner -------

_MAX_MS = 2**62  # far beyond any real clock; keeps the arithmetic on times sane


def utc_text(ms: int) -> str:
    """``ms`` since the Unix epoch as ISO 8601 UTC to the second, ``2026-12-04T04:30:00Z``."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def check_partition(partition: object) -> int:
    """Return ``partition`` as a plain int if it is an int (not bool) >= 0; else raise InvalidArgumentError naming it.

    Int subclasses (an ``IntEnum``) are converted; everything else gets
    :func:`~streams.core.validate.require_int`'s message.
    """
    if isinstance(partition, int) and not isinstance(partition, bool) and partition >= 0:
        return int(partition)
    return require_int("partition", partition, 0, error=InvalidArgumentError)
