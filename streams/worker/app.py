"""The faust app: wires the worker core to Kafka.  ``faust -A streams.app worker -l info``

Settings come from :mod:`streams.core.config` (``STREAMS_*`` variables or the TOML file
named by ``STREAMS_CONFIG``). Stage 1 and faust's agents and timers, one job each:

* ``stage1`` (:class:`~streams.worker.stage1.Stage1Loop`, its own librdkafka consumer
  in group ``<app_id>-events`` and its own thread, started and stopped by
  ``Stage1Service``): reads the events topic in batches into
  :meth:`EventProcessor.handle` (late events and dead letters go to their topics,
  on-time events into stage-1 state) and every ``tick_s`` closes due buckets
  (partials + bucket-closed) and publishes this instance's hot-key sketch summary.
* ``decide_hot_keys`` (sketches topic, one partition, so one decider): merges every
  instance's latest summary (heavy keys and partition rates) and runs the load-aware
  :class:`~streams.core.hotkeys.decider.BalanceDecider`; each directory change goes to
  the compacted hot-keys topic as a version 2 placement notice (Avro, header
  ``streams-schema: hot_key_notice/2``) or, for a key sent home, a tombstone, keyed by
  the key's canonical bytes. The instance that takes the sketches partition first
  reads that topic back, so it continues the directory the producers apply.
* ``merge_partials`` (partials topic, keyed by the real key): stage 2, the exact
  merged aggregate per (bucket, key) into the compacted aggregates topic;
  ``flush_stage2`` (timer, every ``tick_s``) makes them durable and acknowledges.

Secured clusters: stage 1's consumer and the writers take ``KafkaSettings.client_config()``
as it is; the worker's faust consumer and producer get the SASL (PLAIN,
SCRAM-SHA-256/512) and TLS settings of ``KafkaSettings.client_properties`` (the
librdkafka names ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ...) as faust ``broker_credentials``
(:func:`broker_credentials`); a property the worker cannot pass to faust is a
ConfigError naming it, at start, rather than a connection that silently ignores it.
Credential values are scrubbed from every log record (``install_log_redaction``).

Delivery guarantee: at-least-once, with state that is exact anyway. Stage-1 changes
are coalesced and written to the changelog every tick (or every FLUSH_EVERY records)
in the crash-safe order of :meth:`EventProcessor.persist`, and offsets are committed
only after that (a restart resumes at the checkpoint, see :mod:`streams.worker.stage1`);
stage 2 acknowledges partials only after its flush, and faust commits only acknowledged offsets.
Each stage-1 entry remembers the source offset it last folded and skips records
re-read after a crash; stage-2 slots are upserts. faust's ``exactly_once`` (Kafka
transactions) was not chosen: it would also cover the late-event and dead-letter
topics, but at the price of a transaction per commit interval and a producer per
partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import ssl
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import faust
import orjson
from faust.types import TP

from streams.core.config import (
    KafkaSettings,
    TopicNames,
    WorkerSettings,
    install_log_redaction,
    load,
)
from streams.core.deadletter import MAX_ORIGINAL_KEY_BYTES, bounded, dead_letter_record
from streams.core.errors import (
    ConfigError,
    HotKeyNoticeError,
    SerializationError,
)
from streams.core.hotkeys.balancer import BalanceLoop
from streams.core.hotkeys.decider import BalanceDecider, Decision, max_over_mean
from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.directory import HotKeyNotice, encode_notice, notice_headers
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.core.validate import BUCKET_PLACEHOLDER
from streams.kafka.admin import (
    TopicAdminError,
    TopicSpec,
    broker_count,
    ensure_topics,
    list_topic_names,
    project_topic_specs,
)
from streams.kafka.maps import RoutingMapFollower
from streams.kafka.metrics import WorkerMetrics
from streams.kafka.monitor import Monitor
from streams.worker import faust_patches
from streams.worker.bucket_topics import BucketTopics
from streams.worker.merge import PartialMerger
from streams.worker.offsets import OffsetGuard, Skip
from streams.worker.processor import EventProcessor, FetchState, Output, Stage1Store, TickResult
from streams.worker.stage1 import Stage1Loop
from streams.worker.writer import KafkaWriter

log = logging.getLogger("streams.app")


faust_patches.install()  # before faust builds its consumer: see streams.worker.faust_patches

#: security.protocol values the worker passes to faust, and the sasl.mechanism values it supports.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SASL_KEYS = frozenset({"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password"})
_SSL_KEYS = frozenset({"ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location",
                       "ssl.key.password", "ssl.endpoint.identification.algorithm",
                       "enable.ssl.certificate.verification"})


def broker_credentials(props: Any) -> faust.SASLCredentials | faust.SSLCredentials | None:
    """faust ``broker_credentials`` for librdkafka-style client properties; None for PLAINTEXT.

    ``security.protocol`` SASL_PLAINTEXT / SASL_SSL need ``sasl.username`` and
    ``sasl.password`` and a ``sasl.mechanism`` of SASL_MECHANISMS (default PLAIN, as
    librdkafka); SSL / SASL_SSL build a TLS context from ``ssl.ca.location`` (file or
    directory) or ``ssl.ca.pem``, an optional client certificate
    (``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``) and
    ``enable.ssl.certificate.verification`` / ``ssl.endpoint.identification.algorithm``.
    Raises ConfigError naming the property for an unknown protocol or mechanism, a
    missing username or password, or a ``sasl.*`` / ``ssl.*`` property the worker
    cannot pass to faust (or that the protocol would ignore).
    """
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)} for the worker, "
                          f"got {protocol!r}")
    sasl, tls = protocol.startswith("SASL_"), protocol.endswith("SSL")
    for key in props:
        if key.startswith("sasl.") or key in _SASL_KEYS:
            _require_supported(key, _SASL_KEYS, sasl, protocol)
        elif key.startswith("ssl.") or key in _SSL_KEYS:
            _require_supported(key, _SSL_KEYS, tls, protocol)
    context = _ssl_context(props) if tls else None
    if not sasl:
        return faust.SSLCredentials(context) if context is not None else None
    mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN"))).upper()
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)} for the worker, "
                          f"got {mechanism!r}")
    for key in ("sasl.username", "sasl.password"):
        if not props.get(key):
            raise ConfigError(f"{key} is required with security.protocol={protocol}")
    return faust.SASLCredentials(username=str(props["sasl.username"]), password=str(props["sasl.password"]),
                                 mechanism=mechanism, ssl_context=context)


def _require_supported(key: str, supported: frozenset[str], applies: bool, protocol: str) -> None:
    if key not in supported:
        raise ConfigError(f"{key} is not supported by the worker (it supports {', '.join(sorted(supported))})")
    if not applies:
        raise ConfigError(f"{key} is set but security.protocol={protocol} would ignore it")


def _ssl_context(props: Any) -> ssl.SSLContext:
    """The TLS context of the ``ssl.*`` properties; raises ConfigError naming an unreadable file."""
    ca = props.get("ssl.ca.location")
    try:
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=ca if ca and not os.path.isdir(ca) else None,
            capath=ca if ca and os.path.isdir(ca) else None, cadata=props.get("ssl.ca.pem"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.ca.location / ssl.ca.pem cannot be loaded: {exc}") from None
    cert = props.get("ssl.certificate.location")
    if cert or props.get("ssl.key.location"):
        try:
            context.load_cert_chain(cert, props.get("ssl.key.location"), password=props.get("ssl.key.password"))
        except (OSError, ssl.SSLError, TypeError) as exc:
            raise ConfigError(f"ssl.certificate.location / ssl.key.location cannot be loaded: "
                              f"{type(exc).__name__}") from None
    if str(props.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(props.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0", "no"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


TICK_S = float(os.environ.get("STREAMS_TICK_S", "0.25"))
#: Records stage 2 handles between two flushes at most (ticks flush more often at low rates).
FLUSH_EVERY = 2000
#: Records stage 1 handles between two persists at most: its ticks persist every TICK_S anyway, and
#: each persist costs two broker round trips and rewrites every entry changed since the last one.
STAGE1_PERSIST_EVERY = 20_000
#: How often the worker's consumer refreshes metadata, so added partitions join within about this long.
METADATA_MAX_AGE_MS = 5_000

worker_settings = load(WorkerSettings)
kafka_settings = load(KafkaSettings)
install_log_redaction()  # the credentials are known now: no log record may show them
topic_names = load(TopicNames)
instance_id = os.environ.get("STREAMS_INSTANCE", f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:4]}")

app = faust.App(
    worker_settings.app_id,
    broker=[f"kafka://{hp.strip()}" for hp in kafka_settings.bootstrap_servers.split(",")],
    broker_credentials=broker_credentials(kafka_settings.client_properties),
    store="memory://",
    topic_partitions=worker_settings.partitions,
    topic_replication_factor=1,  # raised to min(3, brokers) at worker start (_create_topics)
    web_enabled=False,
    processing_guarantee="at_least_once",
    producer_acks=-1,
    broker_commit_interval=1.0,
    # How long a crashed worker's partitions wait before the group gives them to another.
    broker_session_timeout=worker_settings.session_timeout_s,
    broker_heartbeat_interval=max(1.0, worker_settings.session_timeout_s / 3),
    table_standby_replicas=0,
    consumer_auto_offset_reset="earliest",
    # How soon the group notices partitions `streams topics grow` added (aiokafka rebalances on a
    # changed partition count at its next metadata refresh; faust's default waits 5 minutes).
    consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
    # Records are acknowledged after the flush that covers them (see _flush_and_ack);
    # a stop or rebalance must not wait for acks that only the next tick would give.
    # What was not acknowledged is read again and recognised as a duplicate.
    stream_wait_empty=False,
)

_raw = {"key_serializer": "raw", "value_serializer": "raw"}
_buckets = TimeBuckets(worker_settings.bucket_width, grace=worker_settings.grace)
# Topic per bucket: stage 1 reads the bucket topics that exist, kept current by the
# follow_bucket_topics timer (see streams.worker.bucket_topics).
bucket_topics = BucketTopics(topic_names.events, _buckets,
                             lambda: list_topic_names(kafka_settings.client_config(), timeout_s=10)) \
    if BUCKET_PLACEHOLDER in topic_names.events else None


def _is_partials_topic(topic: str) -> bool:
    return topic == topic_names.partials


partials_topic = app.topic(topic_names.partials, **_raw)
sketches_topic = app.topic(topic_names.sketches, **_raw)
_codecs = {
    "late_events": AvroCodec("late_event"), "dead_letters": AvroCodec("dead_letter"),
    "partials": AvroCodec("aggregate"), "aggregates": AvroCodec("aggregate"),
    "bucket_closed": AvroCodec("bucket_closed"),
}

_json = faust.Schema(key_serializer="json", value_serializer="json")
stage2_table = app.Table("stage2", partitions=worker_settings.partitions, schema=_json)

# Each stage writes through its own librdkafka producer (streams.worker.writer): stage 1
# runs in its own thread, and acknowledges its input only after its own writes are durable.
# stage2_writer serves everything on faust's loop: stage 2, and the decider's notices.
stage1_writer = KafkaWriter(kafka_settings.client_config())
stage2_writer = KafkaWriter(kafka_settings.client_config())


def _send(output: Output, writer: KafkaWriter) -> None:
    writer.write(getattr(topic_names, output.role), output.key, _codecs[output.role].encode(output.record))
    metrics.sent(output.role)


def _changelog(topic: Callable[[], str], writer: KafkaWriter) -> Callable[[int, str, Any], None]:
    """Write a state change as faust's tables do: JSON key and value, the given changelog partition."""
    def write(partition: int, key: str, value: Any) -> None:
        writer.write(topic(), orjson.dumps(key), None if value is None else orjson.dumps(value), partition)
    return write


