"""Stage 1 on a batched librdkafka consumer: the events path without faust's per-record machinery.

faust hands an agent one record at a time through its consumer thread, conductor,
channel queue and ``Event`` objects: about 75 µs a record on this project's
benchmark machine, five times :meth:`EventProcessor.handle` itself. Stage 1 therefore
reads the events topic with its own ``confluent_kafka.Consumer`` in its own thread
(:class:`Stage1Loop`), ``consume()`` returning batches of records that go straight
to :meth:`EventProcessor.handle`; faust keeps stage 2, the decider and the timers.

What faust did for stage 1 is done here, in the same order:

* **group**: the consumer group ``<app_id>-events`` (:attr:`WorkerSettings.events_group`),
  Kafka's ``range`` assignor, so partition p of every events topic (a topic per bucket
  included) goes to one worker, the owner of changelog partition p;
* **state**: on assignment the stage-1 changelog partitions of the new partitions are
  read back (:func:`~streams.kafka.changelog.read_changelog`) into the store, and each
  partition resumes at the first offset no checkpoint vouches for
  (:meth:`EventProcessor.resume_offset`), not at the group's committed offset;
* **persist and commit**: every ``tick_s`` (and every ``persist_every`` records)
  :meth:`EventProcessor.persist` makes state and outputs durable in its crash-safe
  order, then the offsets it vouches for are committed (for lag and ``topics roll``;
  a restart trusts the checkpoint);
* **revoke**: partitions taken away are persisted and committed first; their state is
  kept, with each changelog partition's end offset, and reused if the next assignment
  gives the partition back and its changelog has not moved meanwhile (nobody wrote
  it), else dropped and read back. ``range`` is eager, so every rebalance (a new
  bucket topic, a worker joining) revokes everything: without this each one would
  re-read every changelog partition. Partitions *lost* (the group went on without
  this worker) are forgotten without a write, since another worker may own them already;
* **idleness**: librdkafka's statistics (every second) say per partition whether it
  is fetched from a live leader and where its end is (:func:`fetch_states`), so the
  watermark never judges a partition idle that is merely unreachable or behind.

A failure (a write the broker refused, a fatal consumer error) stops the loop
without acknowledging anything and is handed to ``on_failure``; the worker stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.kafka.changelog import read_changelog
from streams.kafka.clients import new_consumer
from streams.worker.processor import EventProcessor, FetchState, InMessage, Output, TickResult
from streams.worker.writer import KafkaWriter

__all__ = ["Stage1Loop", "fetch_states", "BATCH"]

log = logging.getLogger(__name__)

#: The most records one ``consume()`` call returns.
BATCH = 1000
#: How often librdkafka reports partition fetch state (the idle rule's input).
STATS_INTERVAL_MS = 1000
#: Committed offsets are for lag and ``topics roll`` (a restart trusts the checkpoint): at most one commit a
#: second while running, as faust's ``broker_commit_interval``; a revoke or a stop commits at once.
COMMIT_INTERVAL_S = 1.0
#: How long a revoke or an assignment waits for one changelog partition's end offset.
CHANGELOG_END_TIMEOUT_S = 5.0

Source = tuple[str, int]
_NO_HEADERS: Mapping[str, bytes] = {}


def fetch_states(stats: Mapping[str, Any], owned: Iterable[Source], now_ms: int,
                 previous: Mapping[Source, FetchState], starts: Mapping[Source, int]) -> dict[Source, FetchState]:
    """The :class:`FetchState` of each ``owned`` partition from one librdkafka statistics report.

    A partition counts as heard from now when librdkafka fetches it (``fetch_state``
    ``active``) from a leader whose connection is up and knows its high watermark;
    otherwise it keeps the time it was last heard from (None if never), so a dead
    leader makes it look silent, and the watermark holds it active (not idle).
    ``starts`` is where each partition's assignment began.
    """
    up = {b.get("nodeid") for b in stats.get("brokers", {}).values() if b.get("state") == "UP"}
    out: dict[Source, FetchState] = {}
    topics = stats.get("topics", {})
    for source in owned:
        topic, partition = source
        p = topics.get(topic, {}).get("partitions", {}).get(str(partition))
        before = previous.get(source)
        heard = before.fetched_at_ms if before is not None else None
        if p is None:
            out[source] = FetchState(None, heard, starts.get(source), None)
            continue
        high, next_offset = p.get("hi_offset", -1), p.get("next_offset", -1)
        if p.get("fetch_state") == "active" and p.get("leader") in up and high >= 0:
            heard = now_ms
        out[source] = FetchState(high if high >= 0 else None, heard, starts.get(source),
                                 next_offset if next_offset >= 0 else None)
    return out


class Stage1Loop:
    """Runs stage 1 for one worker in its own thread: consume, handle, tick, persist, commit.

    ``processor`` (and its store) belongs to this loop's thread alone.
    ``send`` writes one output through ``writer``; ``after_tick`` gets each tick's
    result once it is durable (the app publishes the sketch summary and metrics there);
    ``on_failure`` gets the exception that stopped the loop.
    """

    def __init__(self, *, processor: EventProcessor, writer: KafkaWriter,
                 consumer_config: Mapping[str, Any], changelog_topic: str, topics: Iterable[str],
                 send: Callable[[Output], None], after_tick: Callable[[TickResult], None],
                 on_durable: Callable[[int], None], on_failure: Callable[[BaseException], None],
                 tick_s: float = 0.25, persist_every: int = 20_000) -> None:
        self.processor = processor
        self.writer = writer
        self.consumer_config = dict(consumer_config)
        self.changelog_topic = changelog_topic
        self._send = send
        self._after_tick = after_tick
        self._on_durable = on_durable
        self._on_failure = on_failure
        self.tick_s = tick_s
        self.persist_every = persist_every
        self._wanted = sorted(set(topics))
        self._subscribed: list[str] | None = None
        self._owned: set[Source] = set()
        self._starts: dict[Source, int] = {}
        self._fetch: dict[Source, FetchState] = {}
        self._committed: dict[Source, int] = {}
        self._next_commit = 0.0
        self._unpersisted = 0
        self._rebalanced = False
        self._revoked = False  # revoked, not assigned again yet: no tick, no persist
        self._parked: dict[int, int] = {}  # changelog partition -> its end offset when revoked
        self._failed = False
        self._closing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None

    # -- control, from any thread ------------------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread."""
        self._thread = threading.Thread(target=self._run, name="streams-stage1", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the loop to persist, commit and leave the group; wait up to ``timeout_s`` for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read ``topics`` from now on (the bucket topics that exist); applied by the loop's thread."""
        self._wanted = sorted(set(topics))

    # -- the loop's thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._consumer = new_consumer({
                **self.consumer_config,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                "statistics.interval.ms": STATS_INTERVAL_MS,
                "stats_cb": self._on_stats,
            })
            self._loop()
            self._next_commit = 0.0
            self._persist()
            self._closing = True
        except BaseException as exc:  # noqa: BLE001 - handed to on_failure: the worker must stop
            self._failed = self._closing = True
            log.exception("stage 1 stopped: %s", exc)
            self._on_failure(exc)
        finally:
            if self._consumer is not None:
                try:
                    self._consumer.close()  # leaves the group (revoking persists, unless failed)
                except Exception as exc:  # noqa: BLE001 - closing after a failure: report and go
                    log.warning("closing the events consumer: %r", exc)

    def _loop(self) -> None:
        consumer, handle, send = self._consumer, self.processor.handle_batch, self._send
        assert consumer is not None
        next_tick = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            if self._wanted != self._subscribed:
                self._resubscribe()
            msgs = consumer.consume(BATCH, max(0.0, min(0.1, next_tick - time.monotonic())))
            if self._rebalanced:  # a callback ran inside consume(): drop records of partitions no longer held
                self._rebalanced = False
                owned = self._owned
                msgs = [m for m in msgs if m.error() is not None or (m.topic(), m.partition()) in owned]
            records = []
            for msg in msgs:
                if msg.error() is not None:
                    self._consumer_error(msg.error())
                    continue
                headers = msg.headers()
                records.append(InMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                         dict(headers) if headers else _NO_HEADERS))
            for output in handle(records):
                send(output)
            self._unpersisted += len(records)
            if self._unpersisted >= self.persist_every:
                self._persist()
            if time.monotonic() >= next_tick:
                self._tick()
                next_tick = time.monotonic() + self.tick_s

    def _resubscribe(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        wanted = list(self._wanted)
        if wanted:
            log.info("stage 1 subscribes to %d events topic(s): %s", len(wanted), wanted[:5])
            consumer.subscribe(wanted, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            consumer.unsubscribe()
        self._subscribed = wanted

    def _consumer_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise KafkaException(err)
        log.warning("events consumer: %s", err)

    def _tick(self) -> None:
        if self._revoked:
            return  # the processor still holds the revoked partitions' state: closing their buckets is not ours
        owned = self._owned
        fetch = {s: f for s, f in self._fetch.items() if s in owned}
        result = self.processor.tick(fetch)
        for output in result.outputs:
            self._send(output)
        self._persist()
        self._after_tick(result)

    def _persist(self) -> None:
        """Make everything handled durable (the processor's crash-safe order), then commit what it vouches for."""
        if self._revoked:
            return
        handled, self._unpersisted = self._unpersisted, 0
        self.processor.persist(self.writer.flush)
        if handled:
            self._on_durable(handled)
        if time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + COMMIT_INTERVAL_S
            self._commit(self._owned, asynchronous=True)

    def _commit(self, sources: Iterable[Source], *, asynchronous: bool) -> None:
        offsets = []
        for source in sources:
            offset = self.processor.resume_offset(source)
            if offset > 0 and self._committed.get(source) != offset:
                offsets.append(TopicPartition(source[0], source[1], offset))
                self._committed[source] = offset
        if offsets and self._consumer is not None:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=asynchronous)
            except KafkaException as exc:  # the checkpoint is what a restart trusts: a lost commit only shows lag
                log.warning("committing stage 1's offsets: %s", exc)

    # -- rebalance callbacks (run inside consume(), on the loop's thread) -----------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        new = {(tp.topic, tp.partition) for tp in partitions}
        wanted = {p for _, p in new}
        kept = self._unchanged(wanted)
        # Keep only the state of kept changelog partitions, read the others back, then own all of new.
        self.processor.assign(s for s in new if s[1] in kept)
        self._restore(wanted - kept)
        self.processor.assign(new)
        self._revoked, self._parked = False, {}
        for tp in partitions:
            source = (tp.topic, tp.partition)
            tp.offset = self.processor.resume_offset(source)
            self._starts[source] = tp.offset
            self._committed.pop(source, None)
        self._owned = new
        self._rebalanced = True
        log.info("stage 1 assigned %d partition(s); changelog partitions kept %s, read back %s", len(partitions),
                 sorted(kept), sorted(wanted - kept))
        consumer.assign(partitions)  # eager (range): the whole assignment, the previous one was revoked

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        if self._failed or not gone:
            self._forget(gone)
            consumer.unassign()
            return
        handled, self._unpersisted = self._unpersisted, 0
        self.processor.persist(self.writer.flush)
        self.writer.flush()  # the closed buckets' tombstones too: the end offsets below must cover every write
        if handled:
            self._on_durable(handled)
        self._commit(gone & self._owned, asynchronous=False)
        self._parked = {} if self._closing else self._changelog_ends({p for _, p in gone})
        self._revoked = True
        self._release(gone)
        consumer.unassign()

    def _changelog_ends(self, partitions: set[int]) -> dict[int, int]:
        """The end offset of each changelog partition (those that cannot be read are left out: read back later)."""
        ends = {}
        for p in partitions:
            try:
                _, ends[p] = self._consumer.get_watermark_offsets(  # type: ignore[union-attr]
                    TopicPartition(self.changelog_topic, p), timeout=CHANGELOG_END_TIMEOUT_S)
            except KafkaException as exc:
                log.warning("end of changelog %s[%d] unknown (%s): it will be read back if assigned again",
                            self.changelog_topic, p, exc)
        return ends

    def _unchanged(self, wanted: set[int]) -> set[int]:
        """The changelog partitions in ``wanted`` whose state this worker kept at the revoke and nobody wrote since."""
        if not self._revoked:
            return set()
        parked = {p: end for p, end in self._parked.items() if p in wanted}
        now = self._changelog_ends(set(parked))
        return {p for p, end in parked.items() if now.get(p) == end}

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        log.warning("stage 1 lost %d partition(s) to the group (no heartbeat in time): dropping their unflushed state",
                    len(gone))
        self._forget(gone)
        consumer.unassign()

    def _forget(self, gone: set[Source]) -> None:
        """Give up ``gone`` and its state (lost, or revoked after a failure): nothing is kept for a return."""
        self._revoked, self._parked = False, {}
        self._release(gone)
        self.processor.assign(self._owned)  # drops the state of changelog partitions no longer held

    def _release(self, gone: set[Source]) -> None:
        """Stop owning ``gone``: what this loop tracked of it goes; the records of a batch in hand are dropped."""
        self._owned = self._owned - gone
        for source in gone:
            self._starts.pop(source, None)
            self._fetch.pop(source, None)
            self._committed.pop(source, None)
        self._rebalanced = True

    def _restore(self, partitions: set[int]) -> None:
        """Read changelog ``partitions`` back into the store (JSON key and value, as they were written)."""
        data, loads, restored = self.processor.store.data, orjson.loads, 0
        for _, key, value in read_changelog(self.consumer_config, self.changelog_topic, partitions):
            k = loads(key)
            if value is None:
                data.pop(k, None)
            else:
                data[k] = loads(value)
            restored += 1
        self.processor.store.mark_stale()
        if restored:
            log.info("stage 1 restored %d changelog record(s) of partition(s) %s", restored, sorted(partitions))

    def _on_stats(self, raw: str) -> None:
        try:
            stats = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        self._fetch = fetch_states(stats, self._owned, int(time.time() * 1000), self._fetch, self._starts)
