#!/usr/bin/env python3
"""Routing, the pure part: per-call cost, movement on resize, balance under skew.

    .venv/bin/python bench/bench_routing.py [--quick]

1. ns per ``Router.route()`` call for mod/murmur2, jump/xxh3 and a split key, against
   a bare ``confluent_kafka.Producer.produce()`` measured in the same run (no broker:
   ``bootstrap.servers`` is an unused local port, so produce() only enqueues; an
   explicit partition, a large queue, ``poll(0)`` every 1024 calls, purged between
   rounds). Rounds alternate and each row keeps its fastest round, because the
   machines are shared. "warm" keys repeat: 10,000 distinct keys drawn Zipf(1.1),
   as real traffic repeats them; "cold" keys are each seen once, so the router's
   memo never hits and every call canonicalises and hashes (``tenant-<n>`` text and
   uuid4 strings, which canonicalise to their 16 bytes). Goals, as a ratio of one
   produce() call measured in the same run: warm and split keys <= 0.3, cold keys
   <= 0.5.
2. Share of keys that move when a topic grows from N to N+1 partitions, mod vs jump,
   beside the 1/(N+1) a consistent placement can reach.
Balance under skew (the load-aware directory against the hash) is bench/bench_balance.py.
"""

from __future__ import annotations

import argparse
import itertools
import math
import platform
import random
import sys
import time
import uuid
from collections.abc import Callable

import numpy as np
from confluent_kafka import Producer, libversion

from streams.core.routing.hashing import MURMUR2_IMPLEMENTATION
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_producer

T0 = 1_764_000_000_000  # a bucket boundary; every timed call lands in one 5-minute bucket
BUCKETS = TimeBuckets("5m")
PARTITIONS = 12
WARM_GOAL = 0.3  # warm and split keys: a memo hit
COLD_GOAL = 0.5  # cold keys: one canonicalisation + one hash


def timed(loop: Callable[[], int]) -> float:
    """Run ``loop`` (which returns how many calls it made) once; ns per call."""
    start = time.perf_counter_ns()
    calls = loop()
    return (time.perf_counter_ns() - start) / calls


def produce_loop(producer: Producer, keys: list[bytes]) -> Callable[[], int]:
    value = b"x" * 100

    def loop(produce: Callable[..., None] = producer.produce, poll: Callable[[float], int] = producer.poll) -> int:
        for i, key in enumerate(keys):
            produce("bench-routing", value, key, partition=0)
            if not i & 1023:
                poll(0)
        return len(keys)

    return loop


def route_loop(router: Router, keys: list[object], event_ids: list[bytes] | None = None) -> Callable[[], int]:
    route = router.route
    if event_ids is None:
        def loop() -> int:
            for key in keys:
                route(key, T0)
            return len(keys)
    else:
        def loop() -> int:
            for key, event_id in zip(keys, event_ids):
                route(key, T0, event_id)
            return len(keys)
    return loop


