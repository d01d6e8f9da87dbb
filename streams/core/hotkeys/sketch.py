"""Load measurement: sliding-window heavy hitters and partition counts per worker, merged.

1. Every worker instance feeds each event's *unsalted* key, and the source partition
   it was read from, into a :class:`SlidingSketch`, and every few hundred ms
   publishes its :meth:`~SlidingSketch.summary` (a :class:`SketchSummary`) to a
   control topic. Feed the real key, not ``key#i``: a split key must keep its full
   rate, or it would look light the moment it is split.
2. One decider keeps the latest summary of every instance and folds them with
   :func:`merge_summaries` into a :class:`MergedView`: per-key rates and per-partition
   rates. Instances see disjoint partitions, so both add up.
3. :class:`~streams.core.hotkeys.decider.BalanceDecider` turns the view into
   directory changes.

The sketch is Apache DataSketches' frequent-items sketch (a Misra-Gries variant), one
per time slice of the window. Its estimates are *upper bounds*: a key's true count is
never above its estimate, and never below it by more than ``max_error``. Every
estimate here keeps that direction: the decider never misses a key that is heavier
than it thinks, and may over-weight a key by at most the error bound.

Per-event cost is a dict increment: updates are counted exactly in a small dict and
flushed into the slice's sketch, with their weights, once it holds ``capacity``
distinct keys. Memory is bounded by ``slices`` sketches plus that dict, whatever the
number of distinct keys.

**What a worker reports is sized per partition** (:meth:`SlidingSketch.report`).
Events fed with their source partition (:meth:`SlidingSketch.add_pairs`) are counted
per (partition, key), and a summary lists, for every partition the instance owns,
the keys that carry at least ``min_share`` of an owned partition's mean load (at
most ``per_partition`` of them), added up per key. One global top-N is dominated by
the few keys of the busiest partitions and split keys; the decider needs, for each
partition above its aim, the keys that explain *that* partition's excess, and keys
lighter than a tenth of the tolerated excess cannot change a partition's balance on
their own (:func:`summary_size`). Cost at 1,000 partitions and 50 workers (20
partitions each, Zipf 1.1 over 10^6 keys at 10^6 events/s, target 1.10): a key must
carry 1 % of a partition's mean to be reported; measured by ``bench/bench_balance.py``,
a summary holds 150-300 items, 5-10 KB of JSON (``key-N`` keys; ~1.7x that with
36-character UUIDs), four times a second per worker, and the decider merges 50 of
them per round. The bound: at most ``per_partition × owned`` items (110 × 20 = 2,200
here) and never more than MAX_SUMMARY_ITEMS = 4,096 (~250 KB with UUID keys), so a
summary always fits a default 1 MB Kafka record. The sketch's error must stay under
that floor: ``capacity`` >= owned partitions / ``min_share`` (2,000 for 20 partitions
at 1 %; the default 4,096 covers up to ~40 owned partitions; beyond it the floor
rises to the sketch's error and light keys go unreported).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from types import MappingProxyType
from typing import Any, NamedTuple

from datasketches import frequent_items_error_type, frequent_strings_sketch

from streams.core.errors import HotKeyNoticeError, InvalidArgumentError
from streams.core.validate import require

try:  # the C loop behind Counter.update, without its per-call isinstance check
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - other Pythons

    def _count_elements(mapping: dict[str, int], iterable: Iterable[str]) -> None:
        for key in iterable:
            mapping[key] = mapping.get(key, 0) + 1

__all__ = [
    "MAX_SUMMARY_ITEMS",
    "MAX_SUMMARY_PARTITIONS",
    "MAX_KEY_CHARS",
    "SlidingSketch",
    "SketchSummary",
    "SummarySize",
    "MergedView",
    "merge_summaries",
    "summary_size",
]

#: Most (key, count) items a summary may carry; more is treated as hostile.
MAX_SUMMARY_ITEMS = 4096
#: Longest key (in characters) or instance id a summary may carry.
MAX_KEY_CHARS = 1024
#: Most partitions a summary may report counts for (the routing maps' partition limit).
MAX_SUMMARY_PARTITIONS = 100_000
#: Longest window a summary may claim, in seconds (one day).
MAX_WINDOW_S = 86_400.0
_INT64_MAX = 2**63 - 1
_NO_FALSE_NEGATIVES = frequent_items_error_type.NO_FALSE_NEGATIVES
_CATCH_UP = 1.05  # a window whose events cover 5 % more event time than its seconds holds a catch-up
_SEP = "\x1f"  # sketch item = "<partition>\x1f<key>" ("\x1f<key>" when the partition is unknown)


class SummarySize(NamedTuple):
    """How much one instance reports (see :func:`summary_size`): keys per owned partition, the
    share of an owned partition's mean load a key must carry, and the items of the whole summary."""

    per_partition: int
    min_share: float
    top: int


