"""The fleet, simulated: per-worker sketches, summaries, merge and decider, window after window.

``streams simulate`` runs this by default. It is the live pipeline without Kafka, from
the same code with the same information at the same pace:

* Traffic is drawn from a :class:`~streams.core.simulate.Workload` at ``rate`` events/s,
  one tick (a sketch slice, ``window_s / 5``) at a time: a key's count in a tick is
  Poisson (keys expecting at least 20 events are drawn one by one, normal
  approximation; the rest of the events are drawn by weight), so the decider faces the
  counting noise a real stream has. With ``rotate_s`` the hot set rotates: every
  ``rotate_s`` seconds the ranks are dealt to other keys, and the keys that were hot go
  quiet. With ``ramp_s`` a new key (number ``keys``) grows from nothing to half the
  traffic over ``ramp_s`` seconds (a slow ramp), the others sharing the rest.
* Every event goes where producers send it: its key's directory entry (a split key's
  events spread evenly at random over its pieces, as salts from event IDs do), else its
  hash home under the routing map's placement.
* Partition ``p`` is owned by worker ``p % workers``. Each worker feeds its own
  :class:`~streams.core.hotkeys.sketch.SlidingSketch` with (partition, key) counts and
  partition loads, and after each tick publishes :meth:`~streams.core.hotkeys.sketch.SlidingSketch.report`,
  exactly what :class:`streams.worker.processor.EventProcessor` publishes. A
  :class:`~streams.core.hotkeys.balancer.BalanceLoop` (the worker's own decider loop)
  takes every summary; its decisions reach the producers ``lag_s`` later (the notice's
  trip through the hot-keys topic and the workers' consumer lag), counted in whole
  ticks: with the default of one second, the tick after a decision is still routed the
  old way, as a live fleet routes the records already on their way.
* A worker notes, per partition, how far the event time it read got (the end of the
  tick it read last), as stage 1 does from its watermark tracker. With ``stall`` (a
  chance per worker and tick) a worker starved of CPU reads only half of its
  partitions that tick, chosen at random; the others' events wait and are read the
  tick after with its own, as a lagging fetch catches up. A catch-up that straddles a
  window's start puts more than a window of traffic in it: the event times let the
  sketch correct that partition, as in the fleet.
* ``exact=True`` skips sketches and summaries: the loop is handed the exact counts of
  the last window (the same noise, none of the summaries' loss).

Per window the report has the **measured** max/mean (what the decider last saw), the
**true** max/mean (the expected loads, from the key weights, under the directory
published by the end of the window: free of sampling noise), and the directory changes.
Pure: no Kafka, no output.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from streams.core.hotkeys.balancer import BalanceLoop
from streams.core.hotkeys.decider import BalanceDecider, BalancePolicy, max_over_mean
from streams.core.hotkeys.sketch import MergedView, SlidingSketch
from streams.core.routing.hashing import canonical_key
from streams.core.routing.placement import make_placer
from streams.core.simulate import Workload
from streams.core.validate import require

__all__ = ["FleetReport", "FleetWindow", "simulate_fleet"]

_SLICES = 5  # the worker's SlidingSketch default: a tick is one slice
_HEAVY_EVENTS = 20.0  # keys expecting at least this many events in a tick are drawn one by one


@dataclass(frozen=True)
class FleetWindow:
    """One window of the simulated fleet.

    ``measured`` the max/mean of partition rates the decider last saw (None before every
    partition was reported); ``true`` the max/mean of the expected loads under the
    directory published by the window's end; ``changes`` directory changes in the window
    (``placed`` + ``retired``); ``directory`` keys in that directory; ``touched`` distinct
    keys changed since the start; ``summary_items`` / ``summary_bytes`` the largest
    summary any worker published in the window (items, and its JSON size).
    """

    index: int
    measured: float | None
    true: float
    changes: int
    placed: int
    retired: int
    directory: int
    touched: int
    summary_items: int
    summary_bytes: int

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FleetReport:
    """What :func:`simulate_fleet` found: the setup and one :class:`FleetWindow` per window.

    ``hash_only`` is the true max/mean with an empty directory at the start; ``distinct_keys``
    the keys that occurred at least once; ``lag_s`` the time decisions took to reach the producers.
    """

    source: str
    partitions: int
    workers: int
    rate: float
    window_s: float
    exact: bool
    policy: BalancePolicy
    hash_only: float
    distinct_keys: int
    windows: tuple[FleetWindow, ...]
    lag_s: float = 0.0
    stall: float = 0.0

    @property
    def touched(self) -> int:
        """Distinct keys the directory changed over the run."""
        return self.windows[-1].touched if self.windows else 0

    @property
    def touched_fraction(self) -> float:
        """:attr:`touched` as a share of the distinct keys."""
        return self.touched / self.distinct_keys if self.distinct_keys else 0.0

    def settled_by(self, target: float) -> int | None:
        """The first window (1-based) from which the true max/mean stays at or under ``target``; None if never."""
        first = None
        for w in self.windows:
            if w.true <= target:
                first = w.index if first is None else first
            else:
                first = None
        return first

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict (``policy``: the decider's knobs the run used)."""
        return {"source": self.source, "partitions": self.partitions, "workers": self.workers, "rate": self.rate,
                "window_s": self.window_s, "lag_s": self.lag_s, "stall": self.stall, "exact": self.exact,
                "policy": dataclasses.asdict(self.policy), "hash_only": self.hash_only,
                "distinct_keys": self.distinct_keys, "touched_keys": self.touched,
                "touched_fraction": self.touched_fraction,
                "windows": [w.to_record() for w in self.windows]}


