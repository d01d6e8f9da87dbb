"""What the pipeline looks like right now: hot keys, events-topic rates and the workers' lag.

A :class:`Snapshot` is a frozen picture of

* the hot-keys topic (compacted, one hot-key notice per key): the latest valid
  notice per key, the number of tombstones read and of malformed records met;
* the events topic: each partition's end offset, its message rate since the
  previous snapshot (end-offset delta over elapsed time), and the committed offset
  and lag of the workers' consumer group;
* the routing-maps topic: the routing map in force at the snapshot's time and the
  next scheduled one, from the validated history (:func:`streams.kafka.maps.read_maps`,
  read again only when the topic's end offset moved). A missing or empty topic shows
  neither; it is not an error.

The folding is pure and Kafka-free (:class:`NoticeFold`, :func:`partition_stats`);
:class:`Monitor` is the edge that reads the cluster. It reads the hot-keys topic
like a producer's :class:`~streams.kafka.follower.HotKeyFollower` does (every
partition from the beginning, no group offsets, the notice validated as untrusted
input) but bounded: each snapshot reads up to the end offsets taken when it starts,
continuing where the previous snapshot stopped. Committed offsets come from a plain
``Consumer.committed`` call under the group's id (the consumer never joins the
group); ``AdminClient.list_consumer_group_offsets`` is avoided on purpose, as it
crashed confluent-kafka 2.16.1 for a group that does not exist.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.core.config import TopicNames
from streams.core.errors import (
    ClusterUnavailableError,
    ConsumeError,
    HotKeyNoticeError,
    SerializationError,
    StreamsError,
)
from streams.core.routing.directory import HotKeyNotice, decode_notice, notice_schema
from streams.core.routing.hashing import kafka_partition
from streams.core.routing.maps import in_force_and_next
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.core.time.eventtime import utc_text
from streams.core.topicplan import bucket_of_topic
from streams.core.validate import BUCKET_PLACEHOLDER
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.clients import new_consumer
from streams.kafka.maps import read_maps

__all__ = ["BucketTopicStat", "KeyStat", "Monitor", "NoticeFold", "PartitionStat", "Snapshot", "key_stats",
           "partition_stats", "notice_display"]

_UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._RESOLVE})


# --- pure folding -----------------------------------------------------------------------------


class NoticeFold:
    """The latest valid hot-key notice per key, from the records of a compacted hot-keys topic.

    Feed records in offset order with :meth:`apply`. A notice replaces the key's
    previous one; a tombstone (null value) removes the key. A malformed record (not
    ``hot_key_notice`` Avro, a field out of range, a record key that differs from
    the notice's key, a tombstone without a key) is counted in ``malformed`` and
    otherwise ignored: the key keeps its previous notice, as it does in the
    producers' split tables.
    """

    def __init__(self, home: Callable[[bytes, int], int] = kafka_partition) -> None:
        """``home(key, partitions)`` places a version 1 notice's key (default: Kafka's mod + murmur2)."""
        self.notices: dict[bytes, HotKeyNotice] = {}
        self.records = 0
        self.tombstones = 0
        self.malformed = 0
        self._home = home

    def apply(self, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None = None) -> None:
        """Fold one record (its key, value and headers as consumed); never raises for bad input."""
        self.records += 1
        if value is None:
            if not key:
                self.malformed += 1
                return
            self.tombstones += 1
            self.notices.pop(key, None)
            return
        try:
            notice = decode_notice(value, notice_schema(headers), home=self._home)
        except (SerializationError, HotKeyNoticeError):
            self.malformed += 1
            return
        if key is not None and key != notice.key:
            self.malformed += 1
            return
        self.notices[notice.key] = notice

    def current(self) -> tuple[HotKeyNotice, ...]:
        """The live notices, highest estimated rate first (ties by key)."""
        return tuple(sorted(self.notices.values(), key=lambda n: (-n.estimated_rate, n.key)))


def notice_display(notice: HotKeyNotice) -> str:
    """The text to show for a notice's key: ``key_display``, else the key bytes decoded leniently."""
    return notice.key_display or notice.key.decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class PartitionStat:
    """One events partition: ``end_offset``; ``rate`` messages/s since the previous snapshot
    (None on the first, or if the offset went back); ``committed`` by the group and ``lag``
    = end - committed (both None when the group has committed nothing for it)."""

    partition: int
    end_offset: int
    rate: float | None
    committed: int | None
    lag: int | None


