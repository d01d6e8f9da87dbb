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
* **produce**: ``enable.idempotence=true`` and ``acks=all`` by default, headers
  ``streams-id-kind``, ``streams-bucket``, ``streams-map-version``, ``streams-salt``
  and ``content-type``; deliveries and failures are counted per partition.

It keeps its split table current from the compacted hot-keys topic through a
background :class:`~streams.kafka.follower.HotKeyFollower`. Credentials in its
configuration never appear in logs or errors (:func:`streams.core.config.redact`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from streams.core.config import KafkaSettings, redact
from streams.core.errors import (
    ConfigError,
    DeliveryError,
    RoutingMapError,
    SerializationError,
)
from streams.core.ids import IdKind, Snowflake, UUIDv7Generator, id_time_ms, parse_id
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import Router, RoutingDecision
from streams.core.serde import CONTENT_TYPE, codec_for
from streams.kafka.clients import new_producer

__all__ = ["RoutingProducer", "DeliveryStats", "key_text", "DEFAULT_PRODUCER_CONFIG"]

#: What a RoutingProducer sets unless the caller overrides it.
DEFAULT_PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    # Looking up a topic's partition count must not create it on a broker with
    # auto.create.topics.enable=true: a missing topic is an error, not a default.
    "allow.auto.create.topics": False,
}


@dataclass(frozen=True)
class DeliveryStats:
    """Counts since the producer was created: ``sent`` = ``delivered`` + ``failed`` + in flight."""

    sent: int
    delivered: int
    failed: int
    per_partition: Mapping[tuple[str, int], int]
    last_error: str | None

    @property
    def in_flight(self) -> int:
        """Records handed to librdkafka whose delivery report has not arrived yet."""
        return self.sent - self.delivered - self.failed


def key_text(value: object, canonical: bytes) -> str:
    """The event's key as text: UUID-like keys in canonical hyphenated form, others as given.

    Every spelling of one UUID has one text, so workers aggregate them together.
    """
    if isinstance(value, str):
        return value if len(canonical) != 16 or canonical == value.encode() else str(uuid.UUID(bytes=canonical))
    if isinstance(value, uuid.UUID):
        return str(value)
    if len(canonical) == 16 and isinstance(value, (bytes, bytearray, memoryview)):
        return str(uuid.UUID(bytes=bytes(canonical)))
    return canonical.decode("utf-8", "backslashreplace")


class _Stamper:
    """Hands out (id text, id bytes, time in ms) for events that have no ID."""

    def __init__(self, id_kind: str, snowflake_worker: int) -> None:
        self.kind = id_kind
        if id_kind == "uuid7":
            self._next_int = UUIDv7Generator().next_int
        elif id_kind == "snowflake":
            self._snowflake = Snowflake(worker_id=snowflake_worker)
        else:
            raise ConfigError(f"id_kind must be 'uuid7' or 'snowflake', got {id_kind!r}")

    def stamp(self) -> tuple[str, bytes, int]:
        if self.kind == "uuid7":
            value = self._next_int()
            raw = value.to_bytes(16, "big")
            h = raw.hex()
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", raw, value >> 80
        sf = self._snowflake.next()
        return str(sf), sf.to_bytes(8, "big"), id_time_ms(sf, layout=self._snowflake.layout)


