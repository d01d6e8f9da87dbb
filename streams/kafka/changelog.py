"""Read changelog partitions back: the state a worker restores when it is given partitions.

A changelog is a compacted topic of (key, value) changes, a null value deleting the
key. :func:`read_changelog` reads the given partitions from their beginning to the end
they had when the read began (later writes are the reader's own) with a consumer that
joins no group and commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from streams.core.errors import DeliveryError
from streams.kafka.clients import new_consumer

__all__ = ["read_changelog"]

BATCH = 5000
#: Errors a restore waits out (up to its timeout): the cluster is settling, not refusing.
_PASSING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                      KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_COORDINATOR, KafkaError._UNKNOWN_PARTITION})


def read_changelog(client_config: Mapping[str, Any], topic: str, partitions: Iterable[int], *,
                   timeout_s: float = 60.0) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Yield (partition, key, value) for every record of ``partitions`` of ``topic``, in offset order per partition.

    Raises DeliveryError if the end offsets cannot be read, or the partitions are not
    read to their end within ``timeout_s`` (a state restored in part must not be used).
    """
    wanted = sorted(set(partitions))
    if not wanted:
        return
    consumer = new_consumer({**client_config, "group.id": f"{topic}-restore", "enable.auto.commit": False,
                             "enable.partition.eof": False, "auto.offset.reset": "earliest"})
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        for p in wanted:
            low, high = _watermarks(consumer, topic, p, deadline)
            if high > low:
                ends[p] = high
        if not ends:
            return
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        while ends:
            if time.monotonic() > deadline:
                raise DeliveryError(f"changelog {topic} partitions {sorted(ends)} not read to their end "
                                    f"within {timeout_s:.0f} s")
            for msg in consumer.consume(BATCH, 0.5):
                err = msg.error()
                if err is not None:
                    if err.fatal() or not (err.retriable() or err.code() in _PASSING):
                        raise DeliveryError(f"reading changelog {topic}: {err}")
                    continue  # the cluster settling: the deadline bounds the wait
                p, offset = msg.partition(), msg.offset()
                end = ends.get(p)
                if end is None or offset >= end:
                    continue
                yield p, msg.key(), msg.value()
                if offset + 1 >= end:
                    del ends[p]
            # A partition whose last records were compacted away ends before its end offset.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= 0 and tp.offset >= ends.get(tp.partition, 0):
                    ends.pop(tp.partition, None)
    finally:
        consumer.close()


def _watermarks(consumer: Any, topic: str, partition: int, deadline: float) -> tuple[int, int]:
    """``partition``'s low and high watermark, retrying what passes by itself (a leader not known yet
    on a topic just created, a leader moving, a broker restarting) until ``deadline``."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=max(0.1, min(10.0, deadline - time.monotonic())))
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            passing = isinstance(err, KafkaError) and (err.retriable() or err.code() in _PASSING)
            if not passing or time.monotonic() >= deadline:
                raise DeliveryError(f"cannot read the end of changelog {topic}[{partition}]: {exc}") from None
            time.sleep(0.2)  # back off before asking the cluster again
