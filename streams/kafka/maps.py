"""Routing maps over Kafka: read the history, publish a new version, follow the topic live.

The compacted routing-maps topic (``TopicNames.routing_maps``) holds one record per
map version (see :mod:`streams.core.routing.maps` for the record and the rule a
successor must pass). :func:`read_maps` reads the validated history once;
:func:`publish_map` appends a version after checking it against that history;
:class:`RoutingMapFollower` installs every new version into a live
:class:`~streams.core.routing.router.Router`, which switches to it at its first bucket.

Kafka has no compare-and-set: two publishers racing with the same version both
succeed in writing, and every follower then installs the first record and counts
the second as a ``"version conflict"``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from streams.core.errors import DeliveryError, RoutingMapError, SerializationError
from streams.core.routing.maps import (
    check_successor,
    decode_map,
    encode_map,
    is_installed,
    map_headers,
    map_record_key,
)
from streams.core.routing.router import BUCKET_PLACEHOLDER, Router, RoutingMap
from streams.kafka.clients import new_producer
from streams.kafka.follower import CompactedTopicReader
from streams.kafka.replay import read_topic

__all__ = ["RoutingMapFollower", "publish_map", "read_maps"]

log = logging.getLogger(__name__)


def _decoded(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> RoutingMap:
    """The map in one record; raises what :func:`decode_map` raises, or reason ``"key mismatch"``."""
    candidate = decode_map(value, headers)
    if key is not None and key != map_record_key(candidate):
        raise RoutingMapError(f"routing map record key {key[:40]!r} is not {map_record_key(candidate)!r}",
                              reason="key mismatch")
    return candidate


def _successor(installed: tuple[RoutingMap, ...], candidate: RoutingMap, *, published_ms: int | None,
               partitions_of: Callable[[str], int | None] | None, bucket_width_ms: int) -> RoutingMap | None:
    """``candidate`` if it is a new valid successor, None if it replays an installed map; raises RoutingMapError."""
    if is_installed(installed, candidate):
        return None
    count = None
    if partitions_of is not None and BUCKET_PLACEHOLDER not in candidate.topic:
        count = partitions_of(candidate.topic)
    check_successor(installed, candidate, published_ms=published_ms, topic_partitions=count,
                    bucket_width_ms=bucket_width_ms)
    return candidate


def _timestamp_ms(msg: Message) -> int | None:
    kind, ts = msg.timestamp()
    return None if kind == 0 or ts < 0 else int(ts)  # 0: TIMESTAMP_NOT_AVAILABLE


def read_maps(client_config: Mapping[str, Any], topic: str, *, timeout_s: float = 10.0,
              bucket_width_ms: int | None = None) -> list[RoutingMap]:
    """The validated routing-map history on ``topic``, oldest first.

    Records are checked in offset order as a follower checks them (each against the
    maps accepted before it, published at the record's timestamp); an invalid one
    is skipped and logged as a warning. ``bucket_width_ms``: also refuse first
    buckets that are not a bucket start (None: not checked). Raises
    TopicNotFoundError if the topic does not exist, TopicAdminError if the cluster
    cannot be reached within ``timeout_s``, ConsumeError if the topic cannot be read
    to its end in time.
    """
    maps: list[RoutingMap] = []
    for msg in read_topic(client_config, topic, timeout_s=timeout_s):
        try:
            accepted = _successor(tuple(maps), _decoded(msg.key(), msg.value(), msg.headers()),
                                  published_ms=_timestamp_ms(msg), partitions_of=None,
                                  bucket_width_ms=bucket_width_ms or 1)
        except (RoutingMapError, SerializationError) as exc:
            log.warning("skipped routing map record at %s[%d]@%d: %s", topic, msg.partition(), msg.offset(), exc)
            continue
        if accepted is not None:
            maps.append(accepted)
    return maps


def publish_map(client_config: Mapping[str, Any], topic: str, routing_map: RoutingMap, *,
                events_partitions: int | None = None, bucket_width_ms: int, now_ms: int | None = None,
                timeout_s: float = 10.0) -> None:
    """Append ``routing_map`` to the history on ``topic`` after checking it may follow it.

    Reads the history (:func:`read_maps`), runs
    :func:`~streams.core.routing.maps.check_successor` with ``published_ms`` = ``now_ms``
    (default: the wall clock) and ``topic_partitions`` = ``events_partitions``, then
    produces the record (its timestamp ``now_ms``) with ``acks=all`` and waits for
    the broker's acknowledgement. Publishing a map identical to an installed version
    does nothing. Raises RoutingMapError (``reason`` says why the map was refused),
    DeliveryError if the broker did not acknowledge within ``timeout_s``, and what
    :func:`read_maps` raises.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    history = read_maps(client_config, topic, timeout_s=timeout_s, bucket_width_ms=bucket_width_ms)
    if is_installed(history, routing_map):
        return
    check_successor(history, routing_map, published_ms=now, topic_partitions=events_partitions,
                    bucket_width_ms=bucket_width_ms)
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    producer = new_producer({**client_config, "acks": "all", "enable.idempotence": True,
                             "allow.auto.create.topics": False, "message.timeout.ms": max(1, int(timeout_s * 1000))})
    try:
        producer.produce(topic, encode_map(routing_map), map_record_key(routing_map), timestamp=now,
                         headers=map_headers(), on_delivery=delivered)
    except KafkaException as exc:
        raise DeliveryError(f"cannot publish routing map v{routing_map.version} to {topic!r}: {exc}") from None
    left = producer.flush(timeout_s + 1)
    if failures or left:
        raise DeliveryError(f"routing map v{routing_map.version} was not delivered to {topic!r}: "
                            f"{failures[0] if failures else 'no acknowledgement in time'}")
    log.info("published routing map v%d to %s", routing_map.version, topic)


class RoutingMapFollower(CompactedTopicReader):
    """Installs routing maps from ``topic`` into ``router`` in a daemon thread, as the fleet publishes them.

    Each record is decoded and checked against ``router.maps`` with
    :func:`~streams.core.routing.maps.check_successor`, published at the record's
    timestamp, and against ``events_topic_partitions(map.topic)`` (the events
    topic's partition count now, None when unknown; not asked for templates), then
    installed; the router switches to it at its first bucket. A record identical to
    an installed map (a replay of history) is accepted and changes nothing.

    ``applied`` counts accepted records, ``rejected`` the others, never installed and
    never fatal, and ``rejections`` counts them by reason (``"undecodable"`` for bytes
    that are not the schema's Avro, ``"key mismatch"``, or a
    :data:`~streams.core.routing.maps.REASONS` key). ``topic_maps`` maps each
    version to the first well-formed map of that version read from the topic under
    its own record key, valid successor or not (what a producer compares its configured maps against).
    Start, stop and wait as for :class:`~streams.kafka.follower.CompactedTopicReader`.
    """

    def __init__(self, router: Router, client_config: Mapping[str, Any], topic: str, *,
                 events_topic_partitions: Callable[[str], int | None] | None = None,
                 poll_timeout_s: float = 0.05) -> None:
        super().__init__(client_config, topic, what="routing-maps", poll_timeout_s=poll_timeout_s)
        self.router = router
        self.applied = 0
        self.rejected = 0
        self.rejections: dict[str, int] = {}
        self.topic_maps: dict[int, RoutingMap] = {}
        self._events_topic_partitions = events_topic_partitions

    def _on_record(self, msg: Message) -> None:
        self._handle(msg.key(), msg.value(), msg.headers(), _timestamp_ms(msg))

    def _handle(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None,
                published_ms: int | None) -> None:
        try:
            candidate = _decoded(key, value, headers)
            self.topic_maps.setdefault(candidate.version, candidate)
            accepted = _successor(self.router.maps, candidate, published_ms=published_ms,
                                  partitions_of=self._events_topic_partitions,
                                  bucket_width_ms=self.router.buckets.width_ms)
            if accepted is not None:
                self.router.install(accepted)
                log.info("installed routing map v%d from %s: %d partitions from %d ms on", accepted.version,
                         self.topic, accepted.partitions, accepted.first_bucket_ms)
            self.applied += 1
        except (RoutingMapError, SerializationError) as exc:
            reason = "undecodable" if isinstance(exc, SerializationError) else exc.reason or "invalid map"
            self.rejected += 1
            self.rejections[reason] = self.rejections.get(reason, 0) + 1
            log.warning("rejected routing map record on %s (%s): %s", self.topic, reason, exc)
