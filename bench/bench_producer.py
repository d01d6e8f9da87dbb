#!/usr/bin/env python3
"""RoutingProducer throughput against a bare confluent-kafka Producer, same broker, same run.

    .venv/bin/python bench/bench_producer.py [--quick]

Baseline: ``confluent_kafka.Producer`` with ``partitioner=murmur2_random`` producing
pre-encoded JSON payloads with a key (what a team does today). Ours: the full
per-event path, stamp (UUIDv7) + route + JSON encode + produce with headers and an
explicit partition, counting deliveries. Both flush at the end and are timed to
the last delivery, on the same local broker, alternating rounds. Goal: >= 0.7.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import orjson  # noqa: E402
from common import broker  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_admin, new_producer
from streams.kafka.producer import DEFAULT_PRODUCER_CONFIG, RoutingProducer

PARTITIONS = 12


def bare_round(bootstrap: str, topic: str, keys: list[str]) -> float:
    payloads = [orjson.dumps({"id": str(uuid.uuid4()), "id_kind": "uuid7", "ts_ms": 0, "key": k, "value": 1.0,
                              "attributes": {}}) for k in keys]
    bkeys = [k.encode() for k in keys]
    p = new_producer({"bootstrap.servers": bootstrap, **DEFAULT_PRODUCER_CONFIG, "partitioner": "murmur2_random"})
    produce, poll = p.produce, p.poll
    began = time.perf_counter()
    for i, (k, v) in enumerate(zip(bkeys, payloads)):
        while True:
            try:
                produce(topic, v, k)
                break
            except BufferError:
                poll(0.05)
        if not i & 0x3FF:
            poll(0)
    assert p.flush(60) == 0
    return len(keys) / (time.perf_counter() - began)


def routing_round(bootstrap: str, topic: str, keys: list[str], placement: str, hash_name: str) -> float:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic,
                                                   placement=placement, hash=hash_name)])
    p = RoutingProducer(router, {"bootstrap.servers": bootstrap})
    send = p.send
    p.send(keys[0], 1.0)  # the first send looks up the topic's partition count: not per-event cost
    began = time.perf_counter()
    for k in keys:
        send(k, 1.0)
    stats = p.close(60)
    elapsed = time.perf_counter() - began
    assert stats.failed == 0 and stats.delivered == len(keys) + 1
    return len(keys) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 50_000 if args.quick else 200_000
    rounds = 2 if args.quick else 4
    rng = random.Random(3)
    keys = [f"tenant-{int(rng.paretovariate(1.1)) % 100_000}" for _ in range(n)]
    with ExitStack() as stack:
        bootstrap = broker(stack)
        admin = new_admin({"bootstrap.servers": bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        results: dict[str, list[float]] = {"bare": [], "mod/murmur2": [], "jump/xxh3": []}
        for _ in range(rounds):  # alternate, so drift hits every variant alike
            results["bare"].append(bare_round(bootstrap, topic, keys))
            results["mod/murmur2"].append(routing_round(bootstrap, topic, keys, "mod", "murmur2"))
            results["jump/xxh3"].append(routing_round(bootstrap, topic, keys, "jump", "xxh3"))
    base = statistics.median(results["bare"])
    print(f"`python bench/bench_producer.py{' --quick' if args.quick else ''}` — {n:,} events x {rounds} rounds, "
          f"{PARTITIONS} partitions, local broker, median of rounds\n")
    print("| producer | events/s | ratio vs bare |")
    print("| --- | ---: | ---: |")
    print(f"| bare confluent-kafka, murmur2_random, pre-encoded | {base:,.0f} | 1.00 |")
    for name in ("mod/murmur2", "jump/xxh3"):
        rate = statistics.median(results[name])
        print(f"| RoutingProducer {name}: stamp+route+JSON+produce | {rate:,.0f} | {rate / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