metrics = WorkerMetrics()
# What stage 2 must be handed next: a record past it is a skip by faust (streams.worker.offsets).
partials_guard = OffsetGuard()
_partials_progress: dict[int, int] = {}  # partials partition -> last offset applied since the last flush
processor = EventProcessor(
    worker_settings,
    Stage1Store({}, _changelog(lambda: worker_settings.stage1_changelog, stage1_writer)),
    instance=instance_id)
merger = PartialMerger(stage2_table.data, _changelog(stage2_table.changelog_topic.get_topic_name, stage2_writer),
                       _buckets, parse_duration(worker_settings.retention, "retention"))
# The fleet's routing-map history: the settings' map as version 1, later versions from the
# routing-maps topic (followed from worker start on). The decider plans against the map in
# force now (its partition count and each key's hash home); stage 1 needs no map.
router = Router(_buckets, [RoutingMap(version=1, partitions=worker_settings.partitions, topic=topic_names.events,
                                      placement=worker_settings.placement, hash=worker_settings.hash)])
maps_follower = RoutingMapFollower(router, kafka_settings.client_config(), topic_names.routing_maps)


def map_in_force() -> RoutingMap:
    """The routing map whose buckets are being produced now (by the wall clock)."""
    return router.map_for(int(time.time() * 1000))


