"""The decider's loop: what one decider does with each instance summary that arrives.

The worker (``decide_hot_keys`` in :mod:`streams.worker.app`) and ``streams simulate``
(:mod:`streams.core.fleet`) run this same loop, so the simulation sees the same
information at the same pace as the fleet: keep the latest summary of every
instance, drop instances silent for more than three windows, merge, measure the
balance, and ask the :class:`~streams.core.hotkeys.decider.BalanceDecider` once the
window holds enough events to mean anything.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from streams.core.hotkeys.decider import BalanceDecider, Decision, max_over_mean
from streams.core.hotkeys.sketch import MergedView, SketchSummary, merge_summaries

__all__ = ["BalanceLoop", "Round"]

# A merged rate this much below the one a window earlier: a stream stopping or pausing. The instances'
# windows then end at different points of the fall (each has its own lag), so their partitions compare
# as they would not in steady traffic. Counting noise of a window is ~1 %. A rising rate is not waited
# out: a new elephant adds traffic, and it must be placed within about a window.
_FALLING = 0.15

# An instance more than a tenth of a window behind (half a second at 5 s; a healthy consumer is
# one fetch, ~0.1 s, behind) reads faster than the traffic comes until it has caught up.
_BACKLOG_SHARE = 0.1


class Round(NamedTuple):
    """What one summary led to: the merged ``view``, the ``measured`` max/mean of its
    partition rates (None while an instance has not reported every partition yet), and
    the ``decisions`` to publish (empty when none)."""

    view: MergedView
    measured: float | None
    decisions: tuple[Decision, ...]


class BalanceLoop:
    """Feeds the decider from summaries, one :meth:`offer` per summary received.

    ``window_s`` is the workers' sketch window (a summary older than ``3 × window_s + 1``
    seconds is an instance gone); ``min_window_events`` is how many events the merged
    window must hold before the decider is asked (nor is it asked before the windows
    span four fifths of ``window_s``, nor within ``window_s`` of a summary showing an
    instance's partitions changed or an instance more than a tenth of its window behind,
    nor while the merged rate is more than 15 % below the one a window earlier);
    ``interval_s`` the least time between
    two rounds (the workers' summary tick: at 50 workers, four summaries each per second,
    merging on every one would cost a core; once per tick costs ~25 ms/s). Not thread-safe.
    """

    def __init__(self, decider: BalanceDecider, window_s: float, min_window_events: int,
                 interval_s: float = 0.25) -> None:
        """Loop around ``decider``; see the class docstring."""
        self.decider = decider
        self.max_age_s = 3 * window_s + 1
        self.min_window_events = min_window_events
        self.min_span_s = window_s * 0.8 * (1 - 1e-9)  # four of the sketch's five slices
        self.interval_s = interval_s
        self._summaries: dict[str, SketchSummary] = {}
        self._last_round_s = -math.inf
        self._last: Round | None = None
        self.window_s = window_s
        self._owned: dict[str, frozenset[int]] = {}  # partitions each instance reported last
        self._steady_at_s = -math.inf  # a window after the last change of any instance's partitions
        self._rates: list[tuple[float, float]] = []  # (at, merged rate) of recent rounds, oldest first

    def add(self, summary: SketchSummary) -> None:
        """Keep ``summary`` as the latest of its instance, without a round."""
        owned = frozenset(p for p, _ in summary.partition_counts)
        if self._owned.get(summary.instance) != owned:  # a rebalance moved partitions: its window mixes owners
            self._owned[summary.instance] = owned
            self._steady_at_s = max(self._steady_at_s, summary.at_s + self.window_s)
        if summary.backlog > _BACKLOG_SHARE * summary.total:  # catching up: its counts are its backlog's
            self._steady_at_s = max(self._steady_at_s, summary.at_s + self.window_s)
        self._summaries[summary.instance] = summary

    def offer(self, summary: SketchSummary, now_s: float) -> Round:
        """Keep ``summary`` and run a :meth:`round` at ``now_s``; if one ran less than ``interval_s``
        ago, return that round's view and measure with no decisions instead (the summary waits for
        the next round). Raises InvalidArgumentError if ``now_s`` is not finite."""
        self.add(summary)
        if self._last is not None and now_s - self._last_round_s < self.interval_s:
            return Round(self._last.view, self._last.measured, ())
        self._last = self.round(now_s)
        return self._last

    def round(self, now_s: float) -> Round:
        """Merge the latest summaries (dropping instances gone silent) and decide at ``now_s``.
        Raises InvalidArgumentError if ``now_s`` is not finite."""
        self._last_round_s = now_s
        view = merge_summaries(self._summaries.values(), now_s=now_s, max_age_s=self.max_age_s)
        for stale in set(self._summaries) - set(view.instances):
            del self._summaries[stale]
        return self.consider(view, now_s)

    def consider(self, view: MergedView, now_s: float) -> Round:
        """Measure ``view`` and decide at ``now_s`` (``streams simulate --exact`` hands in exact
        counts here instead of summaries). Raises InvalidArgumentError if ``now_s`` is not finite."""
        rates = view.partition_rates
        n = self.decider.policy.partitions
        measured = max_over_mean([rates[p] for p in range(n)]) if all(p in rates for p in range(n)) else None
        if view.total < self.min_window_events:
            return Round(view, measured, ())  # too few events in the window for rates to mean anything yet
        if view.total_rate <= 0 or view.total / view.total_rate < self.min_span_s:
            return Round(view, measured, ())  # a young sketch: a first plan on one slice would be noise-bound
        if self._falling(view.total_rate, now_s):
            return Round(view, measured, ())  # the stream is stopping: wait until its rate holds still
        if now_s < self._steady_at_s:
            # Partitions changed hands a window ago or less: the new owner reads its backlog (rates above
            # the traffic), the old one's window still counts them. Neither is the load producers put there.
            return Round(view, measured, ())
        return Round(view, measured, tuple(self.decider.decide(view, now_s)))

    def _falling(self, rate: float, now_s: float) -> bool:
        """Remember ``rate`` at ``now_s``; True when it is more than 15 % below the merged rate of
        about a window earlier (the newest one at least ``window_s`` old)."""
        rates = self._rates
        rates.append((now_s, rate))
        while len(rates) >= 2 and now_s - rates[1][0] >= self.window_s:
            rates.pop(0)  # rates[0] stays the newest at least a window old
        at_s, earlier = rates[0]
        if now_s - at_s < self.window_s:
            return False  # nothing a window old to compare with yet
        return rate < (1 - _FALLING) * earlier
