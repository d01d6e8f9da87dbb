"""ConsumerLoop: the one way the worker reads Kafka. Consume, handle, tick, persist, commit.

Every data stream of the worker (events for stage 1, partials for stage 2, sketch
summaries for the decider) is read by a :class:`ConsumerLoop`: its own librdkafka
``Consumer`` in its own consumer group and thread, ``consume()`` returning batches
that go straight to the stage (a :class:`Stage`: stage 1's
:class:`~streams.worker.processor.EventProcessor`, stage 2's
:class:`~streams.worker.merge.PartialsProcessor`, the
:class:`~streams.worker.decide.DeciderStage`). faust only hosts the loops. The
loop does for every stage, in one place and in this order:

* **group**: Kafka 4's consumer group protocol (KIP-848, ``group.protocol=consumer``)
  where the cluster offers it, with the broker's ``range`` assignor; Kafka's classic
  protocol with the client's eager ``range`` assignor otherwise. Either way partition
  p of every topic the loop reads goes to one worker (``range`` co-partitions topics
  of equal partition counts: the bucket topics of topic-per-bucket mode), and that
  worker owns changelog partition p: the changelog is not consumed through the group,
  it is read back on assignment. With KIP-848 a rebalance is incremental: partitions
  a worker keeps are never revoked, and a handover moves only what changes owner;
  the coordinator pushes assignments with its heartbeat responses.
* **state**: on assignment the changelog partitions of the new partitions are read
  back (:func:`~streams.kafka.changelog.read_changelog`) into the stage's store, and
  each partition resumes at :meth:`Stage.resume_offset` (the first offset no
  checkpoint vouches for), not at the group's committed offset;
* **persist and commit**: every ``tick_s`` (and every ``persist_every`` records)
  :meth:`Stage.persist` makes state and outputs durable in the stage's crash-safe
  order, then the offsets it vouches for are committed (for lag and ``topics roll``);
* **revoke**: partitions taken away are persisted and committed first; their state is
  kept, with each changelog partition's end offset, and reused if the next assignment
  gives the partition back and its changelog has not moved meanwhile. Partitions
  *lost* (the group went on without this worker) are forgotten without a write;
* **idleness**: librdkafka's statistics (every second) say per partition whether it
  is fetched from a live leader and where its end is (:func:`fetch_states`);
* **outages**: while the cluster cannot be reached, the loop waits: its writer's flush
  waits up to ``outage_s`` for acknowledgements (see :class:`~streams.worker.writer.KafkaWriter`),
  consumer errors are logged once when they begin and once when reading works again,
  and the group's poll interval covers the wait. Nothing is acknowledged meanwhile,
  so nothing is lost and nothing counted twice; only an outage longer than
  ``outage_s`` stops the worker, with one error.

A failure (a write the broker refused, a fatal consumer error) stops the loop
without acknowledging anything and is handed to ``on_failure``; the worker stops.
A graceful :meth:`ConsumerLoop.stop` persists and commits, then leaves the group at
once, so the partitions move to another worker without waiting for a session timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.core.errors import DeliveryError
from streams.kafka.changelog import read_changelog
from streams.kafka.clients import new_consumer
from streams.worker.processor import FetchState, InMessage, Output
from streams.worker.writer import KafkaWriter

__all__ = ["ConsumerLoop", "Stage", "fetch_states", "BATCH", "GROUP_PROTOCOLS"]

log = logging.getLogger(__name__)

#: The most records one ``consume()`` call returns.
BATCH = 1000
#: How often librdkafka reports partition fetch state (the idle rule's input).
STATS_INTERVAL_MS = 1000
#: Committed offsets are for lag and ``topics roll`` (a restart trusts the checkpoint): at most one commit a
#: second while running; a revoke or a stop commits at once.
COMMIT_INTERVAL_S = 1.0
#: How long a revoke or an assignment waits for one changelog partition's end offset.
CHANGELOG_END_TIMEOUT_S = 5.0
#: A loop iteration this much later than the last one means the loop did not listen meanwhile.
PAUSE_S = 1.0
#: ``classic``: the client-side eager ``range`` assignor; ``consumer``: KIP-848, the broker's ``range`` assignor.
GROUP_PROTOCOLS = ("classic", "consumer")

Source = tuple[str, int]
_NO_HEADERS: Mapping[str, bytes] = {}
_new_message = tuple.__new__


class StageStore(Protocol):
    """The part of a stage's state the loop restores into: JSON-decoded changelog keys and values."""

    data: MutableMapping[str, Any]

    def mark_stale(self) -> None:
        """``data`` was changed by a restore: re-read it before the next use."""