decider = BalanceDecider(worker_settings.balance_policy(), home=lambda key: map_in_force().partition_of(key))


def _follow_map_in_force() -> RoutingMap:
    """The map in force; the decider's partition count follows it (a grown topic has more)."""
    routing_map = map_in_force()
    if decider.policy.partitions != routing_map.partitions:
        log.info("routing map v%d in force: the decider plans over %d partitions", routing_map.version,
                 routing_map.partitions)
        decider.policy = dataclasses.replace(decider.policy, partitions=routing_map.partitions)
    return routing_map
_directory_known = False  # has this instance read back the published directory since it took the sketches partition?
# The loop streams simulate runs too: latest summary per instance, merge, measure, decide.
balance_loop = BalanceLoop(decider, worker_settings.hot_window_s, worker_settings.hot_min_window_events)


_maps_followed = False


def _stage1_specs() -> list[TopicSpec]:
    """Stage 1's changelog: compacted, partition p for source partition p (faust no longer declares it)."""
    return [TopicSpec(worker_settings.stage1_changelog, worker_settings.partitions, {"cleanup.policy": "compact"})]


@app.on_worker_init.connect
def _create_topics(app: faust.App, **kwargs: Any) -> None:  # noqa: ARG001 - faust signal signature
    if "--help" in sys.argv or "-h" in sys.argv:
        return  # faust sends this signal even for `worker --help`: do not reach for the broker
    ensure_topics(kafka_settings.client_config(),
                  [*project_topic_specs(topic_names, partitions=worker_settings.partitions), *_stage1_specs()],
                  timeout_s=30)
    # faust declares its changelog topics after this signal: replicate them as the project's
    # topics are, so a broker's loss loses no state (acks=all then waits for two of three).
    brokers = broker_count(kafka_settings.client_config(), timeout_s=30)
    app.conf.topic_replication_factor = min(3, brokers)
    if brokers >= 3:
        changelog = stage2_table.changelog_topic  # already built: set the config it will be declared with
        changelog.config = {**(changelog.config or {}), "min.insync.replicas": "2"}
    global _maps_followed
    if not _maps_followed:  # faust sends this signal twice
        _maps_followed = True
        maps_follower.start()
    if worker_settings.metrics_port:
        metrics.serve(worker_settings.metrics_port)


