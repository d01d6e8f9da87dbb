"""Routing without a broker: replay a key distribution through a real Router and measure.

Two halves:

* **Workloads.** :class:`Workload` names a seeded key distribution and
  :func:`iter_keys` draws from it forever (``streams produce`` uses the same
  stream); :func:`generate_keys` takes the first ``events``. ``uniform`` draws
  ``key-0 … key-{N-1}`` equally; ``zipf`` draws ``key-{r}`` with weight
  ``1 / (r + 1) ** s`` (so ``key-0`` is the heaviest); ``tenants`` gives
  ``elephants`` tenants ``elephant_share`` of all events between them (equally) and
  the other ``N - elephants`` tenants the rest (equally). Everything comes from
  ``random.Random(seed)`` through ``random.choices`` with cumulative weights: one
  ``random()`` per key, so the stream for a seed is the same however it is cut.
  :func:`read_keys` reads real keys from a text file (one per line) or one CSV
  column instead.
* **The simulation.** :func:`simulate` routes every event (the ``i``-th event's ID
  is the int ``i``, which picks its salt) through a :class:`~streams.core.routing.router.Router`
  with one routing map, and runs exactly the decider the worker runs
  (:class:`~streams.core.hotkeys.decider.BalanceDecider`), fed with exact counts: the
  whole run is one window of ``window_s`` seconds (rate = count / window). Each round
  the decider sees the partition loads the router produces, its decisions go into
  the router's directory, and the events are routed again, until a round decides
  nothing. The :class:`SimulationReport` holds the loads before and after, the
  directory (key, rate, home, partitions), and how many distinct keys change
  partition when the partition count grows from N to N + 1 under ``mod`` and under
  ``jump`` (ideal: 1 / (N + 1)).

Pure logic: no Kafka, no output. The CLI (``streams simulate``) parses and prints.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.core.errors import ConfigError
from streams.core.hotkeys.decider import BalanceDecider, BalancePolicy
from streams.core.hotkeys.sketch import MergedView
from streams.core.routing.hashing import canonical_key
from streams.core.routing.placement import make_placer
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.core.validate import require

__all__ = [
    "DISTRIBUTIONS",
    "Growth",
    "PlacedKey",
    "KeyFile",
    "Movement",
    "PartitionLoads",
    "SimulationReport",
    "Workload",
    "expected_loads",
    "generate_keys",
    "iter_keys",
    "read_keys",
    "simulate",
]

DISTRIBUTIONS = ("uniform", "zipf", "tenants")
MAX_KEYS = 1_000_000
_BATCH = 4096
# Every simulated event falls in bucket 0 of a one-minute width: one map, one bucket.
_SIM_BUCKETS = TimeBuckets("1m")
_SIM_TS_MS = 0
_SIM_TOPIC = "simulated"


# --- workloads --------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A seeded key distribution (see the module docstring).

    ``keys`` distinct keys (1..MAX_KEYS); ``zipf_exponent`` > 0 (zipf only);
    ``elephants`` in 1..keys-1 and ``elephant_share`` in 0..1 (tenants only);
    ``seed`` any int. Raises ConfigError naming the field and its allowed range.
    """

    distribution: str = "zipf"
    keys: int = 1000
    zipf_exponent: float = 1.1
    elephants: int = 3
    elephant_share: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.distribution in DISTRIBUTIONS, "distribution", f"one of {', '.join(DISTRIBUTIONS)}",
                 self.distribution)
        require(_is_int(self.keys) and 1 <= self.keys <= MAX_KEYS, "keys", f"an int in 1..{MAX_KEYS}", self.keys)
        require(_is_int(self.seed), "seed", "an int", self.seed)
        if self.distribution == "zipf":
            require(_is_number(self.zipf_exponent) and 0 < self.zipf_exponent <= 100, "zipf_exponent",
                     "a number in (0, 100]", self.zipf_exponent)
        if self.distribution == "tenants":
            require(_is_int(self.elephants) and 1 <= self.elephants < self.keys, "elephants",
                     f"an int in 1..keys-1 ({self.keys - 1})", self.elephants)
            require(_is_number(self.elephant_share) and 0 <= self.elephant_share <= 1, "elephant_share",
                     "a number in 0..1", self.elephant_share)

    def key_name(self, index: int) -> str:
        """The text of key number ``index``: ``tenant-{index}`` for tenants, else ``key-{index}``."""
        return f"{'tenant' if self.distribution == 'tenants' else 'key'}-{index}"

    def describe(self) -> str:
        """A one-line description, e.g. ``zipf(keys=1000, s=1.1, seed=0)``."""
        if self.distribution == "zipf":
            detail = f", s={self.zipf_exponent:g}"
        elif self.distribution == "tenants":
            detail = f", elephants={self.elephants}, share={self.elephant_share:g}"
        else:
            detail = ""
        return f"{self.distribution}(keys={self.keys}{detail}, seed={self.seed})"

    def weights(self) -> list[float]:
        """Each key index's share of the draws (they add up to 1): what :func:`iter_keys` draws in the long run."""
        cum = self.cumulative_weights()
        n = self.keys
        raw = [1.0 / n] * n if cum is None else [b - a for a, b in zip([0.0, *cum[:-1]], cum)]
        total = sum(raw)
        return [w / total for w in raw]

    def cumulative_weights(self) -> list[float] | None:
        """The cumulative weights ``random.choices`` draws key indexes with; None for uniform."""
        n = self.keys
        if self.distribution == "uniform":
            return None
        if self.distribution == "zipf":
            s = self.zipf_exponent
            return list(itertools.accumulate(1.0 / (r ** s) for r in range(1, n + 1)))
        k, share = self.elephants, self.elephant_share
        heavy, light = share / k, (1.0 - share) / (n - k)
        return list(itertools.accumulate(heavy if i < k else light for i in range(n)))