class Stage(Protocol):
    """What a :class:`ConsumerLoop` drives; every method runs on the loop's thread."""

    store: StageStore

    def assign(self, sources: Iterable[Source]) -> None:
        """Own exactly ``sources`` from now on (drop the state of any other)."""

    def resume_offset(self, source: Source) -> int:
        """Where reading ``source`` must resume: the first offset no checkpoint vouches for."""

    def handle_batch(self, msgs: Iterable[InMessage]) -> list[Output]:
        """Process records in order; returns what to send for them."""

    def tick(self, fetch: Mapping[Source, FetchState] | None = None) -> Any:
        """Periodic work (close buckets, expire state); returns an object whose ``outputs`` are to be sent."""

    def persist(self, flush: Callable[[], None]) -> None:
        """Make every change and output durable (``flush`` waits for the broker), in a crash-safe order."""

    def listening_resumed(self) -> None:
        """The loop did not consume for a while (it waited for the cluster): the silence was its own."""


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


def group_config(consumer_config: Mapping[str, Any], protocol: str, *, session_timeout_s: float,
                 outage_s: float) -> dict[str, Any]:
    """The consumer properties of a loop's group for ``protocol`` (one of :data:`GROUP_PROTOCOLS`).

    KIP-848 moves session timeout, heartbeat interval and assignment to the broker, and
    librdkafka refuses them with ``group.protocol=consumer``; the classic protocol gets
    them, and the eager ``range`` assignor. ``max.poll.interval.ms`` covers an outage
    waited out inside a flush.
    """
    config = {**consumer_config, "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "statistics.interval.ms": STATS_INTERVAL_MS,
              "max.poll.interval.ms": int((outage_s + 60) * 1000)}
    if protocol == "consumer":
        config.update({"group.protocol": "consumer", "group.remote.assignor": "range"})
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            config.pop(key, None)
    else:
        config.update({"partition.assignment.strategy": "range",
                       "session.timeout.ms": int(session_timeout_s * 1000),
                       "heartbeat.interval.ms": int(max(1.0, session_timeout_s / 3) * 1000)})
    return config