@app.on_partitions_assigned.connect
async def _assigned(app: faust.App, assigned: Any, **kwargs: Any) -> None:  # noqa: ARG001
    global _directory_known
    now_ms = int(time.time() * 1000)
    _stall_sought.clear()
    partials_guard.assign((tp for tp in assigned if _is_partials_topic(tp.topic)), now_ms)
    held = {tp.partition for tp in assigned if _is_partials_topic(tp.topic)}
    for partition in set(_partials_progress) - held:
        del _partials_progress[partition]  # its new owner checkpoints it; ours would go back in time
    if any(tp.topic == topic_names.sketches for tp in assigned):
        _directory_known = False  # another instance may have decided meanwhile: read the topic again


@app.on_rebalance_complete.connect
async def _recovered(app: faust.App, **kwargs: Any) -> None:  # noqa: ARG001 - faust signal signature
    """faust has restored stage 2's table (before streams resume): the pause was not a stall."""
    partials_guard.restart_clocks(int(time.time() * 1000))


# -- stage 1: its own consumer and thread (streams.worker.stage1) ------------------------------


def _after_tick(result: TickResult) -> None:
    """Publish this instance's sketch summary and refresh the gauges (stage 1's thread, after each durable tick)."""
    stage1_writer.write(topic_names.sketches, instance_id.encode(), orjson.dumps(result.summary.to_record()))
    metrics.observe_tick(processor, result, decider)