def partition_stats(ends: Mapping[int, int], committed: Mapping[int, int], previous: Mapping[int, int] | None,
                    elapsed_s: float | None) -> tuple[PartitionStat, ...]:
    """Per-partition stats, sorted by partition, from end offsets now and ``elapsed_s`` ago (``previous``).

    ``committed`` maps partitions to the group's committed offsets; a missing or
    negative offset means no commit. Lag is never negative (a commit can briefly run
    ahead of a stale end offset).
    """
    out = []
    for p in sorted(ends):
        end = ends[p]
        before = None if previous is None else previous.get(p)
        rate = None
        if before is not None and elapsed_s and elapsed_s > 0 and end >= before:
            rate = (end - before) / elapsed_s
        done = committed.get(p)
        if done is None or done < 0:
            out.append(PartitionStat(p, end, rate, None, None))
        else:
            out.append(PartitionStat(p, end, rate, done, max(0, end - done)))
    return tuple(out)


class KeyStat(NamedTuple):
    """A placed key as the broker sees it now: its ``notice``, ``rate`` (events/s) and ``share`` (0..1)
    of the events topic's rate since the previous snapshot (both None on the first snapshot).

    ``rate`` is the notice's share applied to the topic's rate now, capped by what its
    partitions (placement and hash home) received: so ``share == rate / total`` always,
    and a key whose partitions got nothing has rate 0 (``idle``).
    """

    notice: HotKeyNotice
    rate: float | None
    share: float | None

    @property
    def idle(self) -> bool:
        """No traffic reached the key's partitions since the previous snapshot."""
        return self.rate == 0.0


def key_stats(notices: Iterable[HotKeyNotice], partitions: Iterable[PartitionStat]) -> tuple[KeyStat, ...]:
    """Each notice's :class:`KeyStat` against the partition rates; highest rate now first.

    A notice's ``estimated_rate`` and ``share`` are what the decider measured when it
    placed the key, from what the worker read then: next to the topic's rate now the
    two disagree as soon as traffic changed or the worker lagged (``22 events/s`` shown
    as ``8 %`` of ``803 events/s``). The share is kept (a fraction, whatever the scale)
    and the rate is derived from the topic's rate now, never shown stale.
    """
    rates = {s.partition: s.rate for s in partitions}
    known = bool(rates) and None not in rates.values()
    total = sum(r for r in rates.values() if r is not None) if known else None
    out = []
    for n in notices:
        if total is None:
            out.append(KeyStat(n, None, None))
            continue
        reach = sum(rates.get(p) or 0.0 for p in {*n.placement, n.home})
        rate = min(n.share * total, reach)
        out.append(KeyStat(n, rate, rate / total if total > 0 else 0.0))
    return tuple(sorted(out, key=lambda k: (-(k.rate or 0.0), -k.notice.estimated_rate, k.notice.key)))


class BucketTopicStat(NamedTuple):
    """One bucket topic of a per-bucket events template: its bucket, size and the group's lag on it.

    ``end_offset`` is summed over its partitions; ``lag`` over the partitions the group
    has committed (None if it has committed none).
    """

    topic: str
    bucket: str
    partitions: int
    end_offset: int
    lag: int | None