def cost_table(quick: bool) -> None:
    calls = 50_000 if quick else 200_000
    rounds = 3 if quick else 7
    rng = random.Random(1)
    warm_keys: list[object] = zipf_keys(10_000, calls, 1.1, seed=1)  # type: ignore[assignment]
    warm_bytes = [k.encode() for k in warm_keys]  # type: ignore[attr-defined]
    event_ids = [rng.randbytes(16) for _ in range(calls)]
    producer = new_producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2_000_000,
                             "queue.buffering.max.kbytes": 2_097_151, "log_level": 0})
    mod = RoutingMap(version=1, partitions=PARTITIONS, topic="events")
    jump = RoutingMap(version=1, partitions=PARTITIONS, topic="events", placement="jump", hash="xxh3")
    split_router = Router(BUCKETS, [mod])
    split_router.directory.set(b"user-0", (0, 3, 6, 9), PARTITIONS)
    fresh = itertools.count()

    def warm(routing_map: RoutingMap) -> Callable[[], int]:
        loop = route_loop(Router(BUCKETS, [routing_map]), warm_keys)
        loop()  # every key seen once; the timed pass routes them again
        return loop

    def cold(routing_map: RoutingMap, uuids: bool = False) -> Callable[[], int]:
        # A new router and never-seen keys each round: every call canonicalises and hashes.
        base = next(fresh) * calls
        keys = ([str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(calls)] if uuids
                else [f"tenant-{base + i}" for i in range(calls)])
        return route_loop(Router(BUCKETS, [routing_map]), keys)  # type: ignore[arg-type]

    # name -> (make the timed loop, goal as a ratio to produce(), or None for the baseline)
    rows: dict[str, tuple[Callable[[], Callable[[], int]], float | None]] = {
        "produce() baseline": (lambda: produce_loop(producer, warm_bytes), None),
        "route() mod/murmur2, warm keys": (lambda: warm(mod), WARM_GOAL),
        "route() jump/xxh3, warm keys": (lambda: warm(jump), WARM_GOAL),
        "route() split key (k=4), a new event ID each call":
            (lambda: route_loop(split_router, ["user-0"] * calls, event_ids), WARM_GOAL),
        "route() mod/murmur2, cold keys": (lambda: cold(mod), COLD_GOAL),
        "route() jump/xxh3, cold keys": (lambda: cold(jump), COLD_GOAL),
        "route() mod/murmur2, cold uuid4-string keys": (lambda: cold(mod, uuids=True), COLD_GOAL),
    }
    best = {name: math.inf for name in rows}
    for _ in range(rounds):
        for name, (make, _goal) in rows.items():
            loop = make()
            best[name] = min(best[name], timed(loop))
            producer.purge()
            producer.poll(0)
    producer.purge()
    producer.flush(0)
    baseline = best["produce() baseline"]
    print(f"### route() cost ({calls:,} calls x {rounds} rounds, fastest round; produce() = "
          f"{baseline:,.0f} ns in this run; goals: warm/split <= {WARM_GOAL}, cold <= {COLD_GOAL} of produce())\n")
    print("| call | ns/call | ratio to produce() | goal | goal met |")
    print("| --- | ---: | ---: | ---: | :---: |")
    for name, ns in best.items():
        goal = rows[name][1]
        ratio = ns / baseline
        met = "" if goal is None else ("yes" if ratio <= goal else "no")
        print(f"| {name} | {ns:,.0f} | {ratio:.2f} | {'' if goal is None else goal} | {met} |")
    print()


def movement_table(quick: bool) -> None:
    count = 20_000 if quick else 100_000
    rng = random.Random(2)
    keys = [rng.randbytes(16) for _ in range(count)]
    print(f"### keys moved when N grows to N+1 ({count:,} random keys)\n")
    print("| N | mod/murmur2 moved | jump/xxh3 moved | goal 1/(N+1) |")
    print("| ---: | ---: | ---: | ---: |")
    for n in (6, 12, 24, 48):
        moved = {}
        for placement, hash_name in (("mod", "murmur2"), ("jump", "xxh3")):
            before = RoutingMap(version=1, partitions=n, topic="t", placement=placement, hash=hash_name)
            after = RoutingMap(version=2, partitions=n + 1, topic="t", placement=placement, hash=hash_name)
            moved[placement] = sum(before.partition_of(k) != after.partition_of(k) for k in keys) / count
        print(f"| {n} | {moved['mod']:.1%} | {moved['jump']:.1%} | {1 / (n + 1):.1%} |")
    print()


def zipf_keys(distinct: int, events: int, exponent: float, seed: int) -> list[str]:
    """``events`` draws from ``distinct`` keys with P(rank r) proportional to r**-exponent."""
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -exponent
    ranks = np.random.default_rng(seed).choice(distinct, size=events, p=weights / weights.sum())
    names = [f"user-{r}" for r in range(distinct)]
    return [names[r] for r in ranks.tolist()]


def main() -> int:
    """Print the two tables; ``--quick`` shrinks every workload (under ~10 s)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads, a few seconds")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"Python {platform.python_version()}, librdkafka {libversion()[0]}, murmur2: {MURMUR2_IMPLEMENTATION}\n")
    cost_table(args.quick)
    movement_table(args.quick)
    print(f"_{time.perf_counter() - started:.1f} s_")
    return 0


if __name__ == "__main__":
    sys.exit(main())