def iter_keys(workload: Workload) -> Iterator[str]:
    """Draw keys from ``workload`` forever; the same seed gives the same stream."""
    rng = random.Random(workload.seed)
    names = [workload.key_name(i) for i in range(workload.keys)]
    cum = workload.cumulative_weights()
    choices = rng.choices
    while True:
        yield from choices(names, cum_weights=cum, k=_BATCH)


def expected_loads(workload: Workload, partitions: int, home: Callable[[str], int],
                   directory: Mapping[str, Sequence[int]]) -> list[float]:
    """Each partition's expected share of ``workload``'s events (they add up to 1) when a key
    goes to its ``directory`` entry, split evenly over its partitions, or else to ``home(key)``.

    The "true" balance of a directory, free of counting noise: what :func:`iter_keys` draws
    in the long run. Keys of ``directory`` that the workload never draws carry nothing.
    Raises ConfigError if ``partitions`` < 1 or a partition is out of range.
    """
    require(_is_int(partitions) and partitions >= 1, "partitions", "an int >= 1", partitions)
    loads = [0.0] * partitions
    for index, weight in enumerate(workload.weights()):
        name = workload.key_name(index)
        parts = directory.get(name) or (home(name),)
        for p in parts:
            require(_is_int(p) and 0 <= p < partitions, "partition", f"an int in 0..{partitions - 1}", p)
            loads[p] += weight / len(parts)
    return loads


def generate_keys(workload: Workload, events: int) -> list[str]:
    """The first ``events`` keys of :func:`iter_keys`; raises ConfigError if ``events`` < 0."""
    require(_is_int(events) and events >= 0, "events", "an int >= 0", events)
    return list(itertools.islice(iter_keys(workload), events))


@dataclass(frozen=True)
class KeyFile:
    """Keys read from a file, in file order; ``skipped`` counts blank lines or empty cells."""

    keys: tuple[str, ...]
    skipped: int
    source: str


def read_keys(path: str | Path, csv_column: str | None = None) -> KeyFile:
    """Read one key per line of ``path``, or the column ``csv_column`` of a CSV with a header.

    Lines keep their text verbatim except the line ending; blank lines (empty CSV
    cells) are skipped and counted. Raises OSError if the file cannot be read,
    ConfigError if it is not UTF-8, the column is missing, or no key is left.
    """
    path = Path(path)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            if csv_column is None:
                raw = [line.rstrip("\r\n") for line in handle]
                source = str(path)
            else:
                reader = csv.DictReader(handle)
                if reader.fieldnames is None or csv_column not in reader.fieldnames:
                    have = ", ".join(reader.fieldnames or []) or "none"
                    raise ConfigError(f"CSV file {path} has no column {csv_column!r} (columns: {have})")
                raw = [row[csv_column] or "" for row in reader]
                source = f"{path} [{csv_column}]"
    except UnicodeDecodeError as exc:
        raise ConfigError(f"keys file {path} is not UTF-8 text: {exc}") from None
    except csv.Error as exc:
        raise ConfigError(f"keys file {path} is not valid CSV: {exc}") from None
    keys = tuple(key for key in raw if key)
    if not keys:
        raise ConfigError(f"keys file {path} holds no keys")
    return KeyFile(keys, len(raw) - len(keys), source)


