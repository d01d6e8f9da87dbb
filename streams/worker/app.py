"""The worker: three consumer loops on librdkafka, hosted by faust.  ``faust -A streams.app worker -l info``

:func:`create_worker` builds a worker's parts from settings objects
(:class:`~streams.core.config.WorkerSettings`, :class:`~streams.core.config.KafkaSettings`,
:class:`~streams.core.config.TopicNames`); :func:`create_app` wraps them in a faust app;
:mod:`streams.app` builds that app from the environment (``STREAMS_*`` variables or
the TOML file named by ``STREAMS_CONFIG``). Every data stream is read by one
:class:`~streams.worker.loop.ConsumerLoop` design, each loop its own group and thread:

* **stage 1** (group ``<app_id>-events``): the events topic in batches into
  :class:`~streams.worker.processor.EventProcessor` (late events and dead letters go
  to their topics, on-time events into state changelogged to ``<app_id>-stage1-changelog``);
  every tick closes due buckets (partials + bucket-closed) and publishes this
  instance's hot-key sketch summary;
* **stage 2** (group ``<app_id>``): the partials topic into
  :class:`~streams.worker.merge.PartialsProcessor`, the exact merged aggregate per
  (bucket, key) into the compacted aggregates topic, state in ``<app_id>-stage2-changelog``;
* **decider** (group ``<app_id>-decider``, the one-partition sketches topic, so one
  decider): :class:`~streams.worker.decide.DeciderStage` publishes directory changes
  to the compacted hot-keys topic.

faust is the host: the worker process, its services and timers (following the
bucket topics of topic-per-bucket mode), signals and logging, and ``faust -A
streams.app worker`` / ``streams worker``. It reads and writes no Kafka itself
(:class:`HostOnly`: faust's consumer and producer are never started), so nothing in
the project patches faust, aiokafka or mode, and every security setting librdkafka
knows works for the worker as for the producer.

Delivery guarantee: at-least-once, with state that is exact anyway. Each loop makes
its state and outputs durable in its stage's crash-safe order before it commits, a
restart resumes at the checkpoint, stage-1 entries remember the source offset they
last folded and skip records re-read after a crash, and stage-2 slots are upserts.
Kafka transactions were not chosen: they would cover the late-event and dead-letter
topics too, at the price of a transaction per commit interval and a producer per
partition.
"""

from __future__ import annotations

import asyncio
import gc
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson
from faust.app.base import BootStrategy

from streams.core.config import KafkaSettings, TopicNames, WorkerSettings, install_log_redaction, load
from streams.core.hotkeys.balancer import BalanceLoop
from streams.core.hotkeys.decider import BalanceDecider
from streams.core.routing.directory import notice_headers
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec, schema_header
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.core.validate import BUCKET_PLACEHOLDER, require_duration
from streams.kafka.admin import (
    TopicAdminError,
    TopicSpec,
    broker_count,
    consumer_protocol_offered,
    ensure_topics,
    list_topic_names,
    project_topic_specs,
)
from streams.kafka.maps import RoutingMapFollower
from streams.kafka.metrics import WorkerMetrics
from streams.kafka.monitor import Monitor
from streams.worker.bucket_topics import BucketTopics
from streams.worker.decide import DeciderStage
from streams.worker.loop import ConsumerLoop, group_config
from streams.worker.merge import PartialsProcessor
from streams.worker.processor import EventProcessor, Output, Stage1Store, TickResult
from streams.worker.writer import KafkaWriter

__all__ = ["Worker", "create_worker", "create_app", "app_from_environment", "HostOnly"]

log = logging.getLogger("streams.app")

#: Records stage 1 handles between two persists at most: its ticks persist every TICK_S anyway, and
#: each persist costs two broker round trips and rewrites every entry changed since the last one.
STAGE1_PERSIST_EVERY = 20_000
#: Partials stage 2 handles between two persists at most.
STAGE2_PERSIST_EVERY = 2_000
#: How often the consumers refresh metadata, so added partitions join within about this long.
METADATA_MAX_AGE_MS = 5_000
#: How often topic-per-bucket mode looks for new bucket topics.
BUCKET_TOPICS_REFRESH_S = 2.0


class HostOnly(BootStrategy):
    """faust's start-up graph without its Kafka consumer and producer: the loops read and write Kafka."""

    enable_kafka = False


class WorkerApp(faust.App):
    """A faust app that hosts the worker's loops and timers and talks to no Kafka broker itself."""

    BootStrategy = HostOnly


