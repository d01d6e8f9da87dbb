"""The load-aware decider: keep partition loads even by placing the few keys that matter.

The shard function is a hybrid of hash and directory. The hash (the routing map's
placement) places the long tail; a small, live directory places the keys that carry
the imbalance. A directory entry maps a key to an explicit tuple of partitions: one
partition moves the key whole, ``k > 1`` splits it over those ``k`` partitions (the
salt of an event picks one, see :mod:`streams.core.routing.directory`).

The decider does not ask "is this key hot?" but "is the load even?":

1. **Measure.** Every worker instance publishes, with its sketch summary, the event
   counts of the partitions it consumes; :func:`~streams.core.hotkeys.sketch.merge_summaries`
   adds them up, so the decider knows every partition's rate, the heavy keys' rates,
   and (from its own directory and the routing map) where each heavy key's traffic goes.
2. **Trigger, only on what noise cannot explain.** A window of ``n`` events per
   partition has a counting noise of ``sqrt(n)`` (Poisson): 4,000 events over 12
   partitions put a perfectly uniform stream above max/mean 1.10 in a third of its
   windows. So a partition counts as **hot** only when its load *minus*
   ``z × sd`` is above ``balance_target × mean``, where ``sd`` is its own Poisson
   standard deviation and ``z`` the one-sided quantile of ``1 - (1 - confidence) / N``
   (a Bonferroni bound over the ``N`` partitions: with ``confidence`` 0.99 a
   stream that is truly at the target triggers in at most 1 % of windows, whatever N).
   While nothing changes, the decider adds up the partition counts of successive,
   non-overlapping windows (at most ``evidence_windows`` of them), so the noise
   shrinks as ``1/sqrt(windows)`` and a small real imbalance is found after a few
   windows, while a large shift shows in one window alone. Nothing is planned while
   neither shows a hot partition, nor while the measurement may still hold traffic
   routed before the last change: a window must begin ``propagation_s`` after it (the
   notice's trip to the producers and the records already on their way; a window that
   still counts them reads the old hot partition as hot, and the decider would move
   more keys off it than it should) and ``settle_s`` must have passed. A change that moves
   next to nothing (keys that went quiet going home: together under a tenth of the
   tolerated excess) starts neither wait, so it cannot hold up a new elephant.
   **Hysteresis:** once an imbalance was acted on, the added-up windows are held to
   ``balance_aim`` instead of the target (and keys leave only the partitions above the
   aim beyond noise) until a full run of
   ``evidence_windows`` unchanged windows shows none above the aim *and* every
   partition under the target with the same confidence (its load plus ``z × sd``):
   a stream left just above the target by the first plan's estimates is worked
   down even when one run of windows happens to read low, and one that stays under
   the target by no more than noise explains is left alone.
3. **Plan** (:func:`plan_placements`). Take the heaviest keys (at most ``max_keys``,
   above ``min_rate``) out of the partitions whose load minus ``z × sd`` is above the
   cap of ``balance_aim × mean`` (hysteresis: triggered at the target, aimed at the
   aim, and never on a partition whose excess is noise), leaving the background the
   hash put there, and place them back heaviest first against that cap:
   keep a key where it is if it fits; else at its hash home if that fits; else **move**
   it whole to the lightest partition if it fits there; else **split** it over the
   ``k`` lightest partitions, ``k`` the smallest that fits (or the one that minimises
   the peak). At most ``max_changes`` keys change per round.
4. **Publish only what helps.** A plan whose predicted hot excess (load minus
   ``z × sd`` over the target) is not lower than the measured one is dropped. A key
   changed less than ``hold_s`` ago keeps its placement unless it no longer fits (a
   key that grows gets more pieces at once); a directory key whose traffic moved on
   (its rate plus ``z × sd`` of its count at most half what it was when placed; a key
   no instance lists counts as the summaries' floor of its partitions, so a light key
   drifting across that floor is not taken for one gone quiet) and whose home has room for it
   beyond noise (home load plus its rate plus ``z × sd`` under the aim) for ``hold_s``
   is **retired** (back to the hash); so is a faded key lighter than a tenth of the
   tolerated excess (``(balance_target - 1) / 10 × mean``), wherever its home stands:
   a key that went quiet goes home within about ``hold_s``, a steady key stays where
   it was put.

``allow_moves=False`` keeps Kafka's placement for every key that is not split (pieces
of a split key still go to explicitly chosen light partitions); ``enabled=False``
turns the decider off. :class:`BalanceDecider` is the one policy both callers run:
the worker on merged sketches, ``streams simulate`` on exact counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Literal, NamedTuple

from streams.core.errors import InvalidArgumentError
from streams.core.hotkeys.sketch import MergedView
from streams.core.validate import require

__all__ = ["BalancePolicy", "BalanceDecider", "Decision", "KeyLoad", "Plan", "noise_z", "plan_placements"]

#: Partitions a key is placed on: ``(p,)`` moves it whole, ``(p1, ..., pk)`` splits it.
Partitions = tuple[int, ...]

# Once triggered, keys leave a partition whose load is above the aim by more than one
# standard deviation of its count: the trigger's z (3 to 4.5) guards against acting at
# all, this one only keeps a triggered round off partitions that are merely noisy.
_EVICT_Z = 1.0
_NEGLIGIBLE = 0.1  # a key under a tenth of the tolerated excess (the summaries' floor) is noise to any partition
_IMPROVEMENT = 0.98  # a plan must lower the predicted peak by at least 2 % (more than a window's noise) to be published


@dataclass(frozen=True)
class BalancePolicy:
    """The decider's knobs; every one but ``partitions`` and ``settle_s`` (the routing map's partition
    count and the window, ``hot_window_s``) is a worker setting and a ``streams simulate`` flag, named
    as :data:`streams.core.config.BALANCE_SETTINGS` maps them (``confidence`` is ``balance_confidence``).

    ``partitions`` (>= 1) the partition count of the routing map in force;
    ``balance_target`` (> 1) the max/mean above which the decider acts;
    ``balance_aim`` (1 < aim <= target) the max/mean a plan aims at;
    ``min_rate`` (>= 0 events/s) keys below it are never placed;
    ``max_keys`` (1..100000) heaviest keys considered per round;
    ``max_changes`` (1..100000) keys whose placement may change per round;
    ``hold_s`` (>= 0) how long a changed placement stays before it may shrink or retire;
    ``settle_s`` (>= 0) how long after a change the measurement is not trusted yet (the sketch window);
    ``allow_moves`` False: keys are only split, never moved whole; ``enabled`` False: decide nothing;
    ``confidence`` (0.5..0.999999) the chance that a stream truly at the target triggers nothing in a window;
    ``evidence_windows`` (1..1000) how many unchanged windows of partition counts the trigger adds up;
    ``propagation_s`` (>= 0) how long after a change traffic may still be routed the old way (a window
    that begins sooner is not trusted).
    Raises ConfigError naming the field (``balance_aim`` above ``balance_target`` names both).
    """

    partitions: int
    balance_target: float = 1.10
    balance_aim: float = 1.05
    min_rate: float = 1.0
    max_keys: int = 256
    max_changes: int = 64
    hold_s: float = 10.0
    settle_s: float = 5.0
    allow_moves: bool = True
    enabled: bool = True
    confidence: float = 0.99
    evidence_windows: int = 12
    propagation_s: float = 2.0

    def __post_init__(self) -> None:
        require(self.partitions.__class__ is int and 1 <= self.partitions <= 2**31 - 1, "partitions",
                "an int in [1, 2**31-1]", self.partitions)
        for name in ("balance_target", "balance_aim", "min_rate", "hold_s", "settle_s", "propagation_s"):
            value = getattr(self, name)
            require(value.__class__ in (int, float) and math.isfinite(value) and value >= 0, name,
                    "a finite number >= 0", value)
            object.__setattr__(self, name, float(value))
        require(self.balance_target > 1, "balance_target", "a number > 1 (max/mean of partition rates)",
                self.balance_target)
        require(1 < self.balance_aim <= self.balance_target, "balance_aim",
                f"a number in (1, balance_target] (balance_target is {self.balance_target:g})", self.balance_aim)
        for name in ("max_keys", "max_changes"):
            value = getattr(self, name)
            require(value.__class__ is int and 1 <= value <= 100_000, name, "an int in [1, 100000]", value)
        require(self.confidence.__class__ in (int, float) and 0.5 <= self.confidence <= 0.999999, "confidence",
                "a number in [0.5, 0.999999]", self.confidence)
        require(self.evidence_windows.__class__ is int and 1 <= self.evidence_windows <= 1000, "evidence_windows",
                "an int in [1, 1000]", self.evidence_windows)
        require(self.allow_moves.__class__ is bool, "allow_moves", "a bool", self.allow_moves)
        require(self.enabled.__class__ is bool, "enabled", "a bool", self.enabled)


class KeyLoad(NamedTuple):
    """A key the planner may place: its rate (events/s) and its hash home partition."""

    key: str
    rate: float
    home: int


@dataclass(frozen=True)
class Plan:
    """What :func:`plan_placements` proposes.

    ``directory`` is the complete new directory (keys absent from it go home);
    ``changed`` the keys whose placement differs from the old directory, heaviest first;
    ``loads_before`` the measured partition rates and ``loads_after`` the predicted ones.
    """

    directory: Mapping[str, Partitions]
    changed: tuple[str, ...]
    loads_before: tuple[float, ...]
    loads_after: tuple[float, ...]

    @property
    def peak_before(self) -> float:
        """The busiest partition's measured rate."""
        return max(self.loads_before, default=0.0)

    @property
    def peak_after(self) -> float:
        """The busiest partition's predicted rate once the plan is in force."""
        return max(self.loads_after, default=0.0)

    @property
    def improves(self) -> bool:
        """True when the plan lowers the peak (by at least half a percent)."""
        return bool(self.changed) and self.peak_after < self.peak_before * _IMPROVEMENT


