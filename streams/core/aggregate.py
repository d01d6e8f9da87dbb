"""Exact, mergeable count / sum / min / max of an event measure.

A hot key is split into k salted sub-keys; stage 1 aggregates each sub-key, stage 2
merges the k partials per real key. Float addition is not associative, so adding the
partials' rounded sums in arrival order would give results that depend on how the
key was split and which partial came first. :class:`Stats` avoids that trap by
keeping its sum *exactly*, as a short list of floats whose exact (unrounded) total is
the true sum, the "partials" of Shewchuk's algorithm behind :func:`math.fsum`.
Merging adds exact sums, and :attr:`Stats.sum` rounds once, correctly, at the end,
so every split, order and grouping gives the bit-identical result of aggregating the
unsalted stream directly.

The hot path appends a value to a buffer; every ``_FOLD_AT`` values the buffer is
folded into the partials by a few :func:`math.fsum` calls (C speed). Signed zeros
are read back as ``+0.0``, so results never depend on the order in which ``0.0``
and ``-0.0`` arrived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from streams.core.errors import InvalidArgumentError, SerializationError
from streams.core.validate import require_int

__all__ = ["Stats", "MAX_PARTIALS"]

#: Most partials a record may carry. Canonical partials of a sum of doubles never
#: need more than about 40 (the exponent range over 53-bit mantissas).
MAX_PARTIALS = 64
_FOLD_AT = 1024  # buffered values before folding into the partials
_INF = math.inf
_INT64_MAX = 2**63 - 1
_FIELDS = frozenset({"count", "measured", "sum", "partials", "min", "max"})


def _canonical(terms: list[float]) -> list[float]:
    """Non-overlapping floats, largest first, whose exact sum is the exact sum of ``terms``.

    Each step takes the correctly rounded remainder, so the result depends only on
    the exact sum, not on the order or grouping of ``terms``. Raises OverflowError
    if an intermediate sum leaves the float range. ``terms`` is consumed.
    """
    fsum = math.fsum
    out: list[float] = []
    while remainder := fsum(terms):  # stops at (+/-) 0.0: the terms are used up exactly
        out.append(remainder)
        terms.append(-remainder)
    return out


class Stats:
    """Count, exact sum, min and max of a float measure; mergeable in any order.

    ``count`` counts events; ``measured`` counts those that carried a value (``add(None)``
    counts the event but leaves sum, min and max alone), so ``mean = sum / measured``.
    ``sum`` is the correctly rounded exact sum; ``min`` and ``max`` are None until a
    value arrives. Values must be finite: NaN and +/-inf are rejected (the event is
    not counted), so a bad measure goes to the dead letters rather than poisoning a
    bucket. A sum whose magnitude nears the float maximum (about 1.8e308) raises
    OverflowError instead of rounding to infinity; values up to 1e300 in streams of
    any realistic length never get there.

    Mutable on purpose (stage 1 calls :meth:`add` per event); :meth:`merge` returns a
    new Stats and changes neither operand. Equality compares count, measured, the
    exact sum, min and max.
    """

    __slots__ = ("_nones", "_folded", "_partials", "_buffer", "_min", "_max")

    def __init__(self) -> None:
        """An empty Stats: no events; see :meth:`empty`."""
        # count = _nones + measured; measured = _folded + len(_buffer). Deriving both keeps
        # the hot path to one append per value.
        self._nones = 0
        self._folded = 0
        self._partials: list[float] = []  # canonical: see _canonical
        self._buffer: list[float] = []    # values not yet folded into _partials
        self._min = _INF                  # of folded values only; properties add the buffer
        self._max = -_INF

    @classmethod
    def empty(cls) -> Stats:
        """An empty Stats (count 0, sum 0.0, min and max None)."""
        return cls()

    # --- the hot path -------------------------------------------------------------

    def add(self, value: float | None) -> None:
        """Count one event and, unless ``value`` is None, its measure.

        An int or a float subclass is converted to the nearest float. Raises ValueError for NaN or
        +/-inf, InvalidArgumentError for a non-number (bool included), OverflowError for an int
        beyond the float range or a sum that leaves it; in every case nothing is counted.
        """
        if value is None:
            self._nones += 1
            return
        if value.__class__ is not float:
            value = _as_float(value)
        if value - value:  # NaN for NaN and +/-inf, 0.0 for every finite value
            raise InvalidArgumentError(f"measure must be a finite float, got {value!r}")
        buffer = self._buffer
        buffer.append(value)
        if len(buffer) >= _FOLD_AT:
            try:
                self._fold()
            except OverflowError:
                buffer.pop()
                raise

    def _fold(self) -> None:
        buffer = self._buffer
        if not buffer:
            return
        partials = _canonical(self._partials + buffer)  # may raise OverflowError: nothing changed yet
        low, high = min(buffer), max(buffer)
        self._partials = partials
        self._folded += len(buffer)
        self._min = low if low < self._min else self._min
        self._max = high if high > self._max else self._max
        buffer.clear()

    # --- reading --------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Events counted, with or without a measure."""
        return self._nones + self._folded + len(self._buffer)

    @property
    def measured(self) -> int:
        """Events that carried a measure."""
        return self._folded + len(self._buffer)

    @property
    def sum(self) -> float:
        """The exact sum of the measures, correctly rounded; 0.0 when there are none.

        Raises OverflowError if the exact sum is beyond the float range.
        """
        return math.fsum(self._partials + self._buffer) + 0.0  # + 0.0 turns -0.0 into 0.0

    @property
    def min(self) -> float | None:
        """The smallest measure, or None if there is none."""
        if not self.measured:
            return None
        low = min(self._buffer, default=_INF)
        return (low if low < self._min else self._min) + 0.0

    @property
    def max(self) -> float | None:
        """The largest measure, or None if there is none."""
        if not self.measured:
            return None
        high = max(self._buffer, default=-_INF)
        return (high if high > self._max else self._max) + 0.0

    @property
    def mean(self) -> float | None:
        """``sum / measured``, or None if there is no measure."""
        measured = self.measured
        return self.sum / measured if measured else None

    @property
    def partials(self) -> tuple[float, ...]:
        """The canonical partials: non-overlapping floats, largest first, whose exact sum is the sum.

        Equal exact sums give equal tuples. Raises OverflowError like :attr:`sum`.
        """
        self._fold()
        return tuple(self._partials)

    # --- merging ----------------------------------------------------------------------

    def merge(self, other: Stats) -> Stats:
        """A new Stats of both operands' events; exact, so any merge order gives equal results.

        Raises InvalidArgumentError if ``other`` is not a Stats, OverflowError if the merged sum
        leaves the float range.
        """
        if not isinstance(other, Stats):
            raise InvalidArgumentError(f"can only merge a Stats, got {type(other).__name__}")
        merged = Stats()
        merged._partials = _canonical(self._partials + self._buffer + other._partials + other._buffer)
        merged._nones = self._nones + other._nones
        merged._folded = self.measured + other.measured
        merged._min = min(self._min, other._min, *self._buffer, *other._buffer)
        merged._max = max(self._max, other._max, *self._buffer, *other._buffer)
        return merged

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stats):
            return NotImplemented
        return (self.count, self.measured, self.partials, self.min, self.max) == (
            other.count, other.measured, other.partials, other.min, other.max)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Stats(count={self.count}, measured={self.measured}, sum={self.sum!r}, min={self.min!r}, max={self.max!r})"

    # --- records ----------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """A plain dict: count, measured, sum (rounded, for readers), partials (exact, for merging), min, max."""
        partials = list(self.partials)
        return {"count": self.count, "measured": self.measured, "sum": self.sum, "partials": partials,
                "min": self.min, "max": self.max}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Stats:
        """Rebuild a Stats from :meth:`to_record` output that came over the wire.

        Validates like untrusted input and raises SerializationError naming the
        field: exactly the fields of :meth:`to_record`; ``count`` an int in
        0..2**63-1 and ``measured`` in 0..count (bool is not an int); at most
        MAX_PARTIALS finite floats; ``sum`` equal to the rounded sum of the partials;
        ``min`` <= ``max`` finite floats, both None exactly when ``measured`` is 0,
        and then the partials sum to zero.
        """
        if not isinstance(record, Mapping):
            raise SerializationError(f"stats record must be a mapping, got {type(record).__name__}")
        if record.keys() != _FIELDS:
            missing, extra = _FIELDS - record.keys(), record.keys() - _FIELDS
            raise SerializationError(f"stats record fields wrong: missing {sorted(missing)}, "
                                     f"unknown {sorted(map(str, extra))}")
        count = _record_int(record, "count", _INT64_MAX)
        measured = _record_int(record, "measured", count)
        raw = record["partials"]
        if raw.__class__ not in (list, tuple) or len(raw) > MAX_PARTIALS:
            raise SerializationError(f"stats record field 'partials' must be a list of at most {MAX_PARTIALS} floats")
        terms = [_record_float(value, "partials") for value in raw]
        try:
            partials = _canonical(terms)
        except OverflowError:
            raise SerializationError("stats record field 'partials' sums beyond the float range") from None
        total = math.fsum(partials) + 0.0
        given = _record_float(record["sum"], "sum")
        if given != total:
            raise SerializationError(f"stats record field 'sum' is {given!r} but the partials sum to {total!r}")
        low, high = record["min"], record["max"]
        if measured == 0:
            if low is not None or high is not None or partials:
                raise SerializationError("stats record with measured = 0 must have min and max None and sum 0")
        else:
            low, high = _record_float(low, "min"), _record_float(high, "max")
            if not low <= high:
                raise SerializationError(f"stats record field 'min' ({low!r}) is above 'max' ({high!r})")
        stats = cls()
        stats._nones, stats._folded, stats._partials = count - measured, measured, partials
        if measured:
            stats._min, stats._max = low, high
        return stats


def _as_float(value: object) -> float:
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        return float(value)  # a float subclass (numpy.float64) or an int; OverflowError beyond the float range
    raise InvalidArgumentError(f"measure must be a float, an int or None, got {type(value).__name__}")


def _record_int(record: Mapping[str, Any], name: str, high: int) -> int:
    return require_int(f"stats record field {name!r}", record[name], 0, high, SerializationError)


def _record_float(value: Any, name: str) -> float:
    if value.__class__ is int:
        value = float(value) if -(2**1023) < value < 2**1023 else _INF
    if value.__class__ is not float or not -_INF < value < _INF:
        raise SerializationError(f"stats record field {name!r} must be a finite float, got {value!r:.80}")
    return value  # type: ignore[no-any-return]