class RoutingProducer:
    """Routes events with ``router`` and produces them through confluent-kafka.

    ``kafka``: where the cluster is (``KafkaSettings``) or a plain confluent-kafka
    config dict; ``producer_config`` overrides :data:`DEFAULT_PRODUCER_CONFIG`.
    ``hot_keys_topic``: when given, a background consumer follows it and keeps
    ``router.splits`` current. ``check_partitions``: look up each target topic's
    partition count on first use and raise RoutingMapError if it disagrees with the
    routing maps. Raises ConfigError for a bad serializer or ID kind.
    """

    def __init__(
        self,
        router: Router,
        kafka: KafkaSettings | Mapping[str, Any],
        *,
        serializer: str = "json",
        id_kind: str = "uuid7",
        snowflake_worker: int = 0,
        producer_config: Mapping[str, Any] | None = None,
        hot_keys_topic: str | None = None,
        check_partitions: bool = True,
        headers: bool = True,
    ) -> None:
        base = kafka.client_config() if isinstance(kafka, KafkaSettings) else dict(kafka)
        self._config = {**DEFAULT_PRODUCER_CONFIG, **base, **(producer_config or {})}
        self.router = router
        self._codec = codec_for(serializer, "event")
        self._content_type = CONTENT_TYPE[serializer]
        self._stamper = _Stamper(id_kind, snowflake_worker)
        self._headers = headers
        self._check_partitions = check_partitions
        self._checked_topics: dict[str, int] = {}
        try:
            self._producer = new_producer(self._config)
        except KafkaException as exc:
            raise ConfigError(f"invalid producer configuration {redact(self._config)}: {exc}") from None
        self._lock = threading.Lock()
        self._sent = 0
        self._delivered = 0
        self._failed = 0
        self._per_partition: dict[tuple[str, int], int] = {}
        self._last_error: str | None = None
        self._follower = None
        if hot_keys_topic:
            from streams.kafka.follower import HotKeyFollower

            self._follower = HotKeyFollower(router, base, hot_keys_topic)
            self._follower.start()

    # -- the per-event path --------------------------------------------------------------

    def send(
        self,
        key: object,
        value: float | None = None,
        *,
        event_id: object = None,
        ts_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> RoutingDecision:
        """Stamp, route, encode and enqueue one event; return where it goes.

        ``event_id`` (a UUID, its text, or a Snowflake int) is kept if given,
        otherwise stamped; ``ts_ms`` overrides the ID's time as the event time.
        Raises InvalidKeyError for a bad key, InvalidIdError for a bad ID,
        RoutingMapError if the topic disagrees with the map, SerializationError if
        the event cannot be encoded. Delivery is asynchronous: see :meth:`flush`.
        """
        canonical = canonical_key(key)
        if value is not None and (value.__class__ is not float or not -_INF < value < _INF):
            value = _finite(value)
        if event_id is None:
            id_text, id_raw, id_ms = self._stamper.stamp()
            id_kind = self._stamper.kind
        else:
            id_text, id_raw, id_ms, id_kind = _given_id(event_id)
        event_ts = id_ms if ts_ms is None else ts_ms
        decision = self.router.route(canonical, event_ts, id_raw)
        topic = decision.topic
        if self._check_partitions and topic not in self._checked_topics:
            self._check_topic(topic)
        payload = self._codec.encode({
            "id": id_text, "id_kind": id_kind, "ts_ms": event_ts, "key": key_text(key, canonical),
            "value": value, "attributes": attributes or {},
        })
        headers = [
            ("streams-id-kind", _KIND_HEADER[id_kind]), ("streams-bucket", decision.bucket_label.encode()),
            ("streams-map-version", b"%d" % decision.map_version), ("streams-salt", b"%d" % decision.salt),
            ("content-type", self._content_type),
        ] if self._headers else None
        self._produce(topic, decision.partition, decision.key, payload, headers, event_ts)
        return decision

    def _produce(self, topic: str, partition: int, key: bytes, payload: bytes,
                 headers: list[tuple[str, bytes]] | None, ts_ms: int) -> None:
        producer = self._producer
        while True:
            try:
                producer.produce(topic, payload, key, partition=partition, headers=headers,
                                 timestamp=ts_ms, on_delivery=self._on_delivery)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: serve delivery reports to drain it
        self._sent += 1
        if not self._sent & 0x3FF:
            producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._delivered += 1
            tp = (msg.topic(), msg.partition())
            self._per_partition[tp] = self._per_partition.get(tp, 0) + 1
        else:
            self._failed += 1
            self._last_error = str(err)

    # -- topic checks, lifecycle ------------------------------------------------------------

    def _check_topic(self, topic: str, *, settle_s: float = 5.0) -> None:
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
                break
            if time.monotonic() >= deadline:
                reason = info.error if info is not None else "no metadata"
                raise RoutingMapError(f"topic {topic!r} does not exist or has no partitions ({reason})")
            time.sleep(0.1)  # metadata polling interval while a new topic propagates
        actual = len(info.partitions)
        expected = self.router.current.partitions
        if actual != expected and actual not in {m.partitions for m in self.router.maps}:
            raise RoutingMapError(
                f"topic {topic!r} has {actual} partitions but routing map v{self.router.current.version} "
                f"expects {expected}, and no installed map covers {actual}"
            )
        self._checked_topics[topic] = actual

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports; returns how many were served."""
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float = 30.0) -> int:
        """Wait up to ``timeout`` s for every record to be delivered or fail; returns how many remain."""
        return int(self._producer.flush(timeout))

    def close(self, timeout: float = 30.0) -> DeliveryStats:
        """Stop following hot keys, flush, and return the final counts.

        Raises DeliveryError if records are still undelivered after ``timeout`` seconds,
        so a caller never mistakes an unfinished send for a finished one.
        """
        if self._follower is not None:
            self._follower.stop()
        remaining = self.flush(timeout)
        stats = self.stats()
        if remaining:
            raise DeliveryError(f"{remaining} records still undelivered after {timeout} s "
                                f"(last error: {stats.last_error})")
        return stats

    def stats(self) -> DeliveryStats:
        """A snapshot of the delivery counters."""
        return DeliveryStats(self._sent, self._delivered, self._failed, dict(self._per_partition), self._last_error)

    @property
    def follower(self) -> Any:
        """The background hot-key follower, or None when not following a topic."""
        return self._follower

    def __enter__(self) -> RoutingProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            if self._follower is not None:
                self._follower.stop()
            self.flush(5)

    def __repr__(self) -> str:
        return f"RoutingProducer(config={redact(self._config)!r}, map_version={self.router.current.version})"


_INF = float("inf")
_KIND_HEADER = {"uuid7": b"uuid7", "snowflake": b"snowflake"}  # encoded once, not per event


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