def _stage1_failed(exc: BaseException) -> None:
    """Stage 1 stopped on an error: crash the worker (faust's loop), so a supervisor restarts it."""
    loop = _faust_loop
    if loop is None or loop.is_closed():
        os._exit(70)  # no loop to stop: never run on without stage 1
    asyncio.run_coroutine_threadsafe(app.crash(exc), loop)


_faust_loop: asyncio.AbstractEventLoop | None = None
stage1 = Stage1Loop(
    processor=processor, writer=stage1_writer,
    consumer_config=kafka_settings.client_config(**{
        "group.id": worker_settings.events_group,
        "session.timeout.ms": int(worker_settings.session_timeout_s * 1000),
        "heartbeat.interval.ms": int(max(1.0, worker_settings.session_timeout_s / 3) * 1000),
        # How soon the group notices partitions `streams topics grow` added.
        "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
    }),
    changelog_topic=worker_settings.stage1_changelog,
    topics=[] if bucket_topics is not None else [topic_names.events],
    send=lambda output: _send(output, stage1_writer), after_tick=_after_tick, on_durable=metrics.event_in,
    on_failure=_stage1_failed, tick_s=TICK_S, persist_every=STAGE1_PERSIST_EVERY)


@app.service
class Stage1Service(faust.Service):
    """Runs :data:`stage1` while the worker runs; stopping the worker persists, commits and leaves its group."""

    async def on_start(self) -> None:
        """Start stage 1's thread (after faust recovered stage 2)."""
        global _faust_loop
        _faust_loop = asyncio.get_running_loop()
        if bucket_topics is not None:
            stage1.subscribe(await _faust_loop.run_in_executor(None, bucket_topics.wanted))
        stage1.start()

    async def on_stop(self) -> None:
        """Stop stage 1 (it persists what it handled first), without blocking faust's loop."""
        await asyncio.get_running_loop().run_in_executor(None, stage1.stop)


def _flush_and_ack() -> list[Any]:
    """Make stage 2's aggregates durable, then its offset checkpoint; returns the records now acknowledgeable.

    The checkpoint is written after the flush: written with the aggregates, it could
    land first and outlive them in a crash. faust flushes its producer before it
    commits, so a committed offset never runs ahead of the stored state.
    """
    stage2_writer.flush()
    if _partials_progress:
        merger.checkpoint(_partials_progress)
        _partials_progress.clear()
        stage2_writer.flush()
    batch = _unacked_partials[:]
    del _unacked_partials[:]
    return batch


async def _ack(batch: list[Any]) -> None:
    if _partials_stream is not None:
        for event in batch:
            await _partials_stream.ack(event)


_unacked_partials: list[Any] = []
_partials_stream: Any = None


async def _skip(stream: Any, event: Any, skip: Skip) -> None:
    """A record the offset guard refused: not handled; for a gap, seek back so the skipped records come again.

    It is acknowledged at once (faust then forgets it; a record past a gap is re-read
    after the seek and handled then), which cannot let a commit pass the unhandled
    records before it: faust commits only up to the first offset not acknowledged.
    """
    await stream.ack(event)
    if not skip.seek:
        return
    msg = event.message
    log.warning("partition %s[%d]: handed offset %d while %d was expected: seeking back to %d",
                msg.topic, msg.partition, skip.got, skip.expected, skip.expected)
    metrics.offset_gap("sought")
    await _seek(msg.tp, skip.expected)


SEEK_TIMEOUT_S = 5.0


