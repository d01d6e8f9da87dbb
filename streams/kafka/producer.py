"""RoutingProducer: stamp, route, encode and produce with an explicit partition.

The Python confluent-kafka client cannot call a Python partitioner (librdkafka runs
partitioners on its own threads), so the :class:`~streams.core.routing.router.Router` computes
the partition here and ``produce(partition=...)`` passes it through. The producer is
a wrapper (composition) around ``confluent_kafka.Producer``:

* **stamp**: an event without an ID gets a UUIDv7 (or Snowflake) ID; the event time
  is the event's own ``ts_ms`` if given, else the ID's time;
* **route**: time bucket + hash of the key under the routing map of that bucket,
  salted ``key#i`` when the key is split (see :mod:`streams.core.routing.directory`);
* **encode**: the ``Event`` envelope (``schemas/event.avsc``) as JSON (orjson) or
  Avro (fastavro);
* **produce**: ``enable.idempotence=true`` and ``acks=all`` by default, with the
  headers a reader needs (``content-type``; ``streams-salt`` on a directory-placed
  key's records; ``headers="all"`` adds ``streams-id-kind``, ``streams-bucket`` and
  ``streams-map-version`` as records carried before); records sent and failed are
  counted per partition.

Per event, ``send`` does only what the record needs. A key the directory does not
place, in one of the last 64 buckets the producer routed (late and out-of-order
events included), takes a fast path: one dict lookup that misses, the router's own
placer for that bucket (the same function ``Router.route`` calls, so the partition is
identical; under ``mod`` + ``murmur2`` it is Kafka's rule, what librdkafka's
``murmur2_random`` computes), a cached topic and header list, and no RoutingDecision
unless the caller wants one. Directory keys, a new bucket and a new map
(``Router.epoch`` changes) take the router. The partition is still computed here and
passed explicitly rather than left to librdkafka's partitioner: librdkafka would place
by the topic's partition count, which may exceed the map's (a topic grown ahead of a
new map, which librdkafka picks up at its next metadata refresh, mid-bucket), and the
per-partition counts of :class:`DeliveryStats` need the partition; computing it here
(the compiled murmur2 behind a lambda) costs about 0.2 µs of CPU per record. IDs come
from uuid-utils (see ``_Stamper``), which also parses UUID text keys.

Delivery accounting costs no Python call per delivered record: librdkafka reports
failures only (``delivery.report.only.error=true``), and ``delivered`` is what was
sent less what failed less what librdkafka still holds (``len(producer)``). A full
local queue raises :class:`~streams.core.errors.QueueFullError` after ``send``'s
``timeout``; :meth:`RoutingProducer.close` raises
:class:`~streams.core.errors.UndeliveredError` unless every record was delivered.

It keeps its split table current from the compacted hot-keys topic through a
background :class:`~streams.kafka.follower.HotKeyFollower`, and its routing-map
history from the routing-maps topic through a
:class:`~streams.kafka.maps.RoutingMapFollower`: a new map version applies from
its first bucket on, and a producer reads the whole history before it starts, so
one started after a change routes as those started before it. Every record goes to
a partition its topic has: a topic may have more partitions than the maps
(grown ahead of a new map), never fewer than the map routing its first event, and
an event a newer map puts on a partition the topic lacks raises RoutingMapError.
Credentials in its configuration never appear in logs or errors
(:func:`streams.core.config.redact`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, overload

import orjson
from confluent_kafka import KafkaError, KafkaException, Message

try:  # compiled UUIDv7 (Rust's uuid crate): monotonic within a process by its documented contract
    from uuid_utils import uuid7 as _compiled_uuid7
except ImportError:  # pragma: no cover - the pure-Python generator stands in
    _compiled_uuid7 = None

from streams.core.config import KafkaSettings, redact
from streams.core.errors import (
    ConfigError,
    QueueFullError,
    RoutingMapError,
    SerializationError,
    UndeliveredError,
)
from streams.core.ids import IdKind, Snowflake, UUIDv7Generator, id_time_ms, parse_id
from streams.core.ids.lease import LeaseTerms
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import UNSPLIT, Router, RoutingDecision
from streams.core.serde import CONTENT_TYPE, codec_for
from streams.kafka.clients import new_producer
from streams.kafka.leases import DEFAULT_ID_LEASES_TOPIC, WorkerIdLease

__all__ = ["RoutingProducer", "DeliveryStats", "key_text", "DEFAULT_PRODUCER_CONFIG", "SEND_TIMEOUT_S", "HEADER_MODES"]

#: What a RoutingProducer sets unless the caller overrides it.
DEFAULT_PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    # Successes are counted as sent - failed - still held (see DeliveryStats): a Python
    # callback per delivered record would cost more than the rest of the send path.
    "delivery.report.only.error": True,
    # Looking up a topic's partition count must not create it on a broker with
    # auto.create.topics.enable=true: a missing topic is an error, not a default.
    "allow.auto.create.topics": False,
}


_monotonic_ns = time.monotonic_ns

#: Delivery errors that say the broker did not write the record (librdkafka's
#: NOT_PERSISTED): resending it cannot create a duplicate. Every other failure, above
#: all a timeout of a record already sent (``_MSG_TIMED_OUT``), may have been written.
NOT_PERSISTED_ERRORS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE, KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.POLICY_VIOLATION, KafkaError._TIMED_OUT_QUEUE, KafkaError._QUEUE_FULL, KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION, KafkaError._PURGE_QUEUE, KafkaError._INVALID_ARG,
})

#: How long ``send`` waits for room in a full local queue before QueueFullError, in seconds.
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DeliveryStats:
    """Counts since the producer was created: ``sent`` = ``delivered`` + ``failed`` + ``in_flight``.

    ``sent``: records librdkafka accepted; ``failed``: failure reports served (by
    ``poll``, ``flush``, ``close``, or every 1024 sends); ``in_flight``: records
    librdkafka still holds, queued, awaiting the broker's acknowledgement, or failed
    with the report not served yet; ``delivered``: the rest, acknowledged by the
    broker. ``per_partition`` maps (topic, partition) to records sent there less those
    failed there: delivered plus in flight, so exactly the delivered ones once
    ``in_flight`` is 0 (after a ``flush`` that returned 0, or ``close``).
    ``possibly_persisted``: failed records the broker may have written all the same
    (a timeout after the record was sent, a lost connection): a resend may duplicate
    them, so resend with the same ``event_id`` and ``ts_ms`` and the workers' dedupe
    counts each once. ``not_persisted`` = ``failed`` - ``possibly_persisted``.
    """

    sent: int
    delivered: int
    failed: int
    per_partition: Mapping[tuple[str, int], int]
    last_error: str | None
    possibly_persisted: int = 0

    @property
    def not_persisted(self) -> int:
        """Failed records the broker certainly did not write: resending them cannot duplicate."""
        return self.failed - self.possibly_persisted

    @property
    def in_flight(self) -> int:
        """Records librdkafka still holds: queued, awaiting acknowledgement, or failed with the report unserved."""
        return self.sent - self.delivered - self.failed


def key_text(value: object, canonical: bytes) -> str:
    """The event's key as text: UUID-like keys in canonical hyphenated form, others as given.

    Every spelling of one UUID has one text, so workers aggregate them together.
    """
    if isinstance(value, str):
        # A UUID-shaped str is 32 or more characters; shorter text with 16 bytes of UTF-8 is itself.
        if len(canonical) != 16 or len(value) < 32:
            return value
        # 8-4-4-4-12 hex digits (canonical_key checked the shape): lower case is the canonical text.
        return value.lower() if len(value) == 36 else str(uuid.UUID(bytes=canonical))
    if isinstance(value, uuid.UUID):
        return str(value)
    if len(canonical) == 16 and isinstance(value, (bytes, bytearray, memoryview)):
        return str(uuid.UUID(bytes=bytes(canonical)))
    return canonical.decode("utf-8", "backslashreplace")


class _Stamper:
    """Hands out (id, id for the salt, time in ms) for events that have no ID.

    UUIDv7 comes from uuid-utils (Rust's ``uuid`` crate, ``Uuid::now_v7``: one shared,
    locked ``ContextV7`` per process whose IDs are documented "guaranteed to be ordered
    by their creation": RFC 9562 Method 1 with a 42-bit counter reseeded each new
    millisecond with its top bit clear, the last timestamp kept when the clock steps
    back, an overflow carried into the timestamp, as :mod:`streams.core.ids.uuidv7`
    does; uuid-utils reseeds its random source in a forked child) at about a tenth of
    the pure-Python generator's cost: the id is its text, the salt's id the uuid_utils.UUID (the router
    reads its 16 bytes, only for a split key). With ``compiled=False``, or without uuid-utils, the project's
    own :class:`~streams.core.ids.UUIDv7Generator` stamps: the id is its text, or with
    ``uuid_objects`` a uuid.UUID (orjson writes it as its text in C).
    """

    def __init__(self, id_kind: str, lease: WorkerIdLease | int | None, *, uuid_objects: bool = False,
                 compiled: bool = True) -> None:
        self.kind = id_kind
        self.lease = lease if isinstance(lease, WorkerIdLease) else None
        # stamp is bound to one kind's method here, so the per-event call makes no choice.
        self.stamp: Callable[[], tuple[object, object, int]]
        if id_kind == "uuid7" and compiled and _compiled_uuid7 is not None:
            self.stamp = self._uuid7_compiled
        elif id_kind == "uuid7":
            generator = UUIDv7Generator()
            self._next_int = generator.next_int
            self._next_uuid = generator.next
            self.stamp = self._uuid7_object if uuid_objects else self._uuid7
        elif id_kind == "snowflake":
            if self.lease is not None:
                self._snowflake = Snowflake(worker_id=self.lease.worker)  # type: ignore[arg-type]
                self._check = self.lease.check
                self.stamp = self._leased_snowflake_id
            elif lease.__class__ is int:
                self._snowflake = Snowflake(worker_id=lease)  # type: ignore[arg-type]
                self.stamp = self._snowflake_id
            else:
                raise ConfigError("id_kind 'snowflake' needs a worker ID: a WorkerIdLease, or an explicit one")
        else:
            raise ConfigError(f"id_kind must be 'uuid7' or 'snowflake', got {id_kind!r}")

    @staticmethod
    def _uuid7_compiled() -> tuple[str, object, int]:
        u = _compiled_uuid7()  # type: ignore[misc]
        return str(u), u, u.timestamp

    def _uuid7(self) -> tuple[str, bytes, int]:
        value = self._next_int()
        raw = value.to_bytes(16, "big")
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", raw, value >> 80

    def _uuid7_object(self) -> tuple[uuid.UUID, uuid.UUID, int]:
        u = self._next_uuid()
        return u, u, u.int >> 80

    def _snowflake_id(self) -> tuple[str, bytes, int]:
        sf = self._snowflake.next()
        return str(sf), sf.to_bytes(8, "big"), id_time_ms(sf, layout=self._snowflake.layout)

    def _leased_snowflake_id(self) -> tuple[str, bytes, int]:
        lease = self.lease
        if _monotonic_ns() >= lease.deadline_ns:  # type: ignore[union-attr]
            self._check()  # raises WorkerIdLeaseError unless a new lease came meanwhile
        if self._snowflake.worker_id != lease.worker:  # type: ignore[union-attr]
            self._snowflake = Snowflake(worker_id=lease.worker)  # type: ignore[union-attr,arg-type]
        return self._snowflake_id()


class RoutingProducer:
    """Routes events with ``router`` and produces them through confluent-kafka.

    ``kafka``: where the cluster is (``KafkaSettings``) or a plain confluent-kafka
    config dict; ``producer_config`` overrides :data:`DEFAULT_PRODUCER_CONFIG`.
    ``hot_keys_topic``: when given, a background consumer follows it and keeps
    ``router.directory`` current. ``routing_maps_topic``: when given, a background
    :class:`~streams.kafka.maps.RoutingMapFollower` installs every valid map version
    published there into ``router``, and the constructor waits up to
    ``maps_timeout_s`` until it has read the whole history; the router's own
    (configured) maps must agree with the topic's versions of the same numbers, and
    a configured version above 1 must be on the topic. ``check_partitions``: look up
    each target topic's partition count on first use and raise RoutingMapError if it
    has fewer than the routing map of that first event, and refuse an event routed
    to a partition the topic lacks. Raises ConfigError for a bad serializer or ID
    kind, RoutingMapError if the routing-map history cannot be read in time or
    disagrees with the configured maps. ``headers``: one of :data:`HEADER_MODES`,
    "needed" by default (True still means "all", False "none").
    """

    def __init__(
        self,
        router: Router,
        kafka: KafkaSettings | Mapping[str, Any],
        *,
        serializer: str = "json",
        id_kind: str = "uuid7",
        snowflake_worker: int | None = None,
        id_leases_topic: str | None = DEFAULT_ID_LEASES_TOPIC,
        lease_terms: LeaseTerms | None = None,
        producer_config: Mapping[str, Any] | None = None,
        hot_keys_topic: str | None = None,
        routing_maps_topic: str | None = None,
        maps_timeout_s: float = 10.0,
        check_partitions: bool = True,
        headers: bool | str = "needed",
    ) -> None:
        base = kafka.client_config() if isinstance(kafka, KafkaSettings) else dict(kafka)
        self._config = {**DEFAULT_PRODUCER_CONFIG, **base, **(producer_config or {})}
        self.router = router
        self._route = router.route
        self._codec = codec_for(serializer, "event")
        # JSON goes straight to orjson (one call, no frame); the codec explains a failure.
        self._encode = orjson.dumps if serializer == "json" else self._codec.encode
        self._content_type = CONTENT_TYPE[serializer]
        self._lease = None
        if id_kind == "snowflake":
            worker = None if snowflake_worker is None or snowflake_worker == -1 else snowflake_worker
            if id_leases_topic:
                self._lease = WorkerIdLease(base, topic=id_leases_topic, terms=lease_terms, worker=worker)
                self._lease.acquire()
            elif worker is None:
                raise ConfigError("snowflake_worker must be set when id_leases_topic is None: without leases "
                                  "nothing keeps two producers from minting the same IDs")
        self._stamper = _Stamper(id_kind, self._lease or snowflake_worker, uuid_objects=serializer == "json")
        self._stamp = self._stamper.stamp
        self._compiled_uuid7 = self._stamp == _Stamper._uuid7_compiled  # send stamps inline then
        self._id_kind = id_kind
        mode = {True: "all", False: "none"}.get(headers, headers) if headers.__class__ is bool else headers
        if mode not in HEADER_MODES:
            raise ConfigError(f"headers must be one of {HEADER_MODES} (or True for 'all', False for 'none'), "
                              f"got {headers!r}")
        self._header_mode = mode
        # "needed": content-type on every record, streams-salt on a directory-placed key's
        self._plain_headers = [("content-type", self._content_type)]
        self._salt_headers: dict[int, list[tuple[str, bytes]]] = {}
        # "all": (bucket label, map version, salt, id kind) -> the five record headers
        self._header_cache: dict[tuple[str, int, int, str], list[tuple[str, bytes]]] = {}
        # send's fast path: bucket index -> (router epoch, topic, home placer, counts, headers, bucket
        # start, label, map version) of the buckets routed lately (at most _HOT_BUCKETS)
        self._hots: dict[int, tuple[Any, ...]] = {}
        self._width_ms = router.buckets.width_ms
        self._lookup = router.directory.lookup
        self._check_partitions = check_partitions
        try:
            # Delivery reports reach _on_delivery from poll()/flush() on the caller's thread.
            self._producer = new_producer({**self._config, "on_delivery": self._on_delivery})
        except KafkaException as exc:
            raise ConfigError(f"invalid producer configuration {redact(self._config)}: {exc}") from None
        # confluent-kafka's positional order: topic, value, key, partition, on_delivery, callback, timestamp, headers
        self._enqueue = self._producer.produce
        self._poll = self._producer.poll
        # topic -> records sent to each partition (index); a topic appears on first use
        self._sent_to: dict[str, list[int]] = {}
        self._failed = 0
        self._possibly_persisted = 0
        self._failed_to: dict[tuple[str, int], int] = {}
        self._last_error: str | None = None
        self._closed = False
        self._refreshed: dict[str, float] = {}  # topic -> monotonic time its partition count was last looked up
        self._follower = None
        self._map_follower = None
        if routing_maps_topic:
            self._map_follower = self._follow_maps(base, routing_maps_topic, maps_timeout_s)
        if hot_keys_topic:
            from streams.kafka.follower import HotKeyFollower

            self._follower = HotKeyFollower(router, base, hot_keys_topic)
            self._follower.start()

    # -- the per-event path --------------------------------------------------------------

    @overload
    def send(self, key: object, value: float | None = None, *, event_id: object = None, ts_ms: int | None = None,
             attributes: Mapping[str, str] | None = None, timeout: float | None = SEND_TIMEOUT_S,
             want_decision: Literal[True] = True) -> RoutingDecision: ...

    @overload
    def send(self, key: object, value: float | None = None, *, event_id: object = None, ts_ms: int | None = None,
             attributes: Mapping[str, str] | None = None, timeout: float | None = SEND_TIMEOUT_S,
             want_decision: Literal[False]) -> None: ...

    def send(
        self,
        key: object,
        value: float | None = None,
        *,
        event_id: object = None,
        ts_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = SEND_TIMEOUT_S,
        want_decision: bool = True,
    ) -> RoutingDecision | None:
        """Stamp, route, encode and enqueue one event; return where it goes.

        ``event_id`` (a UUID, its text, or a Snowflake int) is kept if given,
        otherwise stamped; ``ts_ms`` overrides the ID's time as the event time.
        ``timeout``: how long to wait, in seconds, for room when librdkafka's local
        queue is full (``queue.buffering.max.messages``), serving delivery reports
        meanwhile; None waits as long as it takes. ``want_decision=False`` returns
        None instead of the RoutingDecision (a caller that does not look at it saves
        building one); the record goes to the same place either way.
        Raises InvalidKeyError for a bad key, InvalidIdError for a bad ID,
        RoutingMapError if the topic disagrees with the map, SerializationError if
        the event cannot be encoded, QueueFullError if the queue stayed full for
        ``timeout`` s (the event was not sent). Delivery is asynchronous: see
        :meth:`flush` and :meth:`close`.
        """
        canonical = canonical_key(key)
        if value is not None and (value.__class__ is not float or not -_INF < value < _INF):
            value = _finite(value)
        if event_id is None:
            if self._compiled_uuid7:  # the stamp inline: uuid-utils' UUIDv7, its text, its time
                id_salt = _compiled_uuid7()  # type: ignore[misc]
                id_text, id_ms = str(id_salt), id_salt.timestamp
            else:
                id_text, id_salt, id_ms = self._stamp()
            id_kind = self._id_kind
        else:
            id_text, id_salt, id_ms, id_kind = _given_id(event_id)
        event_ts = id_ms if ts_ms is None else ts_ms
        decision: RoutingDecision | None = None
        # Fast path, the common case: a key the directory does not place, in a bucket routed
        # lately, under the same maps. The router's own placer for that bucket puts it where
        # route() would (its home); topic, headers and counts come from the cache.
        hot = self._hots.get(event_ts // self._width_ms) if event_ts.__class__ is int else None
        if hot is not None and hot[0] == self.router.epoch and self._lookup(canonical) is None:
            topic, counts, headers = hot[1], hot[3], hot[4]
            partition = hot[2](canonical)
            try:
                n = counts[partition] + 1
            except IndexError:
                decision = self._route(canonical, event_ts, id_salt)
                n = self._beyond(counts, decision) + 1
        else:
            epoch = self.router.epoch  # before routing: a map installed meanwhile leaves the cache stale, not wrong
            decision = self._route(canonical, event_ts, id_salt)
            topic, partition = decision[0], decision[1]
            counts = self._sent_to.get(topic)
            if counts is None:
                counts = self._first_use(topic, decision)
            try:
                n = counts[partition] + 1
            except IndexError:  # beyond the topic's partitions at its last look (or, unchecked, the maps' at first use)
                n = self._beyond(counts, decision) + 1
            headers = self._headers_for(decision, id_kind)
            if decision[7] == UNSPLIT and (hot is None or hot[0] != epoch):
                self._warm(decision, counts, epoch)
        # key_text's two commonest cases inline: text that is no UUID is itself; hyphenated UUID text is lowered
        if key.__class__ is str and (len(key) < 32 or len(canonical) != 16):
            text = key
        elif key.__class__ is str and len(key) == 36:
            text = key.lower()
        else:
            text = key_text(key, canonical)
        record = {"id": id_text, "id_kind": id_kind, "ts_ms": event_ts, "key": text,
                  "value": value, "attributes": attributes or _NO_ATTRIBUTES}
        try:
            payload = self._encode(record)
        except TypeError:  # orjson's error for a value JSON cannot hold: the codec names the field
            payload = self._codec.encode(record)
        record_key = canonical if decision is None else decision[2]
        try:
            self._enqueue(topic, payload, record_key, partition, None, None, event_ts, headers)
        except BufferError:
            self._enqueue_when_room((topic, payload, record_key, partition, None, None, event_ts, headers), timeout)
        counts[partition] = n
        if not n & 0x3FF:
            self._poll(0)  # serve failure reports now and then, so stats() stays current
        if not want_decision:
            return None
        if decision is None:
            return _decision(RoutingDecision, (topic, partition, canonical, event_ts // self._width_ms, hot[5],
                                               hot[6], hot[7], UNSPLIT))
        return decision

    def send_many(self, events: Iterable[tuple[object, float | None]], *,
                  timeout: float | None = SEND_TIMEOUT_S) -> int:
        """Send every ``(key, value)`` pair of ``events`` as :meth:`send` would, stamped; return how many were sent.

        No RoutingDecision is built. Raises what ``send`` raises, at the first event
        that fails: the events before it were sent, the rest were not.
        """
        send = self.send
        sent = 0
        for key, value in events:
            send(key, value, timeout=timeout, want_decision=False)
            sent += 1
        return sent

    def _headers_for(self, decision: RoutingDecision, id_kind: str) -> list[tuple[str, bytes]] | None:
        """The headers of a record routed by ``decision`` under this producer's header mode."""
        mode = self._header_mode
        if mode == "needed":
            salt = decision[7]
            if salt == UNSPLIT:
                return self._plain_headers
            headers = self._salt_headers.get(salt)
            if headers is None:
                headers = [*self._plain_headers, ("streams-salt", b"%d" % salt)]
                if len(self._salt_headers) < _HEADER_CACHE_LIMIT:
                    self._salt_headers[salt] = headers
            return headers
        if mode == "all":
            label_version_salt_kind = (decision[5], decision[6], decision[7], id_kind)
            headers = self._header_cache.get(label_version_salt_kind)
            return self._new_headers(label_version_salt_kind) if headers is None else headers
        return None

    def _warm(self, decision: RoutingDecision, counts: list[int], epoch: int) -> None:
        """Cache what every home-placed key of ``decision``'s bucket shares, for send's fast path.

        Not with ``headers="all"``: those headers name the ID kind, which a given ID may change.
        """
        if self._header_mode == "all":
            return
        hots = self._hots
        if len(hots) >= _HOT_BUCKETS:
            hots.clear()
        start = decision[4]
        hots[decision[3]] = (epoch, decision[0], self.router.placer_for(start), counts,
                             self._headers_for(decision, self._id_kind), start, decision[5], decision[6])

    def _new_headers(self, label_version_salt_kind: tuple[str, int, int, str]) -> list[tuple[str, bytes]]:
        """The headers of every record in one bucket under one map version, salt and ID kind (cached)."""
        label, version, salt, id_kind = label_version_salt_kind
        headers = [
            ("streams-id-kind", _KIND_HEADER[id_kind]), ("streams-bucket", label.encode()),
            ("streams-map-version", b"%d" % version), ("streams-salt", b"%d" % salt),
            ("content-type", self._content_type),
        ]
        cache: dict[tuple[str, int, int, str], list[tuple[str, bytes]]] = self._header_cache  # type: ignore[assignment]
        if len(cache) >= _HEADER_CACHE_LIMIT:
            cache.clear()
        cache[label_version_salt_kind] = headers
        return headers

    def _enqueue_when_room(self, args: tuple[Any, ...], timeout: float | None) -> None:
        """Retry ``produce(*args)`` while serving delivery reports until it fits; QueueFullError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _QUEUE_POLL_S if deadline is None else min(_QUEUE_POLL_S, deadline - time.monotonic())
            self._poll(max(wait, 0))  # the local queue is full: serve delivery reports to drain it
            try:
                self._enqueue(*args)
                return
            except BufferError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise QueueFullError(
                        f"the local queue stayed full for {timeout} s ({len(self._producer)} records waiting, "
                        f"last error: {self._last_error}): the record was not sent", timeout_s=timeout) from None

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:  # a success report, only if delivery.report.only.error was turned off
            return
        self._failed += 1
        if err.code() not in NOT_PERSISTED_ERRORS:
            self._possibly_persisted += 1
        tp = (msg.topic(), msg.partition())
        self._failed_to[tp] = self._failed_to.get(tp, 0) + 1
        self._last_error = str(err)

    # -- topic checks, lifecycle ------------------------------------------------------------

    def _follow_maps(self, config: Mapping[str, Any], topic: str, timeout_s: float) -> Any:
        """Start following the routing-maps ``topic``; return once its history is installed and agrees."""
        from streams.kafka.maps import RoutingMapFollower

        configured = self.router.maps
        follower = RoutingMapFollower(self.router, config, topic, events_topic_partitions=self._partitions_now)
        follower.start()
        if not follower.wait_until_current(timeout_s):
            follower.stop()
            raise RoutingMapError(f"cannot read the routing-map history on {topic!r} within {timeout_s:g} s: "
                                  f"{follower.error or 'not read to its end'}")
        for m in configured:
            published = follower.topic_maps.get(m.version)
            if published is None and m.version == 1:
                continue  # the fleet's first map need not be published
            if published != m:
                follower.stop()
                raise RoutingMapError(
                    f"configured routing map {m} disagrees with {topic!r}: "
                    + (f"v{m.version} is not on the topic" if published is None else f"the topic has {published}"),
                    reason="version conflict")
        return follower

    def _first_use(self, topic: str, decision: RoutingDecision) -> list[int]:
        """Check ``topic`` (with ``check_partitions``) and start its per-partition counts."""
        if self._check_partitions:
            counts = [0] * self._check_topic(topic, decision[6])
        else:
            counts = [0] * max(m.partitions for m in self.router.maps)
        self._sent_to[topic] = counts
        return counts

    def _check_topic(self, topic: str, version: int) -> int:
        """The partition count of ``topic``; RoutingMapError if it has fewer than map ``version``."""
        actual = self._partition_count(topic)
        expected = next(m.partitions for m in self.router.maps if m.version == version)
        if actual < expected:
            raise RoutingMapError(f"topic {topic!r} has {actual} partitions but routing map v{version} expects "
                                  f"{expected} or more: grow the topic first")
        return actual

    def _beyond(self, counts: list[int], decision: RoutingDecision) -> int:
        """Make room in ``counts`` for ``decision``'s partition if the topic has it now; its count so far.

        Raises RoutingMapError (with ``check_partitions``) if the topic, looked up again
        (at most once a second), still lacks that partition.
        """
        topic, partition = decision[0], decision[1]
        if self._check_partitions:
            now = time.monotonic()
            actual = None
            if now - self._refreshed.get(topic, 0.0) >= _REFRESH_S:
                self._refreshed[topic] = now
                actual = self._partitions_now(topic)
            actual = max(actual or 0, len(counts))
            if partition >= actual:
                raise RoutingMapError(
                    f"routing map v{decision[6]} puts this event on partition {partition} of topic {topic!r}, "
                    f"which has {actual} partitions: grow the topic before the map's first bucket")
        else:
            actual = partition + 1
        counts.extend([0] * (actual - len(counts)))
        return counts[partition]

    def _partitions_now(self, topic: str) -> int | None:
        """The partition count of ``topic`` in one metadata lookup; None if it is unknown or unreachable."""
        try:
            info = self._producer.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:
            return None
        return len(info.partitions) if info is not None and info.error is None and info.partitions else None

    def _partition_count(self, topic: str, *, settle_s: float = 5.0) -> int:
        # A topic created a moment ago can be missing from the broker's metadata for a
        # short while (UNKNOWN_TOPIC_OR_PART): ask again for up to ``settle_s``.
        deadline = time.monotonic() + settle_s
        while True:
            try:
                md = self._producer.list_topics(topic, timeout=10)
            except KafkaException as exc:
                raise RoutingMapError(f"cannot read the partition count of topic {topic!r}: {exc}") from None
            info = md.topics.get(topic)
            if info is not None and info.error is None and info.partitions:
                self._refreshed[topic] = time.monotonic()
                return len(info.partitions)
            if time.monotonic() >= deadline:
                reason = info.error if info is not None else "no metadata"
                raise RoutingMapError(f"topic {topic!r} does not exist or has no partitions ({reason})")
            time.sleep(0.1)  # metadata polling interval while a new topic propagates

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports (failures only, by default); returns how many were served."""
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float = 30.0) -> int:
        """Wait up to ``timeout`` s for every record to be delivered or fail; returns how many remain.

        Never raises for failed records: a caller of ``flush`` reads ``stats()`` (or
        calls :meth:`close`, which raises) to learn whether they were delivered.
        """
        return int(self._producer.flush(timeout))

    def purge(self, timeout: float = 5.0) -> int:
        """Give up on every record not yet acknowledged; returns how many were given up.

        librdkafka drops them (queued ones never leave, in-flight ones lose their
        acknowledgement, so some may still have been written) and reports each as
        failed, served here within ``timeout`` s: afterwards ``in_flight`` is 0 and
        ``per_partition`` counts exactly the acknowledged records. ``last_error``
        keeps the error seen before the purge.
        """
        before, last_error = self._failed, self._last_error
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._producer.flush(timeout)
        self._last_error = last_error
        return self._failed - before

    def close(self, timeout: float = 30.0) -> DeliveryStats:
        """Stop following hot keys and routing maps, flush, and return the final counts if every record was delivered.

        Raises UndeliveredError (a DeliveryError carrying ``sent``, ``delivered``,
        ``failed``, ``in_flight`` and ``last_error``) if any record failed or was
        still undelivered after ``timeout`` seconds, so a caller never mistakes a
        failed or unfinished send for a finished one; :meth:`stats` still reads the
        counts afterwards. Calling it again flushes and reports again.
        """
        self._stop_followers()
        self.flush(timeout)
        self._closed = True
        if self._lease is not None:
            self._lease.close()
        stats = self.stats()
        if stats.failed or stats.in_flight:
            raise UndeliveredError(
                f"{stats.failed + stats.in_flight} of {stats.sent} records not delivered: {stats.failed} failed "
                f"({stats.not_persisted} not written, safe to resend; {stats.possibly_persisted} possibly written), "
                f"{stats.in_flight} still in flight after {timeout} s (last error: {stats.last_error})",
                sent=stats.sent, delivered=stats.delivered, failed=stats.failed, in_flight=stats.in_flight,
                last_error=stats.last_error, possibly_persisted=stats.possibly_persisted)
        return stats

    def stats(self) -> DeliveryStats:
        """A snapshot of the delivery counters (see DeliveryStats for what each means)."""
        failed = self._failed
        per_partition: dict[tuple[str, int], int] = {}
        sent = 0
        for topic, counts in list(self._sent_to.items()):
            for partition, n in enumerate(counts):
                sent += n
                n -= self._failed_to.get((topic, partition), 0)
                if n:
                    per_partition[(topic, partition)] = n
        in_flight = min(len(self._producer), sent - failed)  # len() may also count a queued log or error event
        return DeliveryStats(sent, sent - failed - in_flight, failed, per_partition, self._last_error,
                             self._possibly_persisted)

    @property
    def follower(self) -> Any:
        """The background hot-key follower, or None when not following a topic."""
        return self._follower

    @property
    def map_follower(self) -> Any:
        """The background :class:`~streams.kafka.maps.RoutingMapFollower`, or None when not following one."""
        return self._map_follower

    def _stop_followers(self) -> None:
        for follower in (self._follower, self._map_follower):
            if follower is not None:
                follower.stop()

    def __enter__(self) -> RoutingProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            if not self._closed:  # closed inside the block already: its outcome stands
                self.close()
        else:
            self._stop_followers()
            self.flush(5)
            if self._lease is not None:
                self._lease.close()

    def __repr__(self) -> str:
        return f"RoutingProducer(config={redact(self._config)!r}, map_version={self.router.current.version})"


