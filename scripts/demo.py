#!/usr/bin/env python3
"""The README's demo: a real broker, a skewed stream, and what happened to it.

Starts the project's local Kafka broker (or uses ``$KAFKA_BOOTSTRAP``), produces a
Zipf-skewed keyed stream, consumes it back, prints the per-partition picture, and
stops everything it started.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_local import LocalKafka  # noqa: E402

PARTITIONS = 12
EVENTS = 50_000


def main() -> int:
    """Run the demo; return the process exit status."""
    with ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        if not bootstrap:
            broker = stack.enter_context(LocalKafka())
            bootstrap = broker.bootstrap
            print(f"started Kafka {broker.version} at {bootstrap} in {broker.started_in_s:.1f} s")
        topic = f"demo-events-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)

        rng = random.Random(7)
        weights = [1 / (rank ** 1.1) for rank in range(1, 10_001)]
        keys = rng.choices([f"tenant-{i}" for i in range(10_000)], weights=weights, k=EVENTS)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": "murmur2_random"})
        began = time.monotonic()
        for i, key in enumerate(keys):
            producer.produce(topic, key=key.encode(), value=str(i).encode())
            producer.poll(0)
        producer.flush(30)
        print(f"produced {EVENTS:,} events over {len(set(keys)):,} keys in {time.monotonic() - began:.1f} s")

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        per_partition = [0] * PARTITIONS
        deadline = time.monotonic() + 60
        while sum(per_partition) < EVENTS and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    per_partition[msg.partition()] += 1
        consumer.close()
        total = sum(per_partition)
        mean = total / PARTITIONS
        print(f"consumed {total:,} events; per partition: {per_partition}")
        print(f"max/mean partition load with plain murmur2 keys: {max(per_partition) / mean:.2f}")
        return 0 if total == EVENTS else 1


if __name__ == "__main__":
    sys.exit(main())