async def _seek(tp: Any, offset: int) -> None:
    """Seek one assigned partition (aiokafka's position and faust's read offset) to ``offset``, for at most 5 s."""
    try:
        await asyncio.wait_for(app.consumer.seek_wait({tp: offset}), SEEK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a failed seek leaves the gap, found again on the next record or check
        log.warning("seek of %s[%d] to %d failed: %r", tp.topic, tp.partition, offset, exc)


_fetch_state_unreadable = False


def _fetch_states() -> dict[tuple[str, int], FetchState] | None:
    """What faust's consumer last heard from the broker about each assigned partials partition (stage 2).

    Read from aiokafka's subscription state (plain attribute reads; faust runs the
    consumer in its own thread). None, logged once, if this faust/aiokafka does not
    expose it: stalls are then not watched.
    """
    global _fetch_state_unreadable
    try:
        consumer = app.consumer._thread._consumer  # noqa: SLF001 - faust does not expose fetch state
        if consumer is None:
            return {}  # not started yet
        subscription = consumer._subscription.subscription  # noqa: SLF001
        assignment = subscription.assignment if subscription is not None else None
        committed = app.consumer._committed_offset  # noqa: SLF001 - faust's offsets it sought to on assignment
        out: dict[tuple[str, int], FetchState] = {}
        if assignment is None:
            return out
        for tp in list(assignment.tps):
            if not _is_partials_topic(tp.topic):
                continue
            state = assignment.state_value(tp)
            if state is None:
                continue
            fetched_to = state.position if state.has_valid_position else None
            # Where this assignment started: the committed offset, never past what was processed.
            # None (faust keeps none for 0 either): the group starts at the log's beginning
            # (consumer_auto_offset_reset="earliest"), whatever the fetch position says; taking
            # the fetch position hid a partition fetched to its end with nothing handed over.
            start = committed.get(tp) or 0
            out[(tp.topic, tp.partition)] = FetchState(state.highwater, state.timestamp, start, fetched_to)
        return out
    except AttributeError as exc:
        if not _fetch_state_unreadable:
            _fetch_state_unreadable = True
            log.warning("cannot read the consumer's fetch state (%s): stalled partials partitions are not watched",
                        exc)
        return None


STALL_S = 10.0
_stall_sought: dict[tuple[str, int], float] = {}  # partition -> monotonic time of the seek meant to revive it


def _not_fetched_why(tp: TP) -> str:
    """What the consumer says of a partition it does not fetch (for the warning only)."""
    try:
        consumer = app.consumer
        state = consumer._thread._consumer._subscription.subscription.assignment.state_value(tp)  # noqa: SLF001
        return (f"aiokafka paused={getattr(state, 'paused', '?')} "
                f"position={'valid' if getattr(state, 'has_valid_position', False) else 'none'}, "
                f"faust paused={tp in consumer._paused_partitions} "  # noqa: SLF001
                f"active={tp in (consumer._active_partitions or ())}")  # noqa: SLF001
    except AttributeError as exc:
        return f"state unreadable: {exc}"


async def _revive_stalled(fetch: Mapping[tuple[str, int], FetchState]) -> None:
    """Revive any events or partials partition whose agent was handed nothing for ``STALL_S`` while behind.

    faust's consumer can fetch a partition to its end without handing the records to
    the agent, or stop fetching a partition it was assigned (the causes found are
    closed in :mod:`streams.worker.faust_patches`; this is the safety net for any
    other). Such a partition would sit still (stage 1's lag-aware idle rule keeps its
    buckets open meanwhile, so nothing turns late). One fetched past what was handed
    over is sought back to the next offset its agent expects; one not fetched at all,
    or still stalled ``STALL_S`` after its seek, makes the worker rejoin the group (at
    most once per ``3 * STALL_S``), whose rebalance rebuilds faust's consumer state.
    Logged and counted (``streams_stalled_partitions_reported``), as are the offset gaps
    the guards accepted since the last tick (``streams_offset_gaps{outcome="accepted"}``).
    """
    global _last_rejoin
    for tp, gap in partials_guard.accepted:
        log.warning("partition %s[%d]: offsets %d..%d never came after %d seeks: the log holds none there "
                    "(transaction markers, compaction or retention); going on from %d", tp.topic, tp.partition,
                    gap.expected, gap.got - 1, partials_guard.attempts, gap.got)
        metrics.offset_gap("accepted")
    partials_guard.accepted.clear()
    now, after = int(time.time() * 1000), int(STALL_S * 1000)
    stalled = partials_guard.stalled(fetch, now, after)
    for source in set(_stall_sought) - set(stalled):
        del _stall_sought[source]
    rejoin = False
    for source, stall in stalled.items():
        tp = TP(*source)
        sought = _stall_sought.get(source)
        if sought is None:
            _stall_sought[source] = time.monotonic()
            metrics.stall_reported()
            if stall.fetching and stall.expected is not None:
                log.warning("partition %s[%d]: fetched to offset %s but nothing handed over for %.0f s: "
                            "seeking back to %d", tp.topic, tp.partition, fetch[source].fetched_to, STALL_S,
                            stall.expected)
                await _seek(tp, stall.expected)
                continue
            log.warning("partition %s[%d]: assigned but not fetched for %.0f s (%s): rejoining the group",
                        tp.topic, tp.partition, STALL_S, _not_fetched_why(tp))
            rejoin = True
        elif time.monotonic() - sought >= STALL_S:
            rejoin = True
    if rejoin and time.monotonic() - _last_rejoin >= 3 * STALL_S:
        _last_rejoin = time.monotonic()
        _stall_sought.clear()
        _rejoin_group()


_last_rejoin = -1e9


def _rejoin_group() -> None:
    """Ask aiokafka's group coordinator to rejoin (in its own thread's loop), as a changed subscription would."""
    try:
        thread = app.consumer._thread  # noqa: SLF001 - faust does not expose a rejoin
        coordinator = thread._consumer._coordinator  # noqa: SLF001
        thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)
    except AttributeError as exc:
        log.warning("cannot ask the group to rebalance (%s): the stalled partitions wait for the next one", exc)
        return
    log.warning("rejoining the consumer group to revive the stalled partitions")