_INF = float("inf")
#: What ``RoutingProducer(headers=...)`` accepts: "needed" (the default) sets what a
#: reader needs, ``content-type`` on every record and ``streams-salt`` on a
#: directory-placed key's; "all" adds ``streams-id-kind``, ``streams-bucket`` and
#: ``streams-map-version`` (what records carried before: readers still accept both);
#: "none" sets no headers (readers then assume the configured serializer and no salt).
HEADER_MODES = ("needed", "all", "none")
_decision = tuple.__new__  # a RoutingDecision from a tuple of its fields, without NamedTuple's frame
_KIND_HEADER = {"uuid7": b"uuid7", "snowflake": b"snowflake"}  # encoded once, not per event
_NO_ATTRIBUTES: Mapping[str, str] = {}  # shared, never written: encoded as {}
_HEADER_CACHE_LIMIT = 4096
_HOT_BUCKETS = 64  # buckets send's fast path remembers (events out of time order hit it too)
_QUEUE_POLL_S = 0.05  # how long one wait for queue room serves delivery reports
_REFRESH_S = 1.0  # how often an event routed beyond a topic's partitions looks the count up again


def _finite(value: object) -> float:
    """``value`` as a finite float, or SerializationError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SerializationError(f"event field 'value' must be a finite number or None, got {type(value).__name__}")
    result = float(value)
    if not -_INF < result < _INF:
        raise SerializationError(f"event field 'value' must be finite, got {value!r}")
    return result


def _given_id(event_id: object) -> tuple[str, bytes, int, str]:
    parsed = parse_id(event_id)
    if parsed.kind is IdKind.UUID7:
        value: uuid.UUID = parsed.value  # type: ignore[assignment]
        return str(value), value.bytes, parsed.timestamp_ms, "uuid7"
    sf: int = parsed.value  # type: ignore[assignment]
    return str(sf), sf.to_bytes(8, "big"), parsed.timestamp_ms, "snowflake"