class ConsumerLoop:
    """Runs one stage in its own thread: consume, handle, tick, persist, commit (see the module docstring).

    ``stage`` (and its store) belongs to this loop's thread alone. ``send`` writes one
    output through ``writer``; ``after_tick`` gets each tick's result once it is
    durable; ``on_durable`` gets the number of records just made durable;
    ``on_failure`` gets the exception that stopped the loop. ``changelog_topic`` None:
    the stage keeps no state to restore. ``incremental``: the group protocol hands
    partitions over incrementally (KIP-848), not all at once.
    """

    def __init__(self, *, name: str, stage: Stage, writer: KafkaWriter, consumer_config: Mapping[str, Any],
                 changelog_topic: str | None, topics: Iterable[str], send: Callable[[Output], None],
                 on_failure: Callable[[BaseException], None],
                 after_tick: Callable[[Any], None] = lambda result: None,
                 on_durable: Callable[[int], None] = lambda n: None,
                 incremental: bool = False, tick_s: float = 0.25, persist_every: int = 20_000) -> None:
        self.name = name
        self.stage = stage
        self.writer = writer
        self.consumer_config = dict(consumer_config)
        self.changelog_topic = changelog_topic
        self.incremental = incremental
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
        self._fresh: set[Source] = set()  # assigned, no progress committed yet: committed at the first chance
        self._fetch: dict[Source, FetchState] = {}
        self._committed: dict[Source, int] = {}
        self._next_commit = 0.0
        self._unpersisted = 0
        self._rebalanced = False
        self._revoked = False  # revoked, not assigned again yet: no tick, no persist
        self._parked: dict[int, int] = {}  # changelog partition -> its end offset when revoked
        self._failed = False
        self._closing = False
        self._trouble: tuple[float, int, str] | None = None  # (since, errors, first error) while reads fail
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None

    # -- control, from any thread ------------------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread."""
        self._thread = threading.Thread(target=self._run, name=f"streams-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the loop to persist, commit and leave the group; wait up to ``timeout_s`` for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read ``topics`` from now on (the bucket topics that exist); applied by the loop's thread."""
        self._wanted = sorted(set(topics))

    @property
    def owned(self) -> frozenset[Source]:
        """The (topic, partition) pairs this loop owns now."""
        return frozenset(self._owned)

    # -- the loop's thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._consumer = new_consumer({**self.consumer_config, "stats_cb": self._on_stats})
            self._loop()
            self._next_commit = 0.0
            self._persist()
            self._closing = True
        except BaseException as exc:  # noqa: BLE001 - handed to on_failure: the worker must stop
            self._failed = self._closing = True
            if isinstance(exc, DeliveryError):  # the cluster, not the code: its message says all there is
                log.error("%s stopped: %s", self.name, exc)
            else:
                log.exception("%s stopped: %s", self.name, exc)
            self._on_failure(exc)
        finally:
            if self._consumer is not None:
                try:
                    self._consumer.close()  # leaves the group now (revoking persists, unless failed)
                except Exception as exc:  # noqa: BLE001 - closing after a failure: report and go
                    log.warning("closing the %s consumer: %r", self.name, exc)

    def _loop(self) -> None:
        consumer, handle, send = self._consumer, self.stage.handle_batch, self._send
        assert consumer is not None
        last_turn = time.monotonic()
        next_tick = last_turn + self.tick_s
        while not self._stop.is_set():
            turn = time.monotonic()
            if turn - last_turn > PAUSE_S:
                self.stage.listening_resumed()
            last_turn = turn
            if self._wanted != self._subscribed:
                self._resubscribe()
            msgs = consumer.consume(BATCH, max(0.0, min(0.1, next_tick - time.monotonic())))
            if self._rebalanced:  # a callback ran inside consume(): drop records of partitions no longer held
                self._rebalanced = False
                owned = self._owned
                msgs = [m for m in msgs if m.error() is not None or (m.topic(), m.partition()) in owned]
            records: list[InMessage] = []
            add = records.append
            for msg in msgs:
                if msg.error() is not None:
                    self._consumer_error(msg.error())
                    continue
                headers = msg.headers()
                # tuple.__new__ builds the NamedTuple in C: InMessage(...) runs its Python __new__, a
                # quarter of this loop's cost per record.
                add(_new_message(InMessage, (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                             dict(headers) if headers else _NO_HEADERS)))
            if records and self._trouble is not None:
                self._recovered()
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
            log.info("%s subscribes to %d topic(s): %s", self.name, len(wanted), wanted[:5])
            consumer.subscribe(wanted, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            consumer.unsubscribe()
        self._subscribed = wanted

    def _consumer_error(self, err: KafkaError) -> None:
        """A fatal error stops the loop; others (a broker gone, a coordinator moving) are logged once per episode."""
        if err.fatal():
            raise KafkaException(err)
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if self._trouble is None:
            self._trouble = (time.monotonic(), 1, str(err))
            log.warning("%s cannot read from Kafka (%s): waiting for the cluster", self.name, err)
        else:
            since, count, first = self._trouble
            self._trouble = (since, count + 1, first)

    def _recovered(self) -> None:
        since, count, _ = self._trouble  # type: ignore[misc]
        self._trouble = None
        log.warning("%s reads from Kafka again after %.0f s (%d consumer errors meanwhile)", self.name,
                    time.monotonic() - since, count)

    def _tick(self) -> None:
        if self._revoked:
            return  # the stage still holds the revoked partitions' state: acting on it is not ours
        owned = self._owned
        fetch = {s: f for s, f in self._fetch.items() if s in owned}
        result = self.stage.tick(fetch)
        for output in result.outputs:
            self._send(output)
        self._persist()
        self._after_tick(result)

    def _persist(self) -> None:
        """Make everything handled durable (the stage's crash-safe order), then commit what it vouches for."""
        if self._revoked:
            return
        handled, self._unpersisted = self._unpersisted, 0
        self.stage.persist(self.writer.flush)
        if self._trouble is not None and self.writer.reachable:
            self._recovered()
        if handled:
            self._on_durable(handled)
        if time.monotonic() >= self._next_commit or self._fresh_progress():
            self._next_commit = time.monotonic() + COMMIT_INTERVAL_S
            self._commit(self._owned, asynchronous=True)

    def _fresh_progress(self) -> bool:
        """True once a partition handed to this loop has progress to commit: the first commit after a
        handover does not wait for the cadence, so the new owner's progress is durable (and visible
        to lag monitors) as soon as it resumes."""
        if not self._fresh:
            return False
        resume = self.stage.resume_offset  # _release drops a source from _fresh with its start
        moved = {s for s in self._fresh if resume(s) > self._starts[s]}
        self._fresh -= moved
        return bool(moved)

    def _commit(self, sources: Iterable[Source], *, asynchronous: bool) -> None:
        offsets = []
        for source in sources:
            offset = self.stage.resume_offset(source)
            if offset > 0 and self._committed.get(source) != offset:
                offsets.append(TopicPartition(source[0], source[1], offset))
                self._committed[source] = offset
        if offsets and self._consumer is not None:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=asynchronous)
            except KafkaException as exc:  # the checkpoint is what a restart trusts: a lost commit only shows lag
                for tp in offsets:
                    self._committed.pop((tp.topic, tp.partition), None)  # try again at the next commit
                if self._trouble is None:
                    log.warning("%s: committing offsets failed: %s", self.name, exc)

    # -- rebalance callbacks (run inside consume(), on the loop's thread) -----------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        added = {(tp.topic, tp.partition) for tp in partitions}
        new = (self._owned | added) if self.incremental else added
        wanted = {p for _, p in added}
        kept = self._unchanged(wanted)
        # Keep only the state of kept changelog partitions, read the others back, then own all of new.
        self.stage.assign(s for s in new if s in self._owned or s[1] in kept)
        self._restore(wanted - kept - {p for _, p in self._owned})
        self.stage.assign(new)
        self._revoked, self._parked = False, {}
        for tp in partitions:
            source = (tp.topic, tp.partition)
            tp.offset = self.stage.resume_offset(source)
            self._starts[source] = tp.offset
            if tp.offset >= 0:  # a real offset (not "the end"): progress past it is what gets committed
                self._fresh.add(source)
            self._committed.pop(source, None)
        self._owned = new
        self._rebalanced = True
        log.info("%s assigned %d partition(s) (%d owned); changelog partitions kept %s, read back %s", self.name,
                 len(partitions), len(new), sorted(kept), sorted(wanted - kept))
        if self.incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)  # eager (range): the whole assignment, the previous one was revoked

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        if self._failed or not gone:
            self._forget(gone)
            self._unassign(consumer, partitions)
            return
        handled, self._unpersisted = self._unpersisted, 0
        self.stage.persist(self.writer.flush)
        self.writer.flush()  # the closed buckets' tombstones too: the end offsets below must cover every write
        if handled:
            self._on_durable(handled)
        self._commit(gone & self._owned, asynchronous=False)
        if self.incremental:
            # The partitions kept run on, and their ticks would act on the revoked ones' state: it goes.
            self._release(gone)
            self.stage.assign(self._owned)
        else:
            eager_all = self._closing or self.changelog_topic is None
            self._parked = {} if eager_all else self._changelog_ends({p for _, p in gone})
            self._revoked = True
            self._release(gone)
        self._unassign(consumer, partitions)

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.incremental:
            consumer.incremental_unassign(partitions)
        else:
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
        """The changelog partitions in ``wanted`` whose state this worker kept at a revoke and nobody wrote since."""
        if self.changelog_topic is None:
            return set(wanted)  # nothing to read back: whatever the stage holds stands
        parked = {p: end for p, end in self._parked.items() if p in wanted}
        if not parked:
            return set()
        now = self._changelog_ends(set(parked))
        return {p for p, end in parked.items() if now.get(p) == end}

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        log.warning("%s lost %d partition(s) to the group (no heartbeat in time): dropping their unflushed state",
                    self.name, len(gone))
        self._forget(gone)
        self._unassign(consumer, partitions)

    def _forget(self, gone: set[Source]) -> None:
        """Give up ``gone`` and its state (lost, or revoked after a failure): nothing is kept for a return."""
        self._revoked = False
        for _, p in gone:
            self._parked.pop(p, None)
        self._release(gone)
        self.stage.assign(self._owned)  # drops the state of changelog partitions no longer held

    def _release(self, gone: set[Source]) -> None:
        """Stop owning ``gone``: what this loop tracked of it goes; the records of a batch in hand are dropped."""
        self._owned = self._owned - gone
        for source in gone:
            self._starts.pop(source, None)
            self._fresh.discard(source)
            self._fetch.pop(source, None)
            self._committed.pop(source, None)
        self._rebalanced = True

    def _restore(self, partitions: set[int]) -> None:
        """Read changelog ``partitions`` back into the store (JSON key and value, as they were written)."""
        if self.changelog_topic is None or not partitions:
            return
        began = time.monotonic()
        data, loads, restored = self.stage.store.data, orjson.loads, 0
        for _, key, value in read_changelog(self.consumer_config, self.changelog_topic, partitions,
                                            timeout_s=max(60.0, self.writer.outage_s)):
            k = loads(key)
            if value is None:
                data.pop(k, None)
            else:
                data[k] = loads(value)
            restored += 1
        self.stage.store.mark_stale()
        if restored:
            log.info("%s restored %d changelog record(s) of partition(s) %s in %.2f s", self.name, restored,
                     sorted(partitions), time.monotonic() - began)

    def _on_stats(self, raw: str) -> None:
        try:
            stats = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        self._fetch = fetch_states(stats, self._owned, int(time.time() * 1000), self._fetch, self._starts)