@app.timer(interval=TICK_S)
async def flush_stage2() -> None:
    """Make stage 2's aggregates and checkpoint durable, then acknowledge the partials they cover."""
    if app.rebalancing:
        return
    await _ack(_flush_and_ack())
    merger.expire(int(time.time() * 1000))


RECOVERY_STALL_S = 30.0
_recovery_progress: tuple[int, float] | None = None  # (changelog records still to restore, since when)


@app.timer(interval=1.0)
async def watch_offsets() -> None:
    """Once a second, outside the tick (a seek must never hold a bucket close): revive stalled partitions.

    During a rebalance it watches faust's changelog recovery instead: one whose count of
    records still to restore has not moved for ``RECOVERY_STALL_S`` (faust then only logs
    "No event received for active tp", and waits for ever; seen once in the two-worker kill
    test) makes the worker rejoin the group, which restarts the recovery. A slow recovery
    that moves is left alone.
    """
    global _recovery_progress, _last_rejoin
    if app.rebalancing:
        try:
            remaining = app.tables.recovery.active_remaining_total()
        except AttributeError:
            return
        now = time.monotonic()
        if _recovery_progress is None or _recovery_progress[0] != remaining or remaining == 0:
            _recovery_progress = (remaining, now)
        elif now - _recovery_progress[1] >= RECOVERY_STALL_S and now - _last_rejoin >= 3 * STALL_S:
            log.warning("changelog recovery has not moved for %.0f s (%d records to restore): rejoining the group",
                        RECOVERY_STALL_S, remaining)
            metrics.stall_reported()
            _last_rejoin, _recovery_progress = now, None
            _rejoin_group()
        return
    _recovery_progress = None
    fetch = _fetch_states()
    if fetch is not None:
        await _revive_stalled(fetch)


BUCKET_TOPICS_REFRESH_S = float(os.environ.get("STREAMS_BUCKET_TOPICS_REFRESH_S", "2.0"))


@app.timer(interval=BUCKET_TOPICS_REFRESH_S)
async def follow_bucket_topics() -> None:
    """Topic per bucket: subscribe to bucket topics that appeared, drop those that were deleted."""
    if bucket_topics is None:
        return
    try:
        wanted = await asyncio.get_running_loop().run_in_executor(None, bucket_topics.wanted)
    except TopicAdminError as exc:
        log.warning("cannot list the bucket topics: %s", exc)
        return
    stage1.subscribe(wanted)


def _published_directory() -> dict[str, tuple[int, ...]]:
    """The directory on the compacted hot-keys topic (what producers apply), by key text."""
    with Monitor(kafka_settings.client_config(), events_topic=topic_names.events,
                 hot_keys_topic=topic_names.hot_keys, group=worker_settings.app_id, timeout_s=20) as monitor:
        notices = monitor.snapshot().hot_keys
    return {n.key_display: n.placement for n in notices if n.key_display and canonical_key(n.key_display) == n.key}