@dataclass(frozen=True)
class Snapshot:
    """One look at the hot-keys, events and routing-maps topics; see the module docstring.

    ``*_found`` is False when that topic does not exist (its fields are then empty);
    ``elapsed_s`` is the time the rates cover (None on a monitor's first snapshot);
    ``map_in_force`` is the routing map in force at ``taken_at_ms`` and ``next_map``
    the next one scheduled (None when the routing-maps topic holds none).
    ``bucket_topics``: for a per-bucket events template, the bucket topics that exist,
    oldest bucket first (``partitions`` is then empty and ``events_found`` says
    whether any exists). ``directory_changes_per_min``: hot-keys records (placements
    and tombstones: directory changes) per minute since the previous snapshot (None on
    the first).
    """

    taken_at_ms: int
    hot_keys_topic: str
    hot_keys_found: bool
    hot_keys: tuple[HotKeyNotice, ...]
    notices_read: int
    tombstones: int
    malformed: int
    events_topic: str
    events_found: bool
    group: str
    partitions: tuple[PartitionStat, ...]
    elapsed_s: float | None
    routing_maps_topic: str = ""
    map_in_force: RoutingMap | None = None
    next_map: RoutingMap | None = None
    bucket_topics: tuple[BucketTopicStat, ...] = ()
    directory_changes_per_min: float | None = None

    @property
    def balance(self) -> float | None:
        """max/mean of the events partitions' rates since the previous snapshot (None without one or
        without traffic): what the directory keeps even, as the broker counts it."""
        rates = [s.rate for s in self.partitions]
        if not rates or None in rates:
            return None
        total = sum(r for r in rates if r is not None)
        return max(r for r in rates if r is not None) * len(rates) / total if total > 0 else None

    @property
    def key_stats(self) -> tuple[KeyStat, ...]:
        """The placed keys with their rate and share now (see :func:`key_stats`), idle ones included."""
        return key_stats(self.hot_keys, self.partitions)

    @property
    def total_rate(self) -> float | None:
        """Messages/s into the events topic, over every partition (None without a previous snapshot)."""
        rates = [s.rate for s in self.partitions]
        return None if not rates or None in rates else sum(r for r in rates if r is not None)

    @property
    def total_lag(self) -> int | None:
        """The group's lag summed over the partitions it has committed (None if it has committed none)."""
        lags = [s.lag for s in self.partitions if s.lag is not None]
        return sum(lags) if lags else None

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict (key bytes as hex next to their display text).

        ``hot_keys.keys`` are the placed keys with traffic now (or all of them on a first
        snapshot), ``rate``/``share`` now next to the notice's ``estimated_rate``/
        ``share_at_placement``; ``hot_keys.idle`` the placed keys whose partitions got
        nothing since the previous snapshot (their producers stopped), without rates.
        """
        stats = self.key_stats
        return {
            "taken_at_ms": self.taken_at_ms,
            "hot_keys": {
                "topic": self.hot_keys_topic, "found": self.hot_keys_found, "records": self.notices_read,
                "tombstones": self.tombstones, "malformed": self.malformed,
                "keys": [{"key": notice_display(n), "key_hex": n.key.hex(), "split_factor": n.split_factor,
                          "placement": list(n.placement), "home": n.home, "rate": k.rate, "share": k.share,
                          "estimated_rate": n.estimated_rate, "share_at_placement": n.share,
                          "hot_since_ms": n.hot_since_ms, "detected_at_ms": n.detected_at_ms,
                          "partitions": n.partitions, "map_version": n.map_version, "detector": n.detector}
                         for k in stats if not k.idle for n in (k.notice,)],
                "idle": [{"key": notice_display(k.notice), "key_hex": k.notice.key.hex(),
                          "placement": list(k.notice.placement), "detected_at_ms": k.notice.detected_at_ms}
                         for k in stats if k.idle],
            },
            "events": {
                "topic": self.events_topic, "found": self.events_found, "group": self.group,
                "elapsed_s": self.elapsed_s, "total_rate": self.total_rate, "total_lag": self.total_lag,
                "balance": self.balance, "directory_changes_per_min": self.directory_changes_per_min,
                "partitions": [{"partition": s.partition, "end_offset": s.end_offset, "rate": s.rate,
                                "committed": s.committed, "lag": s.lag} for s in self.partitions],
            },
            "routing_maps": {"topic": self.routing_maps_topic, "in_force": _map_record(self.map_in_force),
                             "next": _map_record(self.next_map)},
            "bucket_topics": [t._asdict() for t in self.bucket_topics],
        }


def _map_record(m: RoutingMap | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {**m.to_record(), "first_bucket_utc": utc_text(m.first_bucket_ms)}



# --- the edge: reading the cluster -----------------------------------------------------------------


class Monitor:
    """Takes snapshots of ``hot_keys_topic``, ``events_topic`` (lag for ``group``) and ``routing_maps_topic``.

    ``client_config`` is a confluent-kafka config. Each call waits at most about
    ``timeout_s`` per request. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, client_config: Mapping[str, Any], *, events_topic: str, hot_keys_topic: str, group: str,
                 routing_maps_topic: str = TopicNames().routing_maps, buckets: TimeBuckets | None = None,
                 timeout_s: float = 10.0) -> None:
        self.events_topic = events_topic
        self.buckets = buckets
        self.routing_maps_topic = routing_maps_topic
        self._client_config = dict(client_config)
        self._maps: tuple[int | None, list[RoutingMap]] = (None, [])  # (end offset read at, the history)
        self.hot_keys_topic = hot_keys_topic
        self.group = group
        self.timeout_s = timeout_s
        self._where = str(client_config.get("bootstrap.servers", "?"))
        base = {**client_config, "enable.auto.commit": False, "allow.auto.create.topics": False}
        self._reader = new_consumer({**base, "group.id": f"streams-monitor-{uuid.uuid4().hex[:12]}",
                                     "auto.offset.reset": "earliest", "enable.partition.eof": True})
        self._group = new_consumer({**base, "group.id": group})
        self._fold = NoticeFold()
        self._positions: dict[int, int] = {}  # hot-keys partition -> next offset to fold
        self._previous: tuple[float, dict[int, int]] | None = None
        self._records_before = 0  # hot-keys records folded by the previous snapshot

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close both consumers (never commits anything)."""
        self._reader.close()
        self._group.close()

    def snapshot(self) -> Snapshot:
        """Read what changed since the previous snapshot and return the new picture.

        Raises ClusterUnavailableError if the cluster cannot be reached within
        ``timeout_s``, ConsumeError if a read fails or a topic cannot be read to its
        end in time.
        """
        try:
            topics = self._reader.list_topics(timeout=self.timeout_s).topics  # all topics: never auto-creates
        except KafkaException as exc:
            raise self._error("cannot reach the Kafka cluster", exc) from None
        taken_at_ms = int(time.time() * 1000)
        hot_parts = _partitions(topics, self.hot_keys_topic)
        event_parts = _partitions(topics, self.events_topic)
        try:
            if hot_parts is not None:
                self._catch_up(hot_parts)
            ends = {p: self._watermarks(self.events_topic, p)[1] for p in event_parts or ()}
            now = time.monotonic()
        except KafkaException as exc:
            raise self._error("reading offsets failed", exc) from None
        committed = self._committed(self.events_topic, event_parts or [])
        in_force, next_map = in_force_and_next(self._history(_partitions(topics, self.routing_maps_topic)),
                                               taken_at_ms)
        previous, elapsed = (None, None) if self._previous is None else (self._previous[1], now - self._previous[0])
        changes = (None if elapsed is None or elapsed <= 0
                   else (self._fold.records - self._records_before) * 60 / elapsed)
        self._previous = (now, ends)
        self._records_before = self._fold.records
        bucket_topics = self._bucket_topics(topics)
        return Snapshot(taken_at_ms, self.hot_keys_topic, hot_parts is not None, self._fold.current(),
                        self._fold.records, self._fold.tombstones, self._fold.malformed,
                        self.events_topic, event_parts is not None or bool(bucket_topics), self.group,
                        partition_stats(ends, committed, previous, elapsed), elapsed,
                        self.routing_maps_topic, in_force, next_map, bucket_topics, changes)

    def _bucket_topics(self, topics: Mapping[str, Any]) -> tuple[BucketTopicStat, ...]:
        """The existing bucket topics of a per-bucket events template (() for a plain topic or without ``buckets``)."""
        if self.buckets is None or BUCKET_PLACEHOLDER not in self.events_topic:
            return ()
        found = sorted((bucket.index, name, bucket.label) for name in topics
                       if (bucket := bucket_of_topic(name, self.events_topic, self.buckets)) is not None)
        out = []
        for _, name, label in found:
            parts = _partitions(topics, name) or []
            try:
                ends = {p: self._watermarks(name, p)[1] for p in parts}
            except KafkaException as exc:
                raise self._error("reading offsets failed", exc) from None
            lags = [max(0, ends[p] - offset) for p, offset in self._committed(name, parts).items()]
            out.append(BucketTopicStat(name, label, len(parts), sum(ends.values()), sum(lags) if lags else None))
        return tuple(out)

    def _history(self, parts: list[int] | None) -> list[RoutingMap]:
        """The routing-map history, read again only when the topic's end offset moved; [] if it is missing."""
        if parts is None:
            self._maps = (None, [])
            return []
        try:
            end = sum(self._watermarks(self.routing_maps_topic, p)[1] for p in parts)
        except KafkaException as exc:
            raise self._error("reading offsets failed", exc) from None
        if end != self._maps[0]:
            try:
                self._maps = (end, read_maps(self._client_config, self.routing_maps_topic, timeout_s=self.timeout_s))
            except TopicNotFoundError:  # deleted since the metadata was read
                self._maps = (None, [])
        return self._maps[1]

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        low, high = self._reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s)
        return int(low), int(high)

    def _catch_up(self, parts: list[int]) -> None:
        """Fold the hot-keys records from where the previous snapshot stopped up to today's end offsets."""
        marks = {p: self._watermarks(self.hot_keys_topic, p) for p in parts}
        if any(self._positions.get(p, 0) > high for p, (_, high) in marks.items()):
            self._fold, self._positions = NoticeFold(), {}  # the topic was re-created: start over
        todo = {}
        for p, (low, high) in marks.items():
            start = max(self._positions.get(p, low), low)
            self._positions[p] = start
            if start < high:
                todo[p] = high
        if not todo:
            return
        self._reader.assign([TopicPartition(self.hot_keys_topic, p, self._positions[p]) for p in sorted(todo)])
        deadline = time.monotonic() + self.timeout_s
        try:
            while todo:
                if time.monotonic() >= deadline:
                    raise ConsumeError(f"timed out reading the hot-keys topic {self.hot_keys_topic!r}: "
                                       f"partitions {sorted(todo)} not read to their end")
                for msg in self._reader.consume(1000, 0.2):
                    p = msg.partition()
                    if p not in todo:
                        continue
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and msg.offset() >= todo[p]:
                            self._positions[p] = todo.pop(p)
                        continue
                    if msg.offset() >= todo[p]:
                        continue  # written after this snapshot started: the next one folds it
                    self._fold.apply(msg.key(), msg.value(), msg.headers())
                    self._positions[p] = msg.offset() + 1
                    if self._positions[p] >= todo[p]:
                        del todo[p]
        finally:
            self._reader.unassign()

    def _committed(self, topic: str, parts: Iterable[int]) -> dict[int, int]:
        """The group's committed offsets on ``topic``; {} when it has none or its coordinator is not available."""
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return {}
        try:
            found = self._group.committed(tps, timeout=self.timeout_s)
        except KafkaException:
            return {}  # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND ...: nothing to show
        return {tp.partition: tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    def _error(self, what: str, exc: KafkaException) -> StreamsError:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        text = err.str() if err is not None else str(exc)
        if err is not None and err.code() in _UNREACHABLE:
            return ClusterUnavailableError(
                f"cannot reach the Kafka cluster at {self._where} within {self.timeout_s:g} s: {text}")
        return ConsumeError(f"{what} at {self._where}: {text}")


def _partitions(topics: Mapping[str, Any], topic: str) -> list[int] | None:
    """The partitions of ``topic`` in a metadata answer, or None if it does not exist."""
    info = topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return sorted(info.partitions)
