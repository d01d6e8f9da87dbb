"""Replay: put late events back into their buckets, and re-read a time range of events.

:func:`replay_late` reads the late-events topic (all of it, or a bucket or time
range), decodes each late event's original payload, drops repeats of an event (same ID, key, time and value),
folds the rest per (bucket, key) and writes one correction partial per (bucket, key)
into the partials topic in the :data:`~streams.core.partials.LATE_SLOT` slot. Stage 2 merges
it like any partial and emits the corrected aggregate. Because the slot is replaced,
not added to, and it is always computed from *all* late events of that (bucket, key)
that the run read, running replay twice changes nothing: replay is idempotent.
Buckets whose end is more than ``retention_ms`` ago are skipped (stage 2 has dropped
their state) and counted as too old.

:func:`read_time_range` reads a time range of the main events topic (offsets looked
up by timestamp) and returns the exact per-(bucket, key) aggregates of what it read:
the reference a reprocessing job or an audit compares against.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

from streams.core.aggregate import Stats
from streams.core.errors import ConsumeError, DeliveryError, SerializationError
from streams.core.partials import LATE_SLOT, partial_record
from streams.core.serde import CONTENT_TYPE, AvroCodec, JsonCodec, schema_header
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.clients import new_consumer, new_producer

__all__ = ["ReplaySummary", "replay_late", "read_time_range", "read_topic", "event_identity", "read_original"]

Progress = Callable[[int, int], None]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplaySummary:
    """What a replay did: ``read`` late records; ``replayed`` distinct events folded;
    ``duplicates`` repeats of an event (ID, key, time, value) skipped; ``too_old`` beyond retention;
    ``failed`` undecodable; ``corrections`` partials written (one per (bucket, key))."""

    read: int
    replayed: int
    duplicates: int
    too_old: int
    failed: int
    corrections: int
    buckets: tuple[str, ...]


def read_topic(client_config: Mapping[str, Any], topic: str, *, start_ms: int | None = None,
               end_ms: int | None = None, progress: Progress | None = None, timeout_s: float = 30.0) -> list[Any]:
    """Every record of ``topic`` from ``start_ms`` (record timestamp; all if None) to its end now.

    Reads up to the end offsets taken at the start, so it terminates on a live topic.
    Raises TopicNotFoundError if the topic does not exist, ConsumeError if the broker
    refuses a read or the end is not reached in time.
    """
    consumer = new_consumer({**client_config, "group.id": f"streams-replay-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        info = md.topics.get(topic)
        if info is None or info.error is not None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist ({info.error if info else 'no metadata'})")
        parts = sorted(info.partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in parts}
        starts = [TopicPartition(topic, p, start_ms if start_ms is not None else 0) for p in parts]
        if start_ms is not None:
            starts = consumer.offsets_for_times(starts, timeout=timeout_s)
        else:
            starts = [TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                            timeout=timeout_s)[0]) for p in parts]
        todo = {tp.partition: ends[tp.partition] for tp in starts
                if tp.offset != OFFSET_END and 0 <= tp.offset < ends[tp.partition]}
        total = sum(ends[p] - tp.offset for tp in starts for p in [tp.partition] if p in todo)
        consumer.assign([tp for tp in starts if tp.partition in todo])
        out: list[Any] = []
        deadline = time.monotonic() + max(timeout_s, 60.0)
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                if msg.error() is not None:
                    continue
                p = msg.partition()
                if p in todo and msg.offset() < todo[p]:
                    if end_ms is None or msg.timestamp()[1] < end_ms:
                        out.append(msg)
                    if msg.offset() + 1 >= todo[p]:
                        del todo[p]
            if progress:
                progress(len(out), total)
        if todo:
            raise ConsumeError(f"timed out reading {topic!r}: partitions {sorted(todo)} not finished")
        return out
    except KafkaException as exc:
        raise ConsumeError(f"reading {topic!r} failed: {exc}") from None
    finally:
        consumer.close()


def read_original(client_config: Mapping[str, Any], late: Mapping[str, Any], *, timeout_s: float = 30.0) -> bytes:
    """The whole original value of a truncated late event, read at its source and checked against its hash.

    Raises SerializationError (field ``original``) if the source no longer holds it
    (retention) or it does not match the recorded SHA-256.
    """
    where = f"{late['source_topic']}[{late['source_partition']}]@{late['source_offset']}"
    consumer = new_consumer({**client_config, "group.id": f"streams-replay-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(late["source_topic"], late["source_partition"], late["source_offset"])])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            if msg.offset() != late["source_offset"]:
                break  # the offset is gone: retention deleted it, the log moved on
            value = msg.value() or b""
            if hashlib.sha256(value).digest() != late.get("original_sha256"):
                raise SerializationError(f"the record at {where} does not match the late event's SHA-256",
                                         field="original")
            return value
    except KafkaException as exc:
        raise SerializationError(f"cannot read the original at {where}: {exc}", field="original") from None
    finally:
        consumer.close()
    raise SerializationError(f"the original at {where} is no longer in the topic (truncated copy only)",
                             field="original")


def event_identity(event: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two records one event: ID, key, event time and value (a resend repeats all four).

    Two distinct events that share an ID (colliding Snowflake IDs) differ in the rest,
    so replay and the exact oracle count both, as the worker does.
    """
    return event["id"], event["key"], event["ts_ms"], event["value"]


