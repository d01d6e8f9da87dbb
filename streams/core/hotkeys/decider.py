"""The hot-key decider: which keys are hot, and how many ways to split them.

It reads a :class:`~streams.core.hotkeys.sketch.MergedView` (every worker instance's
sketch summary folded together) and applies a :class:`HotKeyPolicy` with
hysteresis, emitting a :class:`Decision` only when something changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

from streams.core.hotkeys.sketch import MergedView
from streams.core.validate import require

__all__ = ["HotKeyPolicy", "Decision", "HotKeyDecider", "exact_hot_keys"]

@dataclass(frozen=True)
class HotKeyPolicy:
    """When a key is hot, and how many ways to split it.

    With ``fair = total_rate / partitions``, a key *enters* hot when its rate is
    above ``enter = max(share_multiple * fair, min_rate)`` and is *below* when its
    rate is under ``exit = enter * cool_multiple / share_multiple``. A hot key cools
    only after staying below for ``hold_s`` seconds. Its split factor is
    ``ceil(rate / target)`` clamped to ``2..partitions``, where ``target`` is
    ``target_partition_rate`` or, when that is 0, ``fair * target_fair_fraction``
    (pieces smaller than a fair share pack better: a split key's pieces sit on
    consecutive partitions beside other keys). At most ``max_hot_keys``
    keys are hot at once (the heaviest win). Raises ConfigError naming a bad field.
    """

    partitions: int
    share_multiple: float = 2.0
    min_rate: float = 100.0
    cool_multiple: float = 1.0
    hold_s: float = 10.0
    target_partition_rate: float = 0.0
    target_fair_fraction: float = 1.0
    max_hot_keys: int = 1000

    def __post_init__(self) -> None:
        require(self.partitions.__class__ is int and 2 <= self.partitions <= 2**31 - 1, "partitions",
                 "an int in [2, 2**31-1] (one partition cannot be split across)", self.partitions)
        for name in ("share_multiple", "min_rate", "cool_multiple", "hold_s", "target_partition_rate",
                     "target_fair_fraction"):
            value = getattr(self, name)
            require(value.__class__ in (int, float) and math.isfinite(value) and value >= 0, name,
                     "a finite number >= 0", value)
            object.__setattr__(self, name, float(value))
        require(self.share_multiple > 0, "share_multiple", "a number > 0", self.share_multiple)
        require(0 < self.target_fair_fraction <= 1, "target_fair_fraction", "a number in (0, 1]",
                 self.target_fair_fraction)
        require(0 < self.cool_multiple <= self.share_multiple, "cool_multiple",
                 "a number in (0, share_multiple]", self.cool_multiple)
        require(self.max_hot_keys.__class__ is int and 1 <= self.max_hot_keys <= 100_000, "max_hot_keys",
                 "an int in [1, 100000]", self.max_hot_keys)

    def thresholds(self, total_rate: float) -> tuple[float, float]:
        """``(enter, exit)`` rates in events/s for a total rate of ``total_rate``."""
        enter = max(self.share_multiple * total_rate / self.partitions, self.min_rate)
        return enter, enter * self.cool_multiple / self.share_multiple

    def split_factor(self, rate: float, total_rate: float) -> int:
        """``ceil(rate / target)`` clamped to ``2..partitions``; see the class docstring."""
        target = self.target_partition_rate or total_rate / self.partitions * self.target_fair_fraction
        if target <= 0:
            return 2
        return min(self.partitions, max(2, math.ceil(rate / target)))


Kind = Literal["hot", "changed", "cooled", "tombstone"]


class Decision(NamedTuple):
    """One change the decider wants published.

    ``hot``: ``key`` became hot, split ``split_factor`` ways. ``changed``: its split
    factor changed. ``cooled``: it is no longer hot, ``split_factor`` is 1. ``tombstone``:
    forget it (delete its record from the compacted topic). ``rate`` (events/s,
    upper bound) and ``share`` (0..1 of all traffic) are as seen now; ``hot_since_s``
    is when this hot episode began.
    """

    key: str
    split_factor: int
    rate: float
    share: float
    hot_since_s: float
    kind: Kind


@dataclass
class _Tracked:
    k: int
    hot_since_s: float
    below_since_s: float | None = None   # first moment under the exit threshold, this streak
    cooled_at_s: float | None = None     # set once "cooled" was emitted
    shrink_since_s: float | None = None  # first moment a smaller k would have done, this streak
    shrink_to: int = 0                   # the largest k needed during that streak


class HotKeyDecider:
    """Turns merged views into hot/changed/cooled/tombstone decisions, with hysteresis.

    * A key above ``enter`` becomes hot (one ``hot`` decision).
    * Its split factor grows at once when the rate needs more partitions, and shrinks
      only after a smaller factor has sufficed for ``hold_s`` (to the largest factor
      needed meanwhile): a rate wobbling around a multiple of the target changes k
      at most once per ``hold_s``. Each change is one ``changed`` decision.
    * After ``hold_s`` continuously below ``exit`` it is ``cooled`` (k = 1); after
      another ``hold_s`` without re-entering, ``tombstone``. Re-entering while cooled
      is a new ``hot``.

    Only keys declared hot (or cooling) are remembered: at most ``max_hot_keys`` hot
    ones, plus cooled ones for ``hold_s``. A tracked key missing from the view is
    taken at the view's ``unreported_rate`` (its upper bound).
    """

    def __init__(self, policy: HotKeyPolicy) -> None:
        """Create a decider that remembers nothing yet."""
        self.policy = policy
        self._tracked: dict[str, _Tracked] = {}

    @property
    def hot(self) -> dict[str, int]:
        """Keys currently split, with their split factors."""
        return {key: t.k for key, t in self._tracked.items() if t.cooled_at_s is None}

    def decide(self, view: MergedView, now_s: float) -> list[Decision]:
        """The decisions this view calls for at ``now_s``, heaviest key first.

        A view with no instances (none published, or all stale) carries no news:
        nothing is decided and no state changes. Raises ValueError if ``now_s`` is
        not finite.
        """
        if not math.isfinite(now_s):
            raise ValueError(f"now_s must be a finite number of seconds, got {now_s!r}")
        if not view.instances:
            return []
        policy, total_rate = self.policy, view.total_rate
        enter, exit_ = policy.thresholds(total_rate)
        out: list[Decision] = []

        def emit(key: str, k: int, rate: float, t: _Tracked, kind: Kind) -> None:
            share = min(1.0, rate / total_rate) if total_rate > 0 else 0.0
            out.append(Decision(key, k, rate, share, t.hot_since_s, kind))

        hot_now = sum(1 for t in self._tracked.values() if t.cooled_at_s is None)
        for key, rate in sorted(view.rates.items(), key=lambda kv: -kv[1]):
            if rate <= enter:
                break
            t = self._tracked.get(key)
            if t is not None and t.cooled_at_s is None:
                continue  # already hot: handled below
            if hot_now >= policy.max_hot_keys:
                break
            t = self._tracked[key] = _Tracked(k=policy.split_factor(rate, total_rate), hot_since_s=now_s)
            hot_now += 1
            emit(key, t.k, rate, t, "hot")
        fresh = {d.key for d in out}

        for key, t in list(self._tracked.items()):
            if key in fresh:
                continue
            rate = view.rate(key)
            if t.cooled_at_s is not None:
                if now_s - t.cooled_at_s >= policy.hold_s:
                    del self._tracked[key]
                    emit(key, 1, rate, t, "tombstone")
                continue
            if rate < exit_:
                t.below_since_s = now_s if t.below_since_s is None else t.below_since_s
                if now_s - t.below_since_s >= policy.hold_s:
                    t.cooled_at_s = now_s
                    emit(key, 1, rate, t, "cooled")
                    continue
            else:
                t.below_since_s = None
            needed = policy.split_factor(rate, total_rate)
            if needed > t.k:
                t.k, t.shrink_since_s = needed, None
                emit(key, t.k, rate, t, "changed")
            elif needed < t.k:
                if t.shrink_since_s is None:
                    t.shrink_since_s, t.shrink_to = now_s, needed
                t.shrink_to = max(t.shrink_to, needed)
                if now_s - t.shrink_since_s >= policy.hold_s:
                    t.k, t.shrink_since_s = t.shrink_to, None
                    emit(key, t.k, rate, t, "changed")
            else:
                t.shrink_since_s = None
        out.sort(key=lambda d: -d.rate)
        return out


def exact_hot_keys(counts: Mapping[str, int], window_s: float, policy: HotKeyPolicy) -> dict[str, int]:
    """The oracle: keys ``policy`` calls hot given exact ``counts`` over ``window_s``, with their k.

    Rates are ``count / window_s``; the total rate is the sum of all counts over
    ``window_s``. Only the entry threshold applies (there is no history), and at
    most ``max_hot_keys`` keys, the heaviest. Raises ValueError if ``window_s`` <= 0.
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    total_rate = sum(counts.values()) / window_s
    enter, _ = policy.thresholds(total_rate)
    hot = sorted(((c / window_s, key) for key, c in counts.items() if c / window_s > enter), reverse=True)
    return {key: policy.split_factor(rate, total_rate) for rate, key in hot[:policy.max_hot_keys]}