# --- the report ----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLoads:
    """Events per partition; ``counts[p]`` is partition ``p``'s."""

    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        """All events."""
        return sum(self.counts)

    @property
    def max(self) -> int:
        """The busiest partition's events."""
        return max(self.counts)

    @property
    def min(self) -> int:
        """The idlest partition's events."""
        return min(self.counts)

    @property
    def mean(self) -> float:
        """Events per partition on average."""
        return self.total / len(self.counts)

    @property
    def max_over_mean(self) -> float:
        """``max / mean``: 1.0 is perfectly even; N means one partition takes everything."""
        return self.max / self.mean if self.total else 0.0

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict: the counts and the summary numbers."""
        return {"loads": list(self.counts), "max": self.max, "min": self.min, "mean": self.mean,
                "max_over_mean": self.max_over_mean}


@dataclass(frozen=True)
class PlacedKey:
    """A key the decider placed: its events, rate (events/s), share of all events, hash home, partitions.

    One partition means the key was moved whole; several, split over them.
    """

    key: str
    count: int
    rate: float
    share: float
    home: int
    partitions: tuple[int, ...]

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"key": self.key, "count": self.count, "rate": self.rate, "share": self.share, "home": self.home,
                "partitions": list(self.partitions), "kind": "move" if len(self.partitions) == 1 else "split"}


@dataclass(frozen=True)
class Movement:
    """What growing from ``from_partitions`` to ``+1`` moves under one placement."""

    placement: str
    distinct_keys: int
    moved_keys: int
    events: int
    moved_events: int

    @property
    def fraction(self) -> float:
        """Share of distinct keys whose partition changes."""
        return self.moved_keys / self.distinct_keys

    @property
    def event_fraction(self) -> float:
        """Share of events whose (unsplit) partition changes."""
        return self.moved_events / self.events


@dataclass(frozen=True)
class Growth:
    """Key movement when the partition count grows by one, under both placements, one hash."""

    hash: str
    from_partitions: int
    mod: Movement
    jump: Movement

    @property
    def to_partitions(self) -> int:
        """``from_partitions + 1``."""
        return self.from_partitions + 1

    @property
    def ideal_fraction(self) -> float:
        """``1 / (N + 1)``: the least any placement can move and still use the new partition."""
        return 1 / self.to_partitions

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        def move(m: Movement) -> dict[str, Any]:
            return {"moved_keys": m.moved_keys, "distinct_keys": m.distinct_keys, "fraction": m.fraction,
                    "moved_events": m.moved_events, "event_fraction": m.event_fraction}

        return {"hash": self.hash, "from_partitions": self.from_partitions, "to_partitions": self.to_partitions,
                "ideal_fraction": self.ideal_fraction, "mod": move(self.mod), "jump": move(self.jump)}


@dataclass(frozen=True)
class SimulationReport:
    """What :func:`simulate` found; ``to_record`` is what ``streams simulate --json`` prints.

    ``before`` are the loads the routing map's hash gives, ``after`` the loads with the
    decider's directory (``placed``, heaviest first) in force, reached in ``rounds``
    decider rounds.
    """

    source: str
    events: int
    distinct_keys: int
    partitions: int
    placement: str
    hash: str
    window_s: float
    policy: BalancePolicy
    before: PartitionLoads
    placed: tuple[PlacedKey, ...]
    after: PartitionLoads
    rounds: int
    growth: Growth

    @property
    def touched_fraction(self) -> float:
        """The share of distinct keys the directory places (moved or split)."""
        return len(self.placed) / self.distinct_keys if self.distinct_keys else 0.0

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict of the whole report."""
        return {
            "source": self.source, "events": self.events, "distinct_keys": self.distinct_keys,
            "partitions": self.partitions, "placement": self.placement, "hash": self.hash,
            "window_s": self.window_s, "total_rate": self.events / self.window_s,
            "policy": dataclasses.asdict(self.policy),
            "before": self.before.to_record(), "after": self.after.to_record(), "rounds": self.rounds,
            "placed": [p.to_record() for p in self.placed],
            "touched_keys": len(self.placed), "touched_fraction": self.touched_fraction,
            "growth": self.growth.to_record(),
        }


