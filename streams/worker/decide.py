"""The decider as a stage of a :class:`~streams.worker.loop.ConsumerLoop`: summaries in, directory changes out.

The sketches topic has one partition, so one worker of the fleet decides: the one its
loop's group gives that partition. Each instance's summary (heavy keys and partition
rates of its window) goes through the :class:`~streams.core.hotkeys.balancer.BalanceLoop`
that ``streams simulate`` runs too; every directory change becomes one record for the
compacted hot-keys topic: a version 2 placement notice (Avro, header
``streams-schema: hot_key_notice/2``) or, for a key sent home, a tombstone, keyed by the
key's canonical bytes. A worker that takes the partition first reads the published
directory back (``published``), so it continues the directory the producers apply.
The stage reads summaries from the end of the topic: an old summary says nothing
about the load now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson
from confluent_kafka import OFFSET_END

from streams.core.errors import HotKeyNoticeError, StreamsError
from streams.core.hotkeys.balancer import BalanceLoop
from streams.core.hotkeys.decider import Decision, max_over_mean
from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.directory import HotKeyNotice, encode_notice
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import RoutingMap
from streams.worker.processor import InMessage, Output

__all__ = ["DeciderStage", "Decided"]

log = logging.getLogger(__name__)


class Decided(NamedTuple):
    """What a decider tick produced: nothing (notices go out as summaries arrive)."""

    outputs: tuple[Output, ...] = ()


class _NoState:
    """The decider keeps no changelog: its state is the published directory, read back on assignment."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def mark_stale(self) -> None:
        """Nothing to re-index."""


class DeciderStage:
    """Runs the :class:`BalanceLoop` on the summaries of the sketches topic (see the module docstring).

    ``map_in_force()`` is the routing map being produced now (its partition count and
    each key's hash home); ``published()`` reads the directory on the hot-keys topic,
    by key text; ``instance`` names this worker in the notices; ``on_decision`` and
    ``on_balance`` feed metrics. Outputs have role ``hot_keys``, the canonical key as
    key, and the encoded notice (None for a tombstone) as record.
    """

    def __init__(self, balance_loop: BalanceLoop, *, map_in_force: Callable[[], RoutingMap],
                 published: Callable[[], Mapping[str, tuple[int, ...]]], instance: str,
                 on_decision: Callable[[Decision], None] = lambda d: None,
                 on_balance: Callable[[float], None] = lambda b: None,
                 on_rejected: Callable[[], None] = lambda: None) -> None:
        self.balance_loop = balance_loop
        self.decider = balance_loop.decider
        self._map_in_force = map_in_force
        self._published = published
        self._instance = instance[:1024]
        self._on_decision = on_decision
        self._on_balance = on_balance
        self._on_rejected = on_rejected
        self._owned: set[tuple[str, int]] = set()
        self._directory_known = False
        self._directory_unreadable = False
        self.store = _NoState()

    def assign(self, sources: Iterable[tuple[str, int]]) -> None:
        """Own ``sources``; newly given the partition, the directory is read back before the next decision."""
        new = set(sources)
        if new - self._owned:
            self._directory_known = False  # another instance may have decided meanwhile
        self._owned = new

    def resume_offset(self, source: tuple[str, int]) -> int:
        """The end of the topic: only summaries from now on describe the load now."""
        return OFFSET_END

    def handle_batch(self, msgs: Iterable[InMessage]) -> list[Output]:
        """Offer each valid summary to the balance loop; returns the directory changes to publish."""
        out: list[Output] = []
        for msg in msgs:
            try:
                summary = SketchSummary.from_record(orjson.loads(msg.value or b""))
            except (orjson.JSONDecodeError, HotKeyNoticeError, TypeError, ValueError) as exc:
                log.warning("rejected sketch summary at %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, exc)
                self._on_rejected()
                continue
            if not self._directory_known and not self._read_directory():
                continue
            now_s = time.time()
            routing_map = self._map_in_force()
            outcome = self.balance_loop.offer(summary, now_s)
            if outcome.measured is not None:
                self._on_balance(outcome.measured)
            for decision in outcome.decisions:
                out.append(self._notice(decision, now_s, routing_map))
                self._on_decision(decision)
                log.info("directory %s: %r -> partitions %s (%.0f events/s, %.1f%% of traffic, home %d)",
                         decision.kind, decision.key[:100], list(decision.partitions), decision.rate,
                         100 * decision.share, decision.home)
            plan = self.decider.last_plan
            if outcome.decisions and plan is not None:
                log.info("balance: max/mean %.2f measured, %.2f predicted", max_over_mean(plan.loads_before),
                         max_over_mean(plan.loads_after))
        return out

    def _read_directory(self) -> bool:
        """Read the published directory back; False (the summary is set aside) while the cluster cannot say it.

        Deciding without it would undo placements another instance published. A summary is a
        report of load that the next one repeats, so none is kept for later; the worker's
        writers, not the decider, judge how long an outage may last.
        """
        try:
            self.decider.restore(self._published(), time.time())
        except StreamsError as exc:
            if not self._directory_unreadable:
                log.warning("decider cannot read the published directory (%s): no decision until it can", exc)
            self._directory_unreadable = True
            return False
        if self._directory_unreadable:
            log.info("decider read the published directory back: deciding again")
        self._directory_unreadable = False
        self._directory_known = True
        return True

    def _notice(self, decision: Decision, now_s: float, routing_map: RoutingMap) -> Output:
        """One directory change as a hot-keys record: a placement notice, or a tombstone for a key sent home."""
        key = canonical_key(decision.key)
        if decision.kind == "retired":
            return Output("hot_keys", key, None)
        now_ms = int(now_s * 1000)
        notice = HotKeyNotice(
            key=key, key_display=decision.key, placement=decision.partitions, home=decision.home,
            estimated_rate=decision.rate, share=decision.share, partitions=routing_map.partitions,
            detected_at_ms=now_ms, hot_since_ms=min(now_ms, int(decision.since_s * 1000)),
            map_version=routing_map.version, detector=self._instance)
        return Output("hot_keys", key, encode_notice(notice))

    def tick(self, fetch: Mapping[tuple[str, int], Any] | None = None) -> Decided:
        """Nothing periodic: the loop's persist on each tick pushes the notices out within a tick."""
        return Decided()

    def listening_resumed(self) -> None:
        """Nothing here depends on silence."""

    def persist(self, flush: Callable[[], None]) -> None:
        """Make the notices durable."""
        flush()