@lru_cache(maxsize=64)
def noise_z(partitions: int, confidence: float) -> float:
    """The one-sided normal quantile of ``1 - (1 - confidence) / partitions``: how many standard
    deviations the busiest of ``partitions`` equal Poisson loads stays under with ``confidence``."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / max(1, partitions))


def _noise(rate: float, span_s: float, z: float) -> float:
    """``z`` Poisson standard deviations of a count of ``rate`` events/s over ``span_s`` seconds, as a rate."""
    return z * math.sqrt(max(rate * span_s, 1.0)) / span_s


def max_over_mean(loads: Sequence[float]) -> float:
    """``max / mean`` of ``loads`` (1.0 is perfectly even); 0.0 when there is no load."""
    total = sum(loads)
    return max(loads) * len(loads) / total if total > 0 else 0.0


def plan_placements(
    policy: BalancePolicy,
    loads: Sequence[float],
    keys: Iterable[KeyLoad],
    directory: Mapping[str, Partitions],
    *,
    retire: Callable[[str], bool] = lambda key: False,
    held: Callable[[str], bool] = lambda key: False,
    slack: Sequence[float] = (),
    negligible: float = 0.0,
) -> Plan:
    """Re-place the fewest of ``keys`` that bring every partition under ``balance_aim × mean``.

    ``loads[p]`` is partition p's measured rate, which includes every key of ``keys``
    where it currently goes (its ``directory`` entry, else its home). Two steps:

    1. **Evict** from each partition above the cap (busiest first) the keys that
       explain its excess: the lightest single key whose share there covers the
       excess, else the heaviest and look again. Keys on partitions under the cap
       never move, so churn stays with the partitions that need it; nor do keys for
       which ``held(key)`` holds (placed moments ago) unless nothing else on that
       partition can go. Keys for which ``retire(key)`` holds are evicted too (they
       try to go home).
    2. **Place** the evicted keys back, heaviest first: home for a retiring key when
       it fits there; else where it was if that fits; else its hash home if that fits;
       else **moved** whole to the lightest partition if it fits there (not with
       ``allow_moves=False``); else **split** over the ``k`` lightest partitions, ``k``
       the smallest that fits (or the one with the lowest peak).

    ``slack[p]`` (default 0) is how far partition p's measured load may be above the
    cap before keys are evicted from it, down to the cap (the decider passes ``z × sd``,
    the counting noise: a partition whose excess is noise keeps its keys). A retiring
    key at or under ``negligible`` (events/s) goes home even where it does not fit: it
    cannot unbalance anything. At most ``max_changes``
    keys are evicted. Directory keys not in ``keys`` keep their entries. Pure; the
    returned :class:`Plan` predicts the loads after it.
    """
    n = policy.partitions
    measured = tuple(float(x) for x in loads[:n]) + (0.0,) * max(0, n - len(loads))
    limit = policy.balance_aim * sum(measured) / n * (1 + _EPSILON)
    load = list(measured)
    where = {k.key: directory.get(k.key, (k.home,)) for k in keys}
    by_partition: dict[int, list[KeyLoad]] = {}
    for k in keys:
        for p in where[k.key]:
            by_partition.setdefault(p, []).append(k)
    evicted: dict[str, KeyLoad] = {}

    def evict(k: KeyLoad) -> None:
        evicted[k.key] = k
        for p in where[k.key]:
            load[p] -= k.rate / len(where[k.key])

    for k in keys:
        if len(evicted) < policy.max_changes and k.key in directory and retire(k.key):
            evict(k)
    margin = [float(x) for x in slack[:n]] + [0.0] * max(0, n - len(slack))
    for p in sorted(range(n), key=lambda q: -(load[q] - margin[q])):
        if load[p] - margin[p] <= limit:
            continue  # under the cap, or over it by no more than noise explains: its keys stay
        while load[p] > limit and len(evicted) < policy.max_changes:
            here = [k for k in by_partition.get(p, ()) if k.key not in evicted]
            here = [k for k in here if not held(k.key)] or here
            if not here:
                break
            excess = load[p] - limit
            share = {k.key: k.rate / len(where[k.key]) for k in here}
            covering = [k for k in here if share[k.key] >= excess]
            evict(min(covering, key=lambda k: (share[k.key], k.key)) if covering
                  else max(here, key=lambda k: (share[k.key], k.key)))
    load = [max(0.0, x) for x in load]

    def fits(parts: Partitions, rate: float) -> bool:
        return all(load[p] + rate / len(parts) <= limit for p in parts)

    new = dict(directory)
    changed: list[str] = []
    for k in sorted(evicted.values(), key=lambda k: (-k.rate, k.key)):
        home, current = (k.home,), where[k.key]
        if retire(k.key) and (fits(home, k.rate) or k.rate <= negligible):
            target = home
        elif fits(current, k.rate):
            target = current
        elif fits(home, k.rate):
            target = home
        else:
            order = sorted(range(n), key=lambda p: (load[p], p))
            if policy.allow_moves and fits((order[0],), k.rate):
                target = (order[0],)
            else:
                target = _split(order, load, k.rate, limit, 1 if policy.allow_moves else 2)
        for p in target:
            load[p] += k.rate / len(target)
        if target == home:
            new.pop(k.key, None)
        else:
            new[k.key] = target
        if target != current:
            changed.append(k.key)
    return Plan(new, tuple(changed), measured, tuple(load))


_EPSILON = 1e-9


def _split(order: Sequence[int], load: Sequence[float], rate: float, limit: float, smallest: int) -> Partitions:
    """The ``k`` lightest partitions (``order`` is lightest first) that take ``rate / k`` each under
    ``limit``, ``k`` the smallest that does (at least ``smallest``); else the ``k`` with the lowest peak."""
    if len(order) < 2:
        return tuple(order)
    best_k, best_peak = max(2, smallest), math.inf
    for size in range(max(2, smallest), len(order) + 1):
        peak = load[order[size - 1]] + rate / size
        if peak <= limit:
            best_k = size
            break
        if peak < best_peak:
            best_k, best_peak = size, peak
    return tuple(sorted(order[:best_k]))


Kind = Literal["placed", "retired"]


class Decision(NamedTuple):
    """One directory change to publish.

    ``placed``: ``key`` now goes to ``partitions`` (one: moved whole; several: split).
    ``retired``: ``key`` goes back to its hash home (publish a tombstone); ``partitions``
    is ``(home,)``. ``rate`` (events/s) and ``share`` (0..1) are as measured now;
    ``home`` is the key's hash partition; ``since_s`` when the key entered the directory.
    """

    key: str
    partitions: Partitions
    rate: float
    share: float
    home: int
    since_s: float
    kind: Kind


@dataclass
class _Entry:
    partitions: Partitions
    since_s: float
    changed_s: float
    roomy_since_s: float | None = None
    placed_rate: float | None = None  # its rate when last placed (None: restored, not measured yet)


@dataclass
class BalanceDecider:
    """Turns merged views into directory changes (see the module docstring).

    ``home(key) -> partition`` is the hash placement of the routing map in force.
    The decider owns the directory it publishes (:attr:`directory`); give it the
    published one on restart with :meth:`restore`. Not thread-safe.
    """

    policy: BalancePolicy
    home: Callable[[str], int]
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _settled_at_s: float = -math.inf
    _in_force_at_s: float = -math.inf
    _unfinished: bool = False
    _episode: bool = False  # a real imbalance was acted on: work it down to the aim before standing down
    last_plan: Plan | None = None
    _evidence: list[tuple[float, tuple[float, ...]]] = field(default_factory=list)  # (span_s, counts) per window
    _evidence_at_s: float = -math.inf

    @property
    def directory(self) -> dict[str, Partitions]:
        """Keys placed by the directory, with their partitions."""
        return {key: e.partitions for key, e in self._entries.items()}

    @property
    def evidence_windows(self) -> int:
        """Unchanged windows of partition counts the trigger currently adds up."""
        return len(self._evidence)

    def restore(self, directory: Mapping[str, Partitions], now_s: float) -> None:
        """Adopt ``directory`` (as read back from the control topic) as the current one."""
        self._entries = {key: _Entry(tuple(parts), now_s, now_s) for key, parts in directory.items()}
        self._evidence.clear()

    def hot_partitions(self, loads: Sequence[float], span_s: float, level: float) -> list[int]:
        """Partitions whose rate in ``loads`` (events/s, counted over ``span_s`` seconds) is above
        ``level × mean`` by more than counting noise explains (``z × sqrt(count) / span_s``)."""
        margin = self._margins(loads, span_s)
        bar = level * sum(loads) / len(loads)
        return [p for p, (x, m) in enumerate(zip(loads, margin)) if x - m > bar]

    def _under_target(self, loads: Sequence[float], span_s: float) -> bool:
        """True when every partition's rate in ``loads`` plus its counting noise is under the target:
        what ends an episode. Not being shown above the aim is not enough: a run of windows that
        happens to read low would end it while a partition stays truly above the target."""
        margin = self._margins(loads, span_s)
        bar = self.policy.balance_target * sum(loads) / len(loads)
        return all(x + m <= bar for x, m in zip(loads, margin))

    def _margins(self, loads: Sequence[float], span_s: float) -> list[float]:
        z = noise_z(len(loads), self.policy.confidence)
        return [_noise(x, span_s, z) for x in loads]

    def decide(self, view: MergedView, now_s: float) -> list[Decision]:
        """The directory changes this view calls for at ``now_s``, heaviest key first.

        Nothing is decided when the policy is disabled, the view misses a partition's
        rate (an instance has not reported yet: planning on a partial view would pile
        keys onto the silent partitions), the last change has not settled (``propagation_s``
        and then ``settle_s`` have not passed, or a merged window began before the change
        was in force, ``propagation_s`` after it), or no
        partition is above the target by more than counting noise explains, in this
        window or in the unchanged windows before it (see the module docstring).
        Raises InvalidArgumentError if ``now_s`` is not finite.
        """
        if not math.isfinite(now_s):
            raise InvalidArgumentError(f"now_s must be a finite number of seconds, got {now_s!r}")
        policy = self.policy
        n = policy.partitions
        if not policy.enabled or now_s < self._settled_at_s:
            return []
        if view.window_start_s is not None and view.window_start_s < self._in_force_at_s - 1e-6:
            return []  # some instance's window still holds traffic routed before the last change
        rates = view.partition_rates
        if any(p not in rates for p in range(n)) or view.total_rate <= 0:
            return []
        current = [rates[p] for p in range(n)]
        window_span_s = view.total / view.total_rate if view.total > 0 else max(view.window_s, 1e-9)
        self._gather(current, window_span_s, view.window_s, now_s)
        loads, span_s = current, window_span_s
        # Hysteresis: a plan cut short by max_changes goes on at the aim in the next round.
        hot = self.hot_partitions(current, span_s, policy.balance_aim if self._unfinished else policy.balance_target)
        self._unfinished = False  # one round at the aim; a plan cut short again sets it again
        evict_z = _EVICT_Z
        if not hot and len(self._evidence) > 1:  # a small imbalance shows after a few windows
            loads, span_s = self._evidence_loads()
            hot = self.hot_partitions(loads, span_s, policy.balance_target)
            if not hot and self._episode:
                # Hysteresis: once an imbalance was acted on, the evidence is held to the aim (keys leave
                # only the partitions above it beyond noise) until a full run of windows clears it.
                hot = self.hot_partitions(loads, span_s, policy.balance_aim)
                evict_z = noise_z(n, policy.confidence)
            if not hot and len(self._evidence) >= policy.evidence_windows and self._under_target(loads, span_s):
                self._episode = False
        margin = self._margins(loads, span_s)
        mean = sum(loads) / n
        cap = policy.balance_aim * mean
        keys = self._candidates(view, loads, margin, cap)
        by_key = {k.key: k for k in keys}
        z = noise_z(n, policy.confidence)
        negligible = _NEGLIGIBLE * (policy.balance_target - 1) * mean  # too light to unbalance any partition
        for key, entry in self._entries.items():
            k = by_key[key]
            listed = key in view.rates
            if entry.placed_rate is None:  # read back, not placed here: a key nobody lists has faded
                entry.placed_rate = k.rate if listed else math.inf
            together = loads[k.home] + k.rate  # its home with it back, plus the noise of that count
            # Its traffic moved on (a steady key stays put: no churn), judged by what it may carry at most:
            # one window of a light key is mostly noise, and no instance listing it says only that it is
            # under the summaries' floor of the partitions it goes to (its rate here). A key placed at a
            # few events a window drifts across that floor; taking each dip for a fade sent it home.
            if listed:
                ceiling = k.rate + _noise(k.rate, window_span_s, z)  # key rates are one window's counts
            else:
                ceiling = k.rate
                by_key[key] = k = k._replace(rate=min(k.rate, negligible))
            faded = ceiling <= entry.placed_rate / 2
            if faded and (ceiling <= negligible or together + _noise(together, span_s, z) <= cap):
                entry.roomy_since_s = now_s if entry.roomy_since_s is None else entry.roomy_since_s
            else:
                entry.roomy_since_s = None

        keys = list(by_key.values())

        def retiring(key: str) -> bool:
            entry = self._entries.get(key)
            return entry is not None and entry.roomy_since_s is not None and now_s - entry.roomy_since_s >= policy.hold_s

        balanced = not hot
        if balanced and not any(retiring(key) for key in self._entries):
            return []

        def held(key: str) -> bool:
            entry = self._entries.get(key)
            return entry is not None and now_s - entry.changed_s < policy.hold_s

        slack = [m * evict_z / noise_z(n, policy.confidence) for m in margin]
        plan = plan_placements(policy, loads, keys if not balanced else [k for k in keys if retiring(k.key)],
                               self.directory, retire=retiring, held=held, slack=slack, negligible=negligible)
        self._unfinished = len(plan.changed) >= policy.max_changes
        if not plan.changed:
            return []
        if not balanced:
            before = max(x - m for x, m in zip(plan.loads_before, margin))
            after = max(x - m for x, m in zip(plan.loads_after, margin))
            if not after < before * _IMPROVEMENT:
                return []  # not worth the per-key order the changes cost
        self.last_plan = plan
        self._episode = self._episode or not balanced
        out = []
        for key in plan.changed:
            k = by_key[key]
            share = min(1.0, k.rate / view.total_rate)
            target = plan.directory.get(key)
            if target is None:
                entry = self._entries.pop(key)
                out.append(Decision(key, (k.home,), k.rate, share, k.home, entry.since_s, "retired"))
                continue
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(target, now_s, now_s)
            entry.partitions, entry.changed_s, entry.roomy_since_s, entry.placed_rate = target, now_s, None, k.rate
            out.append(Decision(key, target, k.rate, share, k.home, entry.since_s, "placed"))
        # Retiring keys that went quiet moves next to nothing: in-flight records cannot distort a window,
        # and waiting out propagation_s and settle_s after it delayed a new elephant by seconds.
        if sum(by_key[key].rate for key in plan.changed) > negligible:
            self._in_force_at_s = now_s + policy.propagation_s
            self._settled_at_s = self._in_force_at_s + policy.settle_s
            self._evidence.clear()  # the loads change now: earlier windows no longer describe them
        return out

    def _gather(self, loads: Sequence[float], span_s: float, window_s: float, now_s: float) -> None:
        """Keep this window's partition counts if it does not overlap the last one kept."""
        if self._evidence and len(self._evidence[-1][1]) != len(loads):
            self._evidence.clear()  # the partition count changed
        if now_s - self._evidence_at_s < window_s * (1 - 1e-9) and self._evidence:
            return
        self._evidence.append((span_s, tuple(x * span_s for x in loads)))
        del self._evidence[:-self.policy.evidence_windows]
        self._evidence_at_s = now_s

    def _evidence_loads(self) -> tuple[list[float], float]:
        """Rates over every kept window together, and the seconds they cover."""
        span_s = sum(span for span, _ in self._evidence)
        totals = [sum(col) for col in zip(*(counts for _, counts in self._evidence))]
        return [x / span_s for x in totals], span_s

    def _candidates(self, view: MergedView, loads: Sequence[float], margin: Sequence[float],
                    cap: float) -> list[KeyLoad]:
        """The heaviest keys above ``min_rate`` (at most ``max_keys``), every reported key that
        goes to a partition over ``cap`` beyond noise (at 1,000 partitions the global top
        misses the keys that explain a mid-weight partition's excess), and every directory key
        (one no instance listed at the bound of the partitions it goes to)."""
        policy = self.policy
        heavy = sorted(((rate, key) for key, rate in view.rates.items() if rate >= policy.min_rate), reverse=True)
        chosen = {key: rate for rate, key in heavy[:policy.max_keys]}
        over = {p for p, (x, m) in enumerate(zip(loads, margin)) if x - m > cap}
        if over:
            for rate, key in heavy[policy.max_keys:]:
                entry = self._entries.get(key)
                parts = entry.partitions if entry is not None else (self.home(key),)
                if not over.isdisjoint(parts):
                    chosen[key] = rate
        floors = view.partition_floors
        for key, entry in self._entries.items():
            if key not in chosen:  # unlisted: at most the floor of each partition it goes to
                chosen[key] = view.rates.get(key, sum(floors.get(p, 0.0) for p in entry.partitions))
        return [KeyLoad(key, rate, self.home(key)) for key, rate in chosen.items()]
