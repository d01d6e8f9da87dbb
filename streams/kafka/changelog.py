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

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from streams.core.errors import DeliveryError
from streams.kafka.clients import new_consumer

__all__ = ["read_changelog"]

BATCH = 5000


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
        for p in wanted:
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=min(10.0, timeout_s))
            except KafkaException as exc:
                raise DeliveryError(f"cannot read the end of changelog {topic}[{p}]: {exc}") from None
            if high > low:
                ends[p] = high
        if not ends:
            return
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise DeliveryError(f"changelog {topic} partitions {sorted(ends)} not read to their end "
                                    f"within {timeout_s:.0f} s")
            for msg in consumer.consume(BATCH, 0.5):
                err = msg.error()
                if err is not None:
                    raise DeliveryError(f"reading changelog {topic}: {err}")
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