# --- the simulation -----------------------------------------------------------------

#: Decider rounds simulate runs at most (each changes at most ``max_changes`` keys).
MAX_ROUNDS = 20


def simulate(
    keys: Sequence[str],
    *,
    partitions: int,
    placement: str = "mod",
    hash: str = "murmur2",
    window_s: float = 10.0,
    policy: BalancePolicy | None = None,
    source: str = "",
) -> SimulationReport:
    """Route ``keys`` (one event each, in order), balance them with the decider, and report.

    See the module docstring. ``policy`` defaults to ``BalancePolicy(partitions)``;
    its partition count must equal ``partitions``. Raises ConfigError if ``keys`` is
    empty, ``window_s`` is not > 0 or the policy disagrees, RoutingMapError for a bad
    ``partitions``, ``placement`` or ``hash``, and InvalidKeyError for a key routing refuses.
    """
    require(len(keys) > 0, "keys", "at least one key", "none")
    require(_is_number(window_s) and window_s > 0, "window_s", "a number > 0", window_s)
    routing_map = RoutingMap(version=1, partitions=partitions, topic=_SIM_TOPIC, placement=placement, hash=hash)
    router = Router(_SIM_BUCKETS, [routing_map], memo_size=1 << 20)
    policy = BalancePolicy(partitions=partitions) if policy is None else policy
    require(policy.partitions == partitions, "policy.partitions", f"the simulated partition count ({partitions})",
            policy.partitions)
    before = _route_all(router, keys, partitions)
    counts, display = _distinct_counts(keys)
    events = len(keys)
    rates = {display[kb]: count / window_s for kb, count in counts.items()}
    decider = BalanceDecider(policy, home=router.home_of)
    loads, now_s, rounds = before, 0.0, 0
    step_s = max(policy.settle_s, 1e-3)
    for _ in range(MAX_ROUNDS):
        view = MergedView(instances=("simulate",), window_s=window_s, total=events, total_rate=events / window_s,
                          rates=rates, unreported_rate=0.0, at_s=now_s,
                          partition_rates={p: c / window_s for p, c in enumerate(loads.counts)})
        decisions = decider.decide(view, now_s)
        if not decisions:
            break
        rounds += 1
        for d in decisions:
            kb = canonical_key(d.key)
            if d.kind == "retired":
                router.directory.remove(kb)
            else:
                router.directory.set(kb, d.partitions, partitions)
        loads = _route_all(router, keys, partitions)
        now_s += step_s
    by_text = {display[kb]: count for kb, count in counts.items()}
    placed = tuple(sorted(
        (PlacedKey(key, by_text[key], by_text[key] / window_s, by_text[key] / events, router.home_of(key), parts)
         for key, parts in decider.directory.items()), key=lambda p: (-p.count, p.key)))
    growth = Growth(hash, partitions, _movement(counts, hash, "mod", partitions),
                    _movement(counts, hash, "jump", partitions))
    return SimulationReport(source, events, len(counts), partitions, placement, hash, float(window_s), policy,
                            before, placed, loads, rounds, growth)
def _route_all(router: Router, keys: Sequence[str], partitions: int) -> PartitionLoads:
    """Route event ``i`` (key ``keys[i]``, ID ``i``) and count events per partition."""
    loads = [0] * partitions
    route = router.route
    ts = _SIM_TS_MS
    for event_id, key in enumerate(keys):
        loads[route(key, ts, event_id)[1]] += 1
    return PartitionLoads(tuple(loads))


def _distinct_counts(keys: Iterable[str]) -> tuple[dict[bytes, int], dict[bytes, str]]:
    """Events per canonical key, and each canonical key's first spelling (its display text)."""
    counts: dict[bytes, int] = {}
    display: dict[bytes, str] = {}
    for text, count in Counter(keys).items():
        kb = canonical_key(text)
        counts[kb] = counts.get(kb, 0) + count
        display.setdefault(kb, text)
    return counts, display


def _movement(counts: dict[bytes, int], hash_name: str, placement: str, n: int) -> Movement:
    before = make_placer(hash_name, placement, n)
    after = make_placer(hash_name, placement, n + 1)
    moved = [count for kb, count in counts.items() if before(kb) != after(kb)]
    return Movement(placement, len(counts), len(moved), sum(counts.values()), sum(moved))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