def summary_size(owned_partitions: int, balance_target: float) -> SummarySize:
    """What an instance owning ``owned_partitions`` reports for a decider aiming at ``balance_target``.

    A key counts when it carries at least ``(balance_target - 1) / 10`` of a partition's
    mean (1 % at 1.10): lighter keys cannot change a partition's balance by more than a
    tenth of the tolerated excess. A partition at the target holds at most
    ``balance_target / min_share`` such keys, so ``per_partition`` is that (at most 128),
    and the summary at most ``per_partition × owned`` items (at most MAX_SUMMARY_ITEMS).
    """
    min_share = max(1e-4, (balance_target - 1.0) / 10)
    per_partition = min(128, math.ceil(balance_target / min_share))
    top = max(1, min(MAX_SUMMARY_ITEMS, per_partition * max(1, owned_partitions)))
    return SummarySize(per_partition, min_share, top)


# --- the per-instance sketch ----------------------------------------------------------


class SlidingSketch:
    """Bounded-memory per-key event counts over a sliding window of ``window_s`` seconds.

    The window is a ring of ``slices`` time slices of ``window_s / slices`` seconds,
    aligned to multiples of the slice width (so instances agree on slice edges). A
    summary covers the current slice and the ``slices - 1`` before it: between
    ``window_s * (slices - 1) / slices`` and ``window_s`` seconds of traffic, reported
    as ``span_s`` so rates are honest. Each slice holds one frequent-items sketch of
    at least ``capacity`` items (DataSketches rounds up to ``0.75 * 2**lg``).

    Time never runs backwards: a ``now_s`` earlier than the current slice counts into
    the current slice. Not thread-safe; one sketch per consumer loop.

    Slices are cut by the reader's clock, so a reader that stalled and then caught up
    counts more traffic in a window than the window's seconds carried: its rates would
    read high, and only its partitions would look hot. Fed the events' own times
    (:meth:`add_event_time`), a summary reports as ``span_s`` the stretch of event time
    the window's records cover when that is longer (by more than 5 %, at most twice the
    window), so rates stay the traffic's. A reader's partitions need not lag alike (under a
    starved CPU one partition's fetch falls behind and catches up while the others keep
    up): fed each partition's event time (:meth:`add_partition_event_times`), a summary
    keeps the reader's span and scales down, partition by partition, the counts of a
    partition whose records cover more event time than that (its load and the keys
    listed on it), so only the partitions that caught up are corrected.
    """

    def __init__(self, window_s: float, slices: int = 5, capacity: int = 1024) -> None:
        """Create an empty sketch. Raises ConfigError naming a bad argument."""
        require(isinstance(window_s, (int, float)) and not isinstance(window_s, bool)
                 and 0 < window_s <= MAX_WINDOW_S, "window_s", f"a number in (0, {MAX_WINDOW_S:g}]", window_s)
        require(slices.__class__ is int and 1 <= slices <= 1000, "slices", "an int in [1, 1000]", slices)
        require(capacity.__class__ is int and 16 <= capacity <= 1_000_000, "capacity",
                 "an int in [16, 1000000]", capacity)
        self.window_s = float(window_s)
        self.slices = slices
        self.capacity = capacity
        self._slice_s = self.window_s / slices
        # DataSketches keeps at most 0.75 * 2**lg items; pick lg so that is >= capacity.
        self._lg = max(3, math.ceil(math.log2(capacity / 0.75)))
        self._sketch_items = (3 << self._lg) // 4
        self._ring = [frequent_strings_sketch(self._lg) for _ in range(slices)]
        self._epochs: list[int | None] = [None] * slices
        self._epoch: int | None = None
        self._first_epoch = 0
        self._edge = -math.inf  # when the current slice ends; add() advances past it
        self._current = self._ring[0]
        self._pending: dict[str, int] = {}
        # Events per source partition, one dict per slice like the sketches: the decider
        # balances partition loads, so it needs them measured over the same window.
        self._partition_ring: list[dict[int, int]] = [{} for _ in range(slices)]
        self._partition_current = self._partition_ring[0]
        self._rejected = 0
        self._event_hi: float | None = None  # the latest event time seen (seconds)
        self._event_start: list[float | None] = [None] * slices  # _event_hi when each slice began
        self._partition_event_hi: dict[int, float] = {}  # the latest event time seen per partition
        self._partition_event_start: list[dict[int, float]] = [{} for _ in range(slices)]  # per slice, as above

    @property
    def retained_items(self) -> int:
        """Items held right now: keys in every slice's sketch plus the pending dict."""
        return sum(s.num_active_items for s in self._ring) + len(self._pending)

    @property
    def max_retained_items(self) -> int:
        """An upper bound on :attr:`retained_items`, independent of the key count."""
        return self.slices * self._sketch_items + 2 * self.capacity

    @property
    def rejected(self) -> int:
        """Events dropped because their key was not a str DataSketches could encode."""
        return self._rejected

    def add(self, key: str, now_s: float, weight: int = 1) -> None:
        """Count ``weight`` events of ``key`` at time ``now_s`` (seconds, any epoch).

        Raises InvalidArgumentError if ``now_s`` is not finite or ``weight`` is not an int >= 1.
        A key that is not an encodable str is dropped at flush time and counted in
        :attr:`rejected`.
        """
        if not now_s < self._edge:
            self._advance(now_s)
        if weight.__class__ is not int or weight < 1:
            raise InvalidArgumentError(f"weight must be an int >= 1, got {weight!r}")
        pending = self._pending
        pending[key] = pending.get(key, 0) + weight
        if len(pending) >= self.capacity:
            self._flush()

    def add_partition(self, partition: int, now_s: float, weight: int = 1) -> None:
        """Count ``weight`` events read from source ``partition`` at time ``now_s``.

        Summaries report these counts so the decider knows every partition's load.
        Raises InvalidArgumentError if ``now_s`` is not finite.
        """
        if not now_s < self._edge:
            self._advance(now_s)
        current = self._partition_current
        current[partition] = current.get(partition, 0) + weight

    def add_pairs(self, pairs: Iterable[tuple[int, str]], now_s: float) -> None:
        """Count one event per ``(source partition, key)`` pair, all at time ``now_s``.

        Counted per partition, so :meth:`report` can name each partition's heavy keys.
        Partition loads are not counted here (see :meth:`add_partition`).
        """
        self.add_many(pairs, now_s)  # type: ignore[arg-type]  # tuples and str share the pending dict

    def add_event_time(self, now_s: float, event_s: float) -> None:
        """Note that events up to event time ``event_s`` (seconds) were read by ``now_s``.

        Only the latest matters (a late event's time changes nothing), and a time ahead of
        ``now_s`` counts as ``now_s``: a producer's clock that leaps ahead cannot stretch the
        span. Raises InvalidArgumentError if ``now_s`` is not finite; a non-finite
        ``event_s`` is ignored.
        """
        if not now_s < self._edge:
            self._advance(now_s)
        event_s = min(event_s, now_s)
        if math.isfinite(event_s) and (self._event_hi is None or event_s > self._event_hi):
            self._event_hi = event_s

    def add_partition_event_times(self, now_s: float, times: Mapping[int, float]) -> None:
        """Note, per source partition, that its events up to event time ``times[partition]``
        (seconds) were read by ``now_s``; as :meth:`add_event_time` does for the whole reader.
        Once fed, these replace the reader-wide correction. Raises InvalidArgumentError if
        ``now_s`` is not finite."""
        if not now_s < self._edge:
            self._advance(now_s)
        hi = self._partition_event_hi
        for partition, event_s in times.items():
            event_s = min(event_s, now_s)
            if math.isfinite(event_s) and event_s > hi.get(partition, -math.inf):
                hi[partition] = event_s

    def add_counts(self, counts: Mapping[tuple[int, str], int], now_s: float) -> None:
        """Count ``counts[(partition, key)]`` events per pair, all at time ``now_s`` (what
        :meth:`add_pairs` counts from a batch of events, already added up)."""
        if not now_s < self._edge:
            self._advance(now_s)
        pending, capacity = self._pending, self.capacity
        for pair, count in counts.items():
            pending[pair] = pending.get(pair, 0) + count  # type: ignore[call-overload]
            if len(pending) >= capacity:
                self._flush()

    def add_many(self, keys: Iterable[str], now_s: float) -> None:
        """Count one event per key in ``keys``, all at time ``now_s``; see :meth:`add`."""
        if not now_s < self._edge:
            self._advance(now_s)
        pending = self._pending
        chunk_size = self.capacity
        it = iter(keys)
        while chunk := list(islice(it, chunk_size)):  # chunks keep the pending dict < 2 * capacity
            _count_elements(pending, chunk)
            if len(pending) >= chunk_size:
                self._flush()

    def summary(self, now_s: float, top: int = 64, instance: str = "",
                partitions: Iterable[int] = (), *, per_partition: int | None = None,
                min_share: float = 0.0, backlog: int = 0) -> SketchSummary:
        """The window ending at ``now_s``: its total, its heaviest keys, its partitions' counts.

        Without ``per_partition``, the ``top`` heaviest keys of the window (counts added
        over partitions). With it, for every partition counted or named in ``partitions``,
        its at most ``per_partition`` heaviest keys that carry at least ``min_share`` of
        the mean partition count, added up per key, heaviest first, at most ``top``.
        Key counts are upper bounds on the listed traffic (see :class:`SketchSummary`);
        partition counts are exact, one per partition counted in the window or named in
        ``partitions`` (the ones this instance owns: a quiet partition reports 0, not
        nothing). Raises InvalidArgumentError if ``now_s`` is not finite, ConfigError if
        ``top`` is not in 1..MAX_SUMMARY_ITEMS, HotKeyNoticeError if ``instance`` is not a
        str of at most MAX_KEY_CHARS.
        """
        require(top.__class__ is int and 1 <= top <= MAX_SUMMARY_ITEMS, "top",
                 f"an int in [1, {MAX_SUMMARY_ITEMS}]", top)
        if not now_s < self._edge:
            self._advance(now_s)
        self._flush()
        assert self._epoch is not None
        oldest = self._epoch - self.slices + 1
        merged = frequent_strings_sketch(self._lg)
        partition_counts = dict.fromkeys(partitions, 0)
        for sketch, counts, epoch in zip(self._ring, self._partition_ring, self._epochs):
            if epoch is not None and epoch >= oldest:
                if not sketch.is_empty():
                    merged.merge(sketch)
                for partition, count in counts.items():
                    partition_counts[partition] = partition_counts.get(partition, 0) + count
        total = merged.total_weight
        first = max(oldest, self._first_epoch)
        span_s = min(self.window_s, max(self._slice_s, now_s - first * self._slice_s))
        scale = self._caught_up(first, span_s)  # partition -> its traffic's share of what was read
        if scale:
            raw = sum(partition_counts.values())
            for partition, factor in scale.items():
                if partition in partition_counts:
                    partition_counts[partition] = round(partition_counts[partition] * factor)
            total = round(total * sum(partition_counts.values()) / raw) if raw else total
        row_scale = {str(partition): factor for partition, factor in scale.items()}  # by an item's partition text
        max_error = merged.get_upper_bound("") - merged.get_lower_bound("")  # the sketch's offset
        owned = len(partition_counts) or 1
        floor = max(1, math.ceil(min_share * sum(partition_counts.values()) / owned))
        # (item, estimate, lower, upper), heaviest first; with per_partition, only rows that can reach the floor
        rows = merged.get_frequent_items(_NO_FALSE_NEGATIVES, 0 if per_partition is None else floor - 1)
        per_key: dict[str, int] = {}
        if per_partition is None:
            for item, _, _, upper in rows:
                where, key = item.split(_SEP, 1)
                if where in row_scale:
                    upper = round(upper * row_scale[where])
                per_key[key] = per_key.get(key, 0) + upper
            unreported = max_error
        else:
            taken: dict[str, int] = {}
            unreported = max(max_error, floor - 1)
            for item, _, _, upper in rows:
                where, key = item.split(_SEP, 1)
                if upper < floor:
                    break  # rows are heaviest first
                if where in row_scale:
                    upper = round(upper * row_scale[where])
                    if upper < floor:
                        continue
                if taken.get(where, 0) >= per_partition:
                    unreported = max(unreported, upper)
                    continue
                taken[where] = taken.get(where, 0) + 1
                per_key[key] = per_key.get(key, 0) + upper
        ranked = sorted(per_key.items(), key=lambda kv: (-kv[1], kv[0]))
        if len(ranked) > top:
            unreported = max(unreported, ranked[top][1])
        began = self._event_start[first % self.slices]
        if not self._partition_event_hi and began is not None and self._event_hi is not None:
            covered = self._event_hi - began  # event time the window's records advanced through
            if covered > span_s * _CATCH_UP:
                span_s = min(covered, 2 * span_s)
        return SketchSummary(
            instance=instance, window_s=self.window_s, span_s=span_s, total=total,
            items=tuple((key, min(count, total)) for key, count in ranked[:top]),
            max_error=min(max_error, total), unreported_bound=min(unreported, total), at_s=float(now_s),
            partition_counts=tuple(sorted(partition_counts.items())), backlog=backlog,
        )

    def _caught_up(self, first: int, span_s: float) -> dict[int, float]:
        """For each partition whose records in the window beginning at slice ``first`` cover more
        event time than ``span_s`` (by over 5 %; at most twice it counts), ``span_s`` over that:
        the share of what was read there that the window's seconds carried."""
        starts = self._partition_event_start[first % self.slices]
        out: dict[int, float] = {}
        for partition, hi in self._partition_event_hi.items():
            began = starts.get(partition)
            if began is not None and hi - began > span_s * _CATCH_UP:
                out[partition] = span_s / min(hi - began, 2 * span_s)
        return out

    def report(self, now_s: float, *, instance: str, partitions: Iterable[int],
               balance_target: float, backlog: int = 0) -> SketchSummary:
        """The summary a worker publishes: :meth:`summary` sized by :func:`summary_size` for the
        partitions it owns and the decider's balance target; ``backlog`` the records of those
        partitions not read yet. Raises as :meth:`summary`."""
        owned = sorted(partitions)
        size = summary_size(len(owned), balance_target)
        return self.summary(now_s, size.top, instance, owned, per_partition=size.per_partition,
                            min_share=size.min_share, backlog=backlog)

    def _advance(self, now_s: float) -> None:
        if not math.isfinite(now_s):
            raise InvalidArgumentError(f"now_s must be a finite number of seconds, got {now_s!r}")
        epoch = math.floor(now_s / self._slice_s)
        if self._epoch is not None and epoch <= self._epoch:
            return  # float rounding at a slice edge, or time stepped back: stay in this slice
        self._flush()  # pending counts belong to the slice we are leaving
        if self._epoch is None:
            self._first_epoch = epoch
            fresh = range(epoch - self.slices + 1, epoch + 1)
        else:
            fresh = range(max(self._epoch + 1, epoch - self.slices + 1), epoch + 1)
        starts = dict(self._partition_event_hi)  # read-only once taken: the fresh slices share it
        for e in fresh:
            slot = e % self.slices
            self._ring[slot] = frequent_strings_sketch(self._lg)
            self._partition_ring[slot] = {}
            self._epochs[slot] = e
            self._event_start[slot] = self._event_hi
            self._partition_event_start[slot] = starts
        self._epoch = epoch
        self._current = self._ring[epoch % self.slices]
        self._partition_current = self._partition_ring[epoch % self.slices]
        self._edge = (epoch + 1) * self._slice_s

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        update = self._current.update
        sep = _SEP
        for key, count in pending.items():
            if key.__class__ is tuple:  # (partition, key) from add_pairs
                partition, key = key
                item = f"{partition}{sep}{key}" if key.__class__ is str else None
            else:
                item = sep + key if key.__class__ is str else None
            if item is None:
                self._rejected += count  # not a str
                continue
            try:
                update(item, count)
            except (TypeError, UnicodeError):  # a str with lone surrogates
                self._rejected += count
        pending.clear()