def replay_late(client_config: Mapping[str, Any], late_topic: str, partials_topic: str, buckets: TimeBuckets,
                retention_ms: int, *, from_bucket_ms: int | None = None, to_bucket_ms: int | None = None,
                now_ms: int | None = None, progress: Progress | None = None) -> ReplaySummary:
    """Fold late events into correction partials (see the module docstring); returns the summary.

    ``from_bucket_ms`` / ``to_bucket_ms`` limit the replay to buckets starting in
    ``[from, to)``. Raises what :func:`read_topic` raises, and DeliveryError if writing the corrections fails.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    late_codec = AvroCodec("late_event")
    event_codecs = {CONTENT_TYPE["json"].decode(): JsonCodec("event"), CONTENT_TYPE["avro"].decode(): AvroCodec("event")}
    seen: set[tuple[Any, ...]] = set()
    groups: dict[tuple[int, str], Stats] = {}
    read = duplicates = too_old = failed = 0
    for msg in read_topic(client_config, late_topic, progress=progress):
        read += 1
        try:
            late = late_codec.decode(msg.value())
            codec = event_codecs.get(late["content_type"])
            if codec is None:
                raise SerializationError(f"unknown content type {late['content_type']!r}")
            original = late["original"]
            if late.get("truncated"):  # too large to carry whole: read it where it came from
                original = read_original(client_config, late)
            event = codec.decode(original)
        except SerializationError as exc:
            log.warning("late event at %s[%d]@%d not replayed: %s", late_topic, msg.partition(), msg.offset(), exc)
            failed += 1
            continue
        start = late["bucket_start_ms"]
        if (from_bucket_ms is not None and start < from_bucket_ms) or (to_bucket_ms is not None and start >= to_bucket_ms):
            continue
        identity = event_identity(event)
        if identity in seen:
            duplicates += 1
            continue
        seen.add(identity)
        if start + buckets.width_ms + retention_ms <= now:
            too_old += 1
            continue
        stats = groups.get((start, event["key"]))
        if stats is None:
            stats = groups[(start, event["key"])] = Stats.empty()
        stats.add(event["value"])
    producer = new_producer({**client_config, "enable.idempotence": True, "acks": "all",
                             "allow.auto.create.topics": False})
    codec = AvroCodec("aggregate")
    labels = set()
    failures: list[str] = []
    for (start, key), stats in sorted(groups.items()):
        bucket = buckets.bucket_of(start)
        labels.add(bucket.label)
        producer.produce(partials_topic, codec.encode(partial_record(bucket, key, LATE_SLOT, stats, final=True)),
                         key.encode(), on_delivery=lambda err, _m: failures.append(str(err)) if err else None,
                         headers=[schema_header("aggregate")])
        producer.poll(0)
    if producer.flush(30) or failures:
        raise DeliveryError(f"writing corrections to {partials_topic!r} failed: {failures[:1] or 'flush timed out'}")
    replayed = sum(s.count for s in groups.values())
    return ReplaySummary(read, replayed, duplicates, too_old, failed, len(groups), tuple(sorted(labels)))


def read_time_range(client_config: Mapping[str, Any], events_topic: str, buckets: TimeBuckets, start_ms: int,
                    end_ms: int, *, progress: Progress | None = None) -> dict[tuple[str, str], Stats]:
    """Exact aggregates per (bucket label, key) of the events whose record time is in ``[start_ms, end_ms)``.

    Undecodable records are skipped (they are in the dead letters already).
    """
    codecs = {CONTENT_TYPE["json"]: JsonCodec("event"), CONTENT_TYPE["avro"]: AvroCodec("event")}
    out: dict[tuple[str, str], Stats] = {}
    seen: set[tuple[Any, ...]] = set()
    for msg in read_topic(client_config, events_topic, start_ms=start_ms, end_ms=end_ms, progress=progress):
        headers = dict(msg.headers() or [])
        try:
            event = codecs.get(headers.get("content-type", b""), codecs[CONTENT_TYPE["json"]]).decode(msg.value())
        except SerializationError:
            continue
        identity = event_identity(event)
        if identity in seen or not start_ms <= event["ts_ms"] < end_ms:
            continue
        seen.add(identity)
        slot = (buckets.bucket_of(event["ts_ms"]).label, event["key"])
        out.setdefault(slot, Stats.empty()).add(event["value"])
    return out