def simulate_fleet(
    workload: Workload,
    *,
    partitions: int,
    workers: int = 4,
    windows: int = 9,
    rate: float = 10_000.0,
    window_s: float = 5.0,
    policy: BalancePolicy | None = None,
    placement: str = "mod",
    hash: str = "murmur2",
    capacity: int = 4096,
    min_window_events: int = 1000,
    rotate_s: float | None = None,
    ramp_s: float | None = None,
    exact: bool = False,
    seed: int = 0,
    lag_s: float = 1.0,
    stall: float = 0.0,
) -> FleetReport:
    """Run the fleet for ``windows`` windows of ``window_s`` seconds; see the module docstring.

    ``policy`` defaults to ``BalancePolicy(partitions, settle_s=window_s)`` (the worker's);
    ``capacity`` and ``min_window_events`` are the worker settings ``sketch_capacity`` and
    ``hot_min_window_events``; ``lag_s`` (>= 0) the time from a decision to the producers
    routing by it (a tick is routed by the decisions at least ``lag_s`` older than its
    middle); ``stall`` (0..1) the chance per worker and tick that it reads only half its
    partitions (see the module docstring). Raises ConfigError for a value out of range (``workers`` in
    1..partitions, ``windows`` >= 1, ``rate`` > 0, ``rotate_s`` > 0), RoutingMapError for a
    bad placement or hash.
    """
    require(isinstance(partitions, int) and partitions >= 1, "partitions", "an int >= 1", partitions)
    require(isinstance(workers, int) and 1 <= workers <= partitions, "workers", f"an int in 1..{partitions}", workers)
    require(isinstance(windows, int) and windows >= 1, "windows", "an int >= 1", windows)
    require(rate > 0 and math.isfinite(rate), "rate", "a number of events/s > 0", rate)
    require(window_s > 0 and math.isfinite(window_s), "window_s", "a number > 0", window_s)
    require(rotate_s is None or (rotate_s > 0 and math.isfinite(rotate_s)), "rotate_s", "a number > 0", rotate_s)
    require(ramp_s is None or (ramp_s > 0 and math.isfinite(ramp_s)), "ramp_s", "a number > 0", ramp_s)
    require(lag_s >= 0 and math.isfinite(lag_s), "lag_s", "a number of seconds >= 0", lag_s)
    require(0 <= stall <= 1, "stall", "a chance in [0, 1]", stall)
    policy = BalancePolicy(partitions=partitions, settle_s=window_s) if policy is None else policy
    require(policy.partitions == partitions, "policy.partitions", f"the simulated partition count ({partitions})",
            policy.partitions)
    rng = random.Random(seed)
    traffic = _Traffic(workload, partitions, placement, hash, rate * window_s / _SLICES, rng, rotate_s, ramp_s)
    decider = BalanceDecider(policy, home=traffic.home_of)
    loop = BalanceLoop(decider, window_s, min_window_events)
    sketches = [SlidingSketch(window_s, slices=_SLICES, capacity=capacity) for _ in range(workers)]
    owned = [list(range(w, partitions, workers)) for w in range(workers)]
    tick_s = window_s / _SLICES
    directory: dict[int, tuple[int, ...]] = {}  # key index -> partitions
    recent: list[tuple[Counter[int], list[int]]] = []  # exact mode: (key counts, partition counts) per tick
    touched: set[int] = set()
    seen: set[int] = set()
    hash_only = max_over_mean(traffic.true_loads({}, 0.0))
    out: list[FleetWindow] = []
    measured: float | None = None
    on_the_way: list[tuple[float, int, tuple[int, ...] | None]] = []  # (in force from, key, partitions or home)
    waiting: list[tuple[Counter[tuple[int, str]], dict[int, int]]] = [(Counter(), {}) for _ in range(workers)]
    for window in range(windows):
        placed = retired = items = size = 0
        for tick in range(_SLICES):
            now_s = (window * _SLICES + tick) * tick_s + tick_s / 2
            due = 0
            while due < len(on_the_way) and on_the_way[due][0] <= now_s:
                due += 1
            _apply(directory, on_the_way[:due])
            del on_the_way[:due]
            counts = traffic.draw(now_s)
            seen.update(counts)
            by_worker: list[Counter[tuple[int, str]]] = [Counter() for _ in range(workers)]
            loads = [0] * partitions
            for index, count in counts.items():
                parts = directory.get(index)
                name = traffic.names[index]
                if parts is None:
                    p = traffic.homes[index]
                    loads[p] += count
                    by_worker[p % workers][(p, name)] += count
                    continue
                for p, piece in zip(parts, _spread(rng, count, len(parts))):
                    if piece:
                        loads[p] += piece
                        by_worker[p % workers][(p, name)] += piece
            at_s = now_s + tick_s / 2 - 1e-6  # the end of the tick, still inside its slice
            rounds = []
            if exact:
                recent.append((counts, loads))
                del recent[:-_SLICES]
                rounds.append(loop.consider(_exact_view(traffic, recent, directory, tick_s, window_s, at_s), at_s))
            else:
                for w, sketch in enumerate(sketches):
                    pairs, backlog = waiting[w]
                    pairs.update(by_worker[w])
                    for p in owned[w]:
                        backlog[p] = backlog.get(p, 0) + loads[p]
                    starved = stall > 0 and rng.random() < stall
                    reading = set(rng.sample(owned[w], len(owned[w]) // 2) if starved else owned[w])
                    read = Counter({pk: c for pk, c in pairs.items() if pk[0] in reading})
                    for pk in read:
                        del pairs[pk]
                    sketch.add_counts(read, now_s)
                    for p in reading:
                        if backlog.get(p):
                            sketch.add_partition(p, now_s, backlog.pop(p))
                    sketch.add_partition_event_times(now_s, dict.fromkeys(reading, at_s))
                    summary = sketch.report(at_s, instance=f"worker-{w}", partitions=owned[w],
                                            balance_target=policy.balance_target)
                    items = max(items, len(summary.items))
                    size = max(size, _json_size(summary.to_record()))
                    loop.add(summary)
                rounds.append(loop.round(at_s))  # one round per tick, on every worker's fresh summary
            for outcome in rounds:
                measured = outcome.measured if outcome.measured is not None else measured
                for d in outcome.decisions:
                    index = traffic.index_of(d.key)
                    touched.add(index)
                    if d.kind == "retired":
                        on_the_way.append((at_s + lag_s, index, None))
                        retired += 1
                    else:
                        on_the_way.append((at_s + lag_s, index, d.partitions))
                        placed += 1
        published = _apply(dict(directory), on_the_way)
        true = max_over_mean(traffic.true_loads(published, (window + 1) * window_s - 1e-6))
        out.append(FleetWindow(window + 1, measured, true, placed + retired, placed, retired, len(published),
                               len(touched), items, size))
    return FleetReport(workload.describe() + (f", hot set rotating every {rotate_s:g} s" if rotate_s else "")
                       + (f", a new key ramping to half the traffic over {ramp_s:g} s" if ramp_s else ""),
                       partitions, workers, float(rate), float(window_s), exact, policy, hash_only, len(seen),
                       tuple(out), float(lag_s), float(stall))


class _Traffic:
    """Key weights, names, hash homes, and Poisson draws per tick (ranks dealt to keys by rotation)."""

    def __init__(self, workload: Workload, partitions: int, placement: str, hash_name: str, per_tick: float,
                 rng: random.Random, rotate_s: float | None = None, ramp_s: float | None = None,
                 ramp_share: float = 0.5) -> None:
        n = self._n = workload.keys
        self.weights = workload.weights()  # by rank
        self.names = [workload.key_name(i) for i in range(n + 1)]  # key n: the ramping key, outside the ranks
        self._prefix = workload.key_name(0)[:-1]
        placer = make_placer(hash_name, placement, partitions)
        self.homes = [placer(canonical_key(name)) for name in self.names]
        self.partitions = partitions
        self.rng = rng
        self.rotate_s = rotate_s
        self.ramp_s, self.ramp_share = ramp_s, ramp_share
        self.per_tick = per_tick
        heavy = [r for r, w in enumerate(self.weights) if w * per_tick >= _HEAVY_EVENTS]
        self._heavy = heavy
        tail_start = len(heavy)  # weights are non-increasing by rank for every distribution here
        self._tail_ranks = list(range(tail_start, n))
        self._tail_cum: list[float] = []
        acc = 0.0
        for w in self.weights[tail_start:]:
            acc += w
            self._tail_cum.append(acc)
        self._tail_mass = acc
        self._shift = max(1, n // 7 + 1)

    def home_of(self, key: str) -> int:
        """The hash home of a simulated key (the decider's ``home``)."""
        return self.homes[self.index_of(key)]

    def index_of(self, key: str) -> int:
        """The key number of a simulated key name."""
        return int(key[len(self._prefix):])

    def _offset(self, now_s: float) -> int:
        return 0 if self.rotate_s is None else int(now_s // self.rotate_s) * self._shift

    def _ramp(self, now_s: float) -> float:
        """The ramping key's share of the traffic at ``now_s`` (the other keys share the rest)."""
        return 0.0 if self.ramp_s is None else self.ramp_share * min(1.0, now_s / self.ramp_s)

    def draw(self, now_s: float) -> Counter[int]:
        """Events per key index in one tick around ``now_s``."""
        rng, n, offset = self.rng, self._n, self._offset(now_s)
        ramp = self._ramp(now_s)
        scale = self.per_tick * (1.0 - ramp)
        counts: Counter[int] = Counter()
        if ramp > 0:
            counts[n] = _poisson(rng, ramp * self.per_tick)
        for r in self._heavy:
            lam = self.weights[r] * scale
            c = max(0, round(rng.gauss(lam, math.sqrt(lam))))
            if c:
                counts[(r + offset) % n] = c
        lam_tail = self._tail_mass * scale
        if lam_tail > 0:
            k = _poisson(rng, lam_tail)
            if k:
                ranks = rng.choices(self._tail_ranks, cum_weights=self._tail_cum, k=k)
                for r, c in Counter(ranks).items():
                    counts[(r + offset) % n] += c
        return counts

    def true_loads(self, directory: dict[int, tuple[int, ...]], now_s: float) -> list[float]:
        """Expected share of traffic per partition under ``directory`` at ``now_s``."""
        n, offset = self._n, self._offset(now_s)
        ramp = self._ramp(now_s)
        loads = [0.0] * self.partitions
        homes, weights = self.homes, self.weights
        for r, w in enumerate(weights):
            loads[homes[(r + offset) % n]] += w * (1.0 - ramp)
        loads[homes[n]] += ramp
        for index, parts in directory.items():
            w = ramp if index == n else weights[(index - offset) % n] * (1.0 - ramp)
            loads[homes[index]] -= w
            for p in parts:
                loads[p] += w / len(parts)
        return loads


def _apply(directory: dict[int, tuple[int, ...]],
           changes: Sequence[tuple[float, int, tuple[int, ...] | None]]) -> dict[int, tuple[int, ...]]:
    """``directory`` with ``changes`` (in force from, key, partitions; None sends the key home) applied, in place."""
    for _, index, target in changes:
        if target is None:
            directory.pop(index, None)
        else:
            directory[index] = target
    return directory


def _exact_view(traffic: _Traffic, recent: Sequence[tuple[Counter[int], list[int]]],
                directory: dict[int, tuple[int, ...]], tick_s: float, window_s: float, at_s: float) -> MergedView:
    """The exact counts of the last window's ticks as the merged view the decider reads."""
    span_s = tick_s * len(recent)
    keys: Counter[int] = Counter()
    loads = [0] * traffic.partitions
    for counts, tick_loads in recent:
        keys.update(counts)
        for p, c in enumerate(tick_loads):
            loads[p] += c
    total = sum(loads)
    return MergedView(
        instances=("exact",), window_s=window_s, total=total, total_rate=total / span_s,
        rates=MappingProxyType({traffic.names[i]: c / span_s for i, c in keys.items()}), unreported_rate=0.0,
        at_s=at_s, partition_rates=MappingProxyType({p: c / span_s for p, c in enumerate(loads)}))


def _spread(rng: random.Random, count: int, k: int) -> list[int]:
    """``count`` events spread uniformly at random over ``k`` pieces (multinomial)."""
    if k == 1:
        return [count]
    if count <= 4 * k:
        pieces = [0] * k
        for i in rng.choices(range(k), k=count):
            pieces[i] += 1
        return pieces
    pieces = []
    left = count
    for i in range(k - 1):
        p = 1.0 / (k - i)
        mean = left * p
        c = min(left, max(0, round(rng.gauss(mean, math.sqrt(mean * (1 - p))))))
        pieces.append(c)
        left -= c
    pieces.append(left)
    return pieces


def _poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw (normal approximation above 50, Knuth's product below)."""
    if lam > 50:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, product = math.exp(-lam), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _json_size(record: dict[str, Any]) -> int:
    return len(orjson.dumps(record))