# --- summaries on the control topic ---------------------------------------------------


@dataclass(frozen=True)
class SketchSummary:
    """One instance's view of its window, as published on the control topic.

    ``total`` events arrived in the last ``span_s`` seconds of traffic (``span_s`` <=
    ``2 × window_s``: more than the window when the instance caught up with a backlog,
    see :class:`SlidingSketch`).
    ``items`` are (key, count) pairs, heaviest first, where each count is an *upper
    bound* on the key's true count (never more than ``max_error`` above it); a key
    not listed had at most ``unreported_bound`` events (>= ``max_error``). ``at_s``
    is when the summary was taken. ``partition_counts`` are (partition, events) pairs,
    exact, for the source partitions this instance consumed in the window (empty from
    an older instance that did not report them). ``backlog`` is how many records of
    its partitions the instance had not read yet when it took the summary (0 from an
    older instance): counts of a consumer catching up describe its backlog, not the
    traffic.

    Construction validates every field like untrusted input and raises
    HotKeyNoticeError naming it: counts are ints in 0..total (bool is not an int),
    floats finite, at most MAX_SUMMARY_ITEMS items, keys distinct str of
    1..MAX_KEY_CHARS characters.
    """

    instance: str
    window_s: float
    span_s: float
    total: int
    items: tuple[tuple[str, int], ...]
    max_error: int
    unreported_bound: int
    at_s: float
    partition_counts: tuple[tuple[int, int], ...] = ()
    backlog: int = 0

    def __post_init__(self) -> None:
        _text(self.instance, "instance", 0)
        window_s = _number(self.window_s, "window_s", MAX_WINDOW_S, positive=True)
        span_s = _number(self.span_s, "span_s", 2 * window_s, positive=True)
        total = _count(self.total, "total", _INT64_MAX)
        max_error = _count(self.max_error, "max_error", total)
        unreported = _count(self.unreported_bound, "unreported_bound", total)
        if unreported < max_error:
            raise HotKeyNoticeError(f"sketch summary field 'unreported_bound' must be >= max_error, got {unreported}")
        pairs = _pairs(self.items, "items", MAX_SUMMARY_ITEMS, ("key", "count"),
                       lambda key, count: (_text(key, "items.key", 1), _count(count, "items.count", total)))
        partition_pairs = _pairs(
            self.partition_counts, "partition_counts", MAX_SUMMARY_PARTITIONS, ("partition", "count"),
            lambda p, count: (_count(p, "partition_counts.partition", MAX_SUMMARY_PARTITIONS - 1),
                              _count(count, "partition_counts.count", _INT64_MAX)))
        _count(self.backlog, "backlog", _INT64_MAX)
        for name, value in (("window_s", window_s), ("span_s", span_s), ("items", tuple(pairs)),
                            ("partition_counts", tuple(partition_pairs)),
                            ("at_s", _number(self.at_s, "at_s", math.inf))):
            object.__setattr__(self, name, value)

    def to_record(self) -> dict[str, Any]:
        """The summary as a plain dict (Avro/JSON friendly): items become ``{"key", "count"}`` dicts."""
        return {
            "instance": self.instance, "window_s": self.window_s, "span_s": self.span_s, "total": self.total,
            "items": [{"key": key, "count": count} for key, count in self.items],
            "max_error": self.max_error, "unreported_bound": self.unreported_bound, "at_s": self.at_s,
            "partition_counts": [{"partition": p, "count": c} for p, c in self.partition_counts],
            "backlog": self.backlog,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SketchSummary:
        """Build a summary from a decoded record; the inverse of :meth:`to_record`.

        Raises HotKeyNoticeError if ``record`` is not a mapping with exactly the
        fields of :meth:`to_record` (``partition_counts`` may be missing: an older
        instance), or any value has the wrong type or range.
        """
        if not isinstance(record, Mapping):
            raise HotKeyNoticeError(f"sketch summary must be a mapping, got {type(record).__name__}")
        if not _REQUIRED_SUMMARY_FIELDS <= record.keys() <= _SUMMARY_FIELDS:
            missing, extra = _REQUIRED_SUMMARY_FIELDS - record.keys(), record.keys() - _SUMMARY_FIELDS
            raise HotKeyNoticeError(f"sketch summary fields wrong: missing {sorted(missing)}, "
                                    f"unknown {sorted(map(str, extra))}")
        items = record["items"]
        if items.__class__ not in (list, tuple) or len(items) > MAX_SUMMARY_ITEMS:
            raise HotKeyNoticeError(f"sketch summary field 'items' must be a list of at most {MAX_SUMMARY_ITEMS}")
        pairs = []
        for item in items:
            if not isinstance(item, Mapping) or item.keys() != {"key", "count"}:
                raise HotKeyNoticeError("sketch summary field 'items' must hold {'key', 'count'} records")
            pairs.append((item["key"], item["count"]))
        counts = record.get("partition_counts", ())
        if counts.__class__ not in (list, tuple) or len(counts) > MAX_SUMMARY_PARTITIONS:
            raise HotKeyNoticeError(f"sketch summary field 'partition_counts' must be a list of at most "
                                    f"{MAX_SUMMARY_PARTITIONS}")
        partition_pairs = []
        for item in counts:
            if not isinstance(item, Mapping) or item.keys() != {"partition", "count"}:
                raise HotKeyNoticeError("sketch summary field 'partition_counts' must hold {'partition', 'count'} records")
            partition_pairs.append((item["partition"], item["count"]))
        fields = {name: record[name] for name in _REQUIRED_SUMMARY_FIELDS}
        fields["items"] = tuple(pairs)
        fields["partition_counts"] = tuple(partition_pairs)
        fields["backlog"] = record.get("backlog", 0)
        return cls(**fields)


_SUMMARY_FIELDS = frozenset(SketchSummary.__dataclass_fields__)
_REQUIRED_SUMMARY_FIELDS = _SUMMARY_FIELDS - {"partition_counts", "backlog"}




def _pairs(value: Any, name: str, limit: int, names: tuple[str, str],
           check: Callable[[Any, Any], tuple[Any, Any]]) -> tuple[tuple[Any, Any], ...]:
    """Validate a summary field of at most ``limit`` distinct-first pairs, each through ``check``."""
    shape = f"({names[0]}, {names[1]})"
    if value.__class__ not in (tuple, list) or len(value) > limit:
        raise HotKeyNoticeError(f"sketch summary field {name!r} must be a sequence of at most {limit} {shape} pairs")
    out = []
    for item in value:
        if item.__class__ not in (tuple, list) or len(item) != 2:
            raise HotKeyNoticeError(f"sketch summary field {name!r} must hold {shape} pairs")
        out.append(check(item[0], item[1]))
    if len({first for first, _ in out}) != len(out):
        raise HotKeyNoticeError(f"sketch summary field {name!r} repeats a {names[0]}")
    return tuple(out)


def _count(value: Any, name: str, high: int) -> int:
    if value.__class__ is not int or not 0 <= value <= high:
        raise HotKeyNoticeError(f"sketch summary field {name!r} must be an int in 0..{high}, got {value!r:.80}")
    return value  # type: ignore[no-any-return]


def _number(value: Any, name: str, high: float, positive: bool = False) -> float:
    if value.__class__ not in (int, float) or not (math.isfinite(value) and 0 <= value <= high) or (
            positive and value == 0):
        low = "(0" if positive else "[0"
        raise HotKeyNoticeError(f"sketch summary field {name!r} must be a finite number in {low}, {high}], "
                                f"got {value!r:.80}")
    return float(value)


def _text(value: Any, name: str, min_len: int) -> str:
    if value.__class__ is not str or not min_len <= len(value) <= MAX_KEY_CHARS:
        raise HotKeyNoticeError(f"sketch summary field {name!r} must be a str of {min_len}..{MAX_KEY_CHARS} "
                                f"characters, got {type(value).__name__}")
    return value  # type: ignore[no-any-return]


# --- merging instances --------------------------------------------------------------


@dataclass(frozen=True)
class MergedView:
    """Every instance's latest window, added up, as rates (events/s).

    Instances publish at different moments, so each count is divided by its own
    ``span_s`` before adding. ``rates[key]`` adds the key's reported counts (each an
    upper bound) over the instances that listed it; an instance that did not list it
    saw at most its ``unreported_bound`` of it (per partition, for a summary sized by
    :meth:`SlidingSketch.report`), which is not added (see :func:`merge_summaries`).
    A key not in ``rates`` has a rate of at most ``unreported_rate``. ``window_s`` is the largest window among the merged
    summaries (they may differ; rates make them comparable). ``partition_rates`` adds
    up the instances' partition counts (instances consume disjoint partitions), one
    rate per partition some instance reported. ``window_start_s`` is when the oldest
    merged window began (``at_s - span_s``, least over the summaries; None when unknown):
    traffic before it is in no count of the view. ``partition_floors[p]`` is the
    unreported rate of the instance that reported partition p: a key it did not list
    had at most that rate there.
    """

    instances: tuple[str, ...]
    window_s: float
    total: int
    total_rate: float
    rates: Mapping[str, float]
    unreported_rate: float
    at_s: float
    partition_rates: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    window_start_s: float | None = None
    partition_floors: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))

    def rate(self, key: str) -> float:
        """The rate of ``key``: ``rates[key]``, else the bound ``unreported_rate``."""
        return self.rates.get(key, self.unreported_rate)


