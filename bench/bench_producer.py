#!/usr/bin/env python3
"""RoutingProducer throughput against a bare confluent-kafka Producer, same broker, same run.

    .venv/bin/python bench/bench_producer.py [--quick]

Two workloads, 12 partitions, one local broker, rounds alternating between variants
so drift on the shared machine hits every variant alike:

* **recurring keys**: 200,000 events over ``tenant-<pareto>`` keys (a few thousand
  distinct, heavily repeated: the router's memo hits);
* **distinct keys**: 150,000 events, every key a distinct uuid4 string (high
  cardinality: every event canonicalises and hashes its key).

Baseline ("bare"): ``confluent_kafka.Producer`` with ``partitioner=murmur2_random``
that orjson-encodes each event inside the timed loop - the same envelope dict as
ours (id, id_kind, ts_ms, key, value, attributes) - and produces it with its key.
Its IDs are made before the clock starts, so it pays only for encode + produce
while ours also stamps a UUIDv7: the strict comparison, the one the goal is read
against. "bare + uuid4" also makes each ID in the loop (``str(uuid.uuid4())``), as a
team's own code must; its ratio is printed beside. Both warm up (connect, fetch
metadata) before the clock starts, as ours does with its first send.
Ours: the full per-event path, ``send()``: stamp + route + JSON + produce with
headers and an explicit partition.
Every variant flushes at the end and is timed to the last delivery.
Goal: >= 0.8 of bare on both workloads.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
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
GOAL_RATIO = 0.8


def bare_round(bootstrap: str, topic: str, keys: list[str], *, ids_in_loop: bool = False) -> float:
    """Events/s of a bare producer; ``ids_in_loop``: each event's ID is ``str(uuid.uuid4())``, made in the loop."""
    ids = [str(uuid.uuid4()) for _ in keys]  # made before the clock starts, unless ids_in_loop
    new_id = uuid.uuid4
    ts_ms = int(time.time() * 1000)
    p = new_producer({"bootstrap.servers": bootstrap, **DEFAULT_PRODUCER_CONFIG, "partitioner": "murmur2_random"})
    produce, poll, dumps = p.produce, p.poll, orjson.dumps
    produce(topic, b"{}", b"warm-up")  # connect and fetch metadata before the clock starts, as ours does
    assert p.flush(30) == 0
    began = time.perf_counter()
    for i, (k, event_id) in enumerate(zip(keys, ids)):
        if ids_in_loop:
            event_id = str(new_id())
        payload = dumps({"id": event_id, "id_kind": "uuid7", "ts_ms": ts_ms, "key": k, "value": 1.0,
                         "attributes": {}})
        while True:
            try:
                produce(topic, payload, k.encode())
                break
            except BufferError:
                poll(0.05)
        if not i & 0x3FF:
            poll(0)
    assert p.flush(60) == 0
    return len(keys) / (time.perf_counter() - began)


def _producer(bootstrap: str, topic: str, keys: list[str], placement: str, hash_name: str) -> RoutingProducer:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic,
                                                   placement=placement, hash=hash_name)])
    p = RoutingProducer(router, {"bootstrap.servers": bootstrap})
    p.send(keys[0], 1.0)  # the first send looks up the topic's partition count: not per-event cost
    return p


def _finish(p: RoutingProducer, began: float, keys: list[str]) -> float:
    stats = p.close(60)
    elapsed = time.perf_counter() - began
    assert stats.failed == 0 and stats.delivered == len(keys) + 1, stats
    return len(keys) / elapsed


def send_round(bootstrap: str, topic: str, keys: list[str], placement: str, hash_name: str) -> float:
    p = _producer(bootstrap, topic, keys, placement, hash_name)
    send = p.send
    began = time.perf_counter()
    for k in keys:
        send(k, 1.0)
    return _finish(p, began, keys)


Variant = Callable[[str, str, list[str]], float]
STRICT, TYPICAL = "bare confluent-kafka: orjson + produce per event", "bare + str(uuid4()) per event"
VARIANTS: dict[str, Variant] = {
    STRICT: bare_round,
    TYPICAL: lambda b, t, k: bare_round(b, t, k, ids_in_loop=True),
    "RoutingProducer.send mod/murmur2": lambda b, t, k: send_round(b, t, k, "mod", "murmur2"),
    "RoutingProducer.send jump/xxh3": lambda b, t, k: send_round(b, t, k, "jump", "xxh3"),
}


def run_case(bootstrap: str, topic: str, keys: list[str], rounds: int) -> dict[str, float]:
    """Median events/s of every variant over ``rounds`` alternating rounds."""
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(rounds):
        for name, variant in VARIANTS.items():
            results[name].append(variant(bootstrap, topic, keys))
    return {name: statistics.median(rates) for name, rates in results.items()}


def print_case(title: str, medians: dict[str, float]) -> None:
    strict, typical = medians[STRICT], medians[TYPICAL]
    print(f"#### {title}\n")
    print("| producer | events/s | ratio vs bare | ratio vs bare + uuid4 | goal met (vs bare) |")
    print("| --- | ---: | ---: | ---: | :---: |")
    for name, rate in medians.items():
        met = "" if name in (STRICT, TYPICAL) else ("yes" if rate / strict >= GOAL_RATIO else "no")
        print(f"| {name} | {rate:,.0f} | {rate / strict:.2f} | {rate / typical:.2f} | {met} |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 events, 2 rounds")
    args = parser.parse_args()
    recurring_n, distinct_n = (50_000, 50_000) if args.quick else (200_000, 150_000)
    rounds = 2 if args.quick else 4
    rng = random.Random(3)
    recurring = [f"tenant-{int(rng.paretovariate(1.1)) % 100_000}" for _ in range(recurring_n)]
    distinct = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(distinct_n)]
    with ExitStack() as stack:
        bootstrap = broker(stack)
        admin = new_admin({"bootstrap.servers": bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        cases = {
            f"recurring keys ({recurring_n:,} events, {len(set(recurring)):,} distinct keys)":
                run_case(bootstrap, topic, recurring, rounds),
            f"distinct keys ({distinct_n:,} events, every key a new uuid4 string)":
                run_case(bootstrap, topic, distinct, rounds),
        }
    print(f"`python bench/bench_producer.py{' --quick' if args.quick else ''}` - {rounds} alternating rounds, "
          f"{PARTITIONS} partitions, local broker, median of rounds; goal >= {GOAL_RATIO} of bare\n")
    for title, medians in cases.items():
        print_case(title, medians)
    return 0


if __name__ == "__main__":
    sys.exit(main())