#: The worker process's garbage-collector thresholds (Python's default is 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Move every object alive now out of the collector's reach and make its passes rarer.

    Stage 1 allocates a few short-lived containers per record (the record, its headers)
    beside long-lived state (the open buckets' entries and their sets of event IDs,
    whose every element a full pass visits). With the default thresholds a full pass
    ran every ~0.4 s and took ~65 ms: a third of the worker's time at 1,000,000 events
    (``bench/bench_worker.py``: 67,000 events/s, 98,000 with these thresholds). Young
    garbage is still collected every 50,000 net allocations, so reference cycles do
    not pile up; the objects of start-up (modules, faust) are frozen, and no pass
    walks them again.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass
class Worker:
    """One worker process's parts, built by :func:`create_worker`; :meth:`prepare` then :meth:`start` run it."""

    settings: WorkerSettings
    kafka: KafkaSettings
    topics: TopicNames
    instance: str
    metrics: WorkerMetrics
    processor: EventProcessor
    partials: PartialsProcessor
    decider: DeciderStage
    router: Router
    maps_follower: RoutingMapFollower
    bucket_topics: BucketTopics | None
    writers: dict[str, KafkaWriter]
    on_failure: Callable[[BaseException], None]
    loops: dict[str, ConsumerLoop] = field(default_factory=dict)
    group_protocol: str = ""
    brokers: int = 0
    _codecs: dict[str, AvroCodec] = field(default_factory=dict)
    _prepared: bool = False

    # -- start and stop --------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the topics, choose the group protocol, follow the routing maps, serve metrics; once."""
        if self._prepared:
            return
        self._prepared = True
        client = self.kafka.client_config()
        settings = self.settings
        changelogs = [TopicSpec(name, settings.partitions, {"cleanup.policy": "compact"})
                      for name in (settings.stage1_changelog, settings.stage2_changelog)]
        ensure_topics(client, [*project_topic_specs(self.topics, partitions=settings.partitions), *changelogs],
                      timeout_s=30)
        self.brokers = broker_count(client, timeout_s=30)
        protocol = settings.group_protocol
        if protocol == "auto":
            protocol = "consumer" if consumer_protocol_offered(client, timeout_s=30) else "classic"
        self.group_protocol = protocol
        self._build_loops()
        self.maps_follower.start()
        if settings.metrics_port:
            self.metrics.serve(settings.metrics_port)

    def start(self) -> None:
        """Start every loop's thread (after :meth:`prepare`), with the garbage collector tuned for them."""
        tune_gc()
        log.info("worker %s on a cluster of %d broker(s); its consumer groups use the %s protocol%s", self.instance,
                 self.brokers, self.group_protocol, " (KIP-848: incremental handover)"
                 if self.group_protocol == "consumer" else " (eager range assignor)")
        for loop in self.loops.values():
            loop.start()

    def stop(self) -> None:
        """Stop the loops together (each persists, commits and leaves its group at once, so its partitions
        move to the other workers without waiting for a session timeout), then the followers."""
        stopping = [threading.Thread(target=loop.stop, name=f"stop-{name}") for name, loop in self.loops.items()]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self.maps_follower.stop()

    def follow_bucket_topics(self) -> None:
        """Topic per bucket: hand stage 1 the bucket topics that exist now (blocking: lists the cluster's topics)."""
        if self.bucket_topics is not None and "stage1" in self.loops:
            self.loops["stage1"].subscribe(self.bucket_topics.wanted())

    # -- wiring --------------------------------------------------------------------------------------

    def _build_loops(self) -> None:
        settings, topics = self.settings, self.topics
        incremental = self.group_protocol == "consumer"
        tick_s = require_duration("tick", settings.tick) / 1000

        def consumer(group: str) -> dict[str, Any]:
            base = self.kafka.client_config(**{"group.id": group,
                                               "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS})
            return group_config(base, self.group_protocol, session_timeout_s=settings.session_timeout_s,
                                outage_s=settings.outage_s)

        self.loops["stage1"] = ConsumerLoop(
            name="stage 1", stage=self.processor, writer=self.writers["stage1"],
            consumer_config=consumer(settings.events_group), changelog_topic=settings.stage1_changelog,
            topics=[] if self.bucket_topics is not None else [topics.events],
            send=lambda output: self._send(output, self.writers["stage1"]), after_tick=self._after_stage1_tick,
            on_durable=self.metrics.event_in, on_failure=self.on_failure, incremental=incremental, tick_s=tick_s,
            persist_every=STAGE1_PERSIST_EVERY)
        if self.bucket_topics is not None:
            self.follow_bucket_topics()
        self.loops["stage2"] = ConsumerLoop(
            name="stage 2", stage=self.partials, writer=self.writers["stage2"],
            consumer_config=consumer(settings.partials_group), changelog_topic=settings.stage2_changelog,
            topics=[topics.partials], send=lambda output: self._send(output, self.writers["stage2"]),
            on_failure=self.on_failure, incremental=incremental, tick_s=tick_s, persist_every=STAGE2_PERSIST_EVERY)
        self.loops["decider"] = ConsumerLoop(
            name="decider", stage=self.decider, writer=self.writers["decider"],
            consumer_config=consumer(settings.decider_group), changelog_topic=None, topics=[topics.sketches],
            send=self._publish, on_failure=self.on_failure, incremental=incremental, tick_s=tick_s)

    def _send(self, output: Output, writer: KafkaWriter) -> None:
        """Encode ``output`` with its role's schema and write it, with the header naming that schema."""
        codec = self._codecs.get(output.role)
        if codec is None:
            codec = self._codecs[output.role] = AvroCodec(_SCHEMA_OF_ROLE[output.role])
        writer.write(getattr(self.topics, output.role), output.key, codec.encode(output.record),
                     headers=_HEADERS_OF_ROLE[output.role])
        self.metrics.sent(output.role)

    def _publish(self, output: Output) -> None:
        """A directory change: an encoded notice with its schema header, or a tombstone."""
        headers = notice_headers() if output.record is not None else None
        self.writers["decider"].write(self.topics.hot_keys, output.key, output.record, headers=headers)
        self.metrics.sent(output.role)

    def _after_stage1_tick(self, result: TickResult) -> None:
        """Publish this instance's sketch summary and refresh the gauges (stage 1's thread, after each durable tick)."""
        self.writers["stage1"].write(self.topics.sketches, self.instance.encode(),
                                     orjson.dumps(result.summary.to_record()))
        self.metrics.observe_tick(self.processor, result, self.decider.decider)


_SCHEMA_OF_ROLE = {"late_events": "late_event", "dead_letters": "dead_letter", "partials": "aggregate",
                   "aggregates": "aggregate", "bucket_closed": "bucket_closed"}
_HEADERS_OF_ROLE = {role: [schema_header(schema)] for role, schema in _SCHEMA_OF_ROLE.items()}


def _changelog(topic: str, writer: KafkaWriter) -> Callable[[int, str, Any], None]:
    """Write a state change to partition p of ``topic``: JSON key and value (None deletes)."""
    def write(partition: int, key: str, value: Any) -> None:
        writer.write(topic, orjson.dumps(key), None if value is None else orjson.dumps(value), partition)
    return write


def create_worker(settings: WorkerSettings, kafka: KafkaSettings, topics: TopicNames, *,
                  on_failure: Callable[[BaseException], None]) -> Worker:
    """Build a worker's parts from its settings; nothing touches Kafka until :meth:`Worker.prepare`.

    ``on_failure`` is called (from a loop's thread) with the error that stopped a loop:
    the worker must stop.
    """
    instance = settings.instance or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    client = kafka.client_config()
    writers = {name: KafkaWriter(client, name=name.replace("stage", "stage "), outage_s=settings.outage_s)
               for name in ("stage1", "stage2", "decider")}
    buckets = TimeBuckets(settings.bucket_width, grace=settings.grace)
    metrics = WorkerMetrics()
    processor = EventProcessor(settings, Stage1Store({}, _changelog(settings.stage1_changelog, writers["stage1"])),
                               instance=instance)
    partials = PartialsProcessor({}, _changelog(settings.stage2_changelog, writers["stage2"]), buckets,
                                 parse_duration(settings.retention, "retention"))
    # The fleet's routing-map history: the settings' map as version 1, later versions from the
    # routing-maps topic. The decider plans against the map in force now (its partition count and
    # each key's hash home); stage 1 needs no map.
    router = Router(buckets, [RoutingMap(version=1, partitions=settings.partitions, topic=topics.events,
                                         placement=settings.placement, hash=settings.hash)])
    balance = BalanceDecider(settings.balance_policy(), home=lambda key: _map_now(router).partition_of(key))

    def map_in_force() -> RoutingMap:
        routing_map = _map_now(router)
        if balance.policy.partitions != routing_map.partitions:
            log.info("routing map v%d in force: the decider plans over %d partitions", routing_map.version,
                     routing_map.partitions)
            balance.policy = dataclasses.replace(balance.policy, partitions=routing_map.partitions)
        return routing_map

    def published() -> dict[str, tuple[int, ...]]:
        """The directory on the compacted hot-keys topic (what producers apply), by key text."""
        with Monitor(client, events_topic=topics.events, hot_keys_topic=topics.hot_keys,
                     group=settings.app_id, timeout_s=10) as monitor:
            notices = monitor.snapshot().hot_keys
        return {n.key_display: n.placement for n in notices if n.key_display and canonical_key(n.key_display) == n.key}

    decider = DeciderStage(BalanceLoop(balance, settings.hot_window_s, settings.hot_min_window_events),
                           map_in_force=map_in_force, published=published, instance=instance,
                           on_decision=metrics.decision, on_balance=metrics.observe_balance,
                           on_rejected=metrics.rejected_summary)
    bucket_topics = BucketTopics(topics.events, buckets, lambda: list_topic_names(client, timeout_s=10)) \
        if BUCKET_PLACEHOLDER in topics.events else None
    return Worker(settings=settings, kafka=kafka, topics=topics, instance=instance, metrics=metrics,
                  processor=processor, partials=partials, decider=decider, router=router,
                  maps_follower=RoutingMapFollower(router, client, topics.routing_maps), bucket_topics=bucket_topics,
                  writers=writers, on_failure=on_failure)


def _map_now(router: Router) -> RoutingMap:
    """The routing map whose buckets are being produced now (by the wall clock)."""
    return router.map_for(int(time.time() * 1000))


def create_app(settings: WorkerSettings, kafka: KafkaSettings, topics: TopicNames) -> faust.App:
    """A faust app hosting one :class:`Worker` built from these settings (``app.streams_worker``).

    The worker prepares (topics, group protocol) when faust starts its ``WorkerService``,
    its loops run while that service runs, and a loop's failure
    crashes the app, so the process exits non-zero and a supervisor restarts it.
    """
    app = WorkerApp(settings.app_id, broker=[f"kafka://{hp.strip()}" for hp in kafka.bootstrap_servers.split(",")],
                    store="memory://", web_enabled=False, topic_partitions=settings.partitions)
    faust_loop: list[asyncio.AbstractEventLoop] = []

    def failed(exc: BaseException) -> None:
        """A loop stopped on an error: crash the app (faust's loop), so the process exits and is restarted."""
        if not faust_loop or faust_loop[0].is_closed():
            os._exit(70)  # no loop to stop: never run on without a stage
        asyncio.run_coroutine_threadsafe(app.crash(exc), faust_loop[0])

    worker = create_worker(settings, kafka, topics, on_failure=failed)
    app.streams_worker = worker  # type: ignore[attr-defined]

    @app.service
    class WorkerService(faust.Service):
        """Runs the worker's loops while faust's worker runs; stopping persists, commits and leaves the groups."""

        async def on_start(self) -> None:
            """Start the loops' threads."""
            faust_loop[:] = [asyncio.get_running_loop()]
            await faust_loop[0].run_in_executor(None, worker.prepare)
            worker.start()

        async def on_stop(self) -> None:
            """Stop the loops without blocking faust's event loop."""
            await asyncio.get_running_loop().run_in_executor(None, worker.stop)

    if worker.bucket_topics is not None:
        trouble: list[str] = []

        @app.timer(interval=BUCKET_TOPICS_REFRESH_S)
        async def follow_bucket_topics() -> None:
            """Topic per bucket: subscribe to bucket topics that appeared, drop those that were deleted."""
            try:
                await asyncio.get_running_loop().run_in_executor(None, worker.follow_bucket_topics)
            except TopicAdminError as exc:
                if not trouble:
                    log.warning("cannot list the bucket topics (%s): retrying every %.0f s", exc,
                                BUCKET_TOPICS_REFRESH_S)
                trouble[:] = [str(exc)]
                return
            if trouble:
                log.warning("bucket topics listed again")
                trouble.clear()

    return app


def app_from_environment(env: Mapping[str, str] | None = None) -> faust.App:
    """:func:`create_app` with the settings of ``STREAMS_*`` variables and ``$STREAMS_CONFIG`` (see :func:`load`)."""
    settings = load(WorkerSettings, env=env)
    kafka = load(KafkaSettings, env=env)
    install_log_redaction()  # the credentials are known now: no log record may show them
    return create_app(settings, kafka, load(TopicNames, env=env))