def merge_summaries(summaries: Iterable[SketchSummary], *, now_s: float | None = None,
                    max_age_s: float | None = None) -> MergedView:
    """Fold instance summaries into one view; see :class:`MergedView`.

    Summaries are keyed by ``instance``: of two with the same id, the later ``at_s``
    wins. With ``now_s`` and ``max_age_s``, summaries older than ``now_s - max_age_s``
    are dropped (a dead instance must not keep its keys hot). An empty input gives an
    empty view. Raises nothing for valid summaries.
    """
    latest: dict[str, SketchSummary] = {}
    for summary in summaries:
        seen = latest.get(summary.instance)
        if seen is None or summary.at_s >= seen.at_s:
            latest[summary.instance] = summary
    if now_s is not None and max_age_s is not None:
        latest = {i: s for i, s in latest.items() if s.at_s >= now_s - max_age_s}
    unreported_rate = sum(s.unreported_bound / s.span_s for s in latest.values())
    # rate(key) = sum over the instances that list it of count / span. Adding the other
    # instances' unreported bounds would keep it an upper bound, but at 50 instances it
    # inflates every key that lives on one partition by 49 bounds: the decider would then
    # evict the wrong keys. A key lives where the directory or its hash sends it, so the
    # instances that own those partitions list it when it matters there.
    rates: dict[str, float] = {}
    for s in latest.values():
        for key, count in s.items:
            rates[key] = rates.get(key, 0.0) + count / s.span_s
    partition_rates: dict[int, float] = {}
    for s in latest.values():
        for partition, count in s.partition_counts:
            partition_rates[partition] = partition_rates.get(partition, 0.0) + count / s.span_s
    ordered = sorted(latest)
    return MergedView(
        instances=tuple(ordered),
        window_s=max((s.window_s for s in latest.values()), default=0.0),
        total=sum(s.total for s in latest.values()),
        total_rate=sum(s.total / s.span_s for s in latest.values()),
        rates=MappingProxyType({k: max(r, 0.0) for k, r in rates.items()}),
        unreported_rate=unreported_rate,
        at_s=max((s.at_s for s in latest.values()), default=0.0),
        partition_rates=MappingProxyType(partition_rates),
        window_start_s=min((s.at_s - s.span_s for s in latest.values()), default=None),
        partition_floors=MappingProxyType({p: s.unreported_bound / s.span_s for s in latest.values()
                                           for p, _ in s.partition_counts}),
    )