def _publish(decision: Decision, now_s: float, routing_map: RoutingMap) -> None:
    """Write one directory change to the hot-keys topic: a placement notice, or a tombstone for a key sent home."""
    key = canonical_key(decision.key)
    if decision.kind == "retired":
        stage2_writer.write(topic_names.hot_keys, key, None)
        return
    now_ms = int(now_s * 1000)
    notice = HotKeyNotice(
        key=key, key_display=decision.key, placement=decision.partitions, home=decision.home,
        estimated_rate=decision.rate, share=decision.share, partitions=routing_map.partitions,
        detected_at_ms=now_ms, hot_since_ms=min(now_ms, int(decision.since_s * 1000)), map_version=routing_map.version,
        detector=instance_id[:1024])
    stage2_writer.write(topic_names.hot_keys, key, encode_notice(notice), headers=notice_headers())


@app.agent(sketches_topic)
async def decide_hot_keys(stream: Any) -> None:
    """The decider: merge every instance's latest summary, publish directory changes."""
    global _directory_known
    loop = asyncio.get_running_loop()
    async for value in stream:
        try:
            summary = SketchSummary.from_record(orjson.loads(value))
        except (orjson.JSONDecodeError, HotKeyNoticeError, TypeError, ValueError) as exc:
            log.warning("rejected sketch summary: %s", exc)
            metrics.rejected_summary()
            continue
        if not _directory_known:
            decider.restore(await loop.run_in_executor(None, _published_directory), time.time())
            _directory_known = True
        now_s = time.time()
        routing_map = _follow_map_in_force()
        outcome = balance_loop.offer(summary, now_s)
        if outcome.measured is not None:
            metrics.observe_balance(outcome.measured)
        decisions = outcome.decisions
        for decision in decisions:
            _publish(decision, now_s, routing_map)
            metrics.decision(decision)
            log.info("directory %s: %r -> partitions %s (%.0f events/s, %.1f%% of traffic, home %d)", decision.kind,
                     decision.key[:100], list(decision.partitions), decision.rate, 100 * decision.share, decision.home)
        if decisions:
            stage2_writer.flush_soon(5)  # a notice is latency-critical: do not let it linger
            plan = decider.last_plan
            if plan is not None:
                log.info("balance: max/mean %.2f measured, %.2f predicted", max_over_mean(plan.loads_before),
                         max_over_mean(plan.loads_after))


@app.agent(partials_topic)
async def merge_partials(stream: Any) -> None:
    """Stage 2: upsert each partial's slot and emit the exact merged aggregate."""
    global _partials_stream
    codec, check, progress = _codecs["partials"], partials_guard.check, _partials_progress
    _partials_stream = manual = stream.noack()
    async for event in manual.events():
        msg = event.message
        tp = msg.tp
        if not partials_guard.knows(tp):
            partials_guard.expect(tp, merger.resume_offset(msg.partition))
        skip = check(tp, msg.offset, int(time.time() * 1000))
        if skip is not None:
            await _skip(manual, event, skip)
            continue
        progress[msg.partition] = max(msg.offset, progress.get(msg.partition, -1))
        try:
            partial = codec.decode(msg.value)
            if merger.expired(partial, int(time.time() * 1000)):
                raise SerializationError(f"partial of bucket {partial['bucket']} is past retention: merged alone it "
                                         "would replace the exact aggregate", field="bucket_start_ms")
            merged = merger.apply(msg.partition, partial)
        except SerializationError as exc:
            _send(Output("dead_letters", bounded(msg.key, MAX_ORIGINAL_KEY_BYTES) or b"", dead_letter_record(
                f"bad partial: {exc}", exc.field, msg.topic, msg.partition, msg.offset, int(time.time() * 1000),
                msg.key, msg.value)), stage2_writer)
        else:
            _send(Output("aggregates", f"{merged['bucket']}|{merged['key']}".encode(), merged), stage2_writer)
        _unacked_partials.append(event)  # acknowledged after the flush that covers its output
        if len(_unacked_partials) >= FLUSH_EVERY:
            await _ack(_flush_and_ack())

