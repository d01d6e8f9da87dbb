#!/usr/bin/env python3
"""RoutingProducer per-event cost against a bare producer and a lean reference, same broker, same run.

    .venv/bin/python bench/bench_producer.py [--quick]

Two workloads, 12 partitions, one local broker (``$KAFKA_BOOTSTRAP`` or one started
here), rounds alternating between variants so drift on the shared machine hits every
variant alike:

* **distinct keys**: 150,000 events, every key a distinct uuid4 string (high
  cardinality: the case the goals are read on);
* **recurring keys**: 200,000 events over ``tenant-<pareto>`` keys (a few thousand
  distinct, heavily repeated).

Rows, each timed to the produce loop's end (wall ns per event) and to the last
delivery (after ``flush``: wall events/s, and the process's CPU time per event over
all its threads, librdkafka's included, which the shared machine's other load
disturbs far less than wall time). Goals are printed against both:

* **bare**: ``confluent_kafka.Producer`` with ``partitioner=murmur2_random``, the
  same envelope dict as ours orjson-encoded in the loop, IDs made before the clock;
* **bare + str(uuid4())**: the same, minting each ID in the loop, as a team's own code must;
* **lean reference**: this project's job in plain Python, nothing more: a UUIDv7 from
  uuid-utils, a directory lookup that misses (a dict ``get``), the key handed to
  librdkafka's ``murmur2_random`` partitioner (Kafka's rule, the default placement:
  ``produce()`` with no partition), two headers, orjson;
* **RoutingProducer.send**: the full path, default arguments (returns its
  RoutingDecision); ``send(want_decision=False)``; ``send_many``; and ``send`` under
  ``jump``/``xxh3`` placement.

Then, in the same process: a cold ``Router.route()`` (a fresh router, every key new)
against one ``produce()`` call of the bare producer, ns per call.

Goals (issue 29): send <= 1.3x the lean reference's cost and >= 1.0x the throughput of
bare + str(uuid4()), on distinct keys; cold route() <= 1.0x produce().
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import orjson  # noqa: E402
import uuid_utils  # noqa: E402
from common import broker  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_admin, new_producer
from streams.kafka.producer import DEFAULT_PRODUCER_CONFIG, RoutingProducer

PARTITIONS = 12
LEAN_GOAL = 1.3  # send's cost at most this times the lean reference's
TYPICAL_GOAL = 1.0  # send's throughput at least this times bare + str(uuid4())'s
ROUTE_GOAL = 1.0  # a cold route() at most this times one produce()

# (wall s to the loop's end, wall s to the last delivery, process CPU s to the loop's end, to the last delivery)
Timing = tuple[float, float, float, float]


def _clock() -> tuple[float, float]:
    """(wall, this process's CPU time over all its threads, librdkafka's included)."""
    return time.perf_counter(), time.process_time()


def _bare_producer(bootstrap: str, topic: str) -> Any:
    p = new_producer({"bootstrap.servers": bootstrap, **DEFAULT_PRODUCER_CONFIG, "partitioner": "murmur2_random"})
    p.produce(topic, b"{}", b"warm-up")  # connect and fetch metadata before the clock starts, as ours does
    assert p.flush(30) == 0
    return p


def _done(p: Any, began: tuple[float, float]) -> Timing:
    loop = _clock()
    assert p.flush(60) == 0
    end = _clock()
    return loop[0] - began[0], end[0] - began[0], loop[1] - began[1], end[1] - began[1]


def bare_round(bootstrap: str, topic: str, keys: list[str], *, ids_in_loop: bool = False) -> Timing:
    """A bare producer; ``ids_in_loop``: each event's ID is ``str(uuid.uuid4())``, made in the loop."""
    ids = [str(uuid.uuid4()) for _ in keys]  # made before the clock starts, unless ids_in_loop
    new_id = uuid.uuid4
    ts_ms = int(time.time() * 1000)
    p = _bare_producer(bootstrap, topic)
    produce, poll, dumps = p.produce, p.poll, orjson.dumps
    began = _clock()
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
    return _done(p, began)


def lean_round(bootstrap: str, topic: str, keys: list[str]) -> Timing:
    """This project's job in plain Python, nothing more (see the module docstring)."""
    directory: dict[bytes, tuple[int, ...]] = {b"some-hot-key": (1, 2)}  # every lookup below misses
    lookup = directory.get
    headers = [("content-type", b"application/json"), ("streams-salt", b"-1")]
    p = _bare_producer(bootstrap, topic)
    produce, poll, dumps, uuid7 = p.produce, p.poll, orjson.dumps, uuid_utils.uuid7
    began = _clock()
    for i, k in enumerate(keys):
        u = uuid7()
        ts_ms = u.timestamp
        kb = k.encode()
        if lookup(kb) is not None:
            raise AssertionError("the lean reference's directory never places a key")
        payload = dumps({"id": str(u), "id_kind": "uuid7", "ts_ms": ts_ms, "key": k, "value": 1.0,
                         "attributes": {}})
        while True:
            try:
                produce(topic, payload, kb, timestamp=ts_ms, headers=headers)
                break
            except BufferError:
                poll(0.05)
        if not i & 0x3FF:
            poll(0)
    return _done(p, began)


def _producer(bootstrap: str, topic: str, keys: list[str], placement: str, hash_name: str) -> RoutingProducer:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic,
                                                   placement=placement, hash=hash_name)])
    p = RoutingProducer(router, {"bootstrap.servers": bootstrap})
    p.send(keys[0], 1.0)  # the first send looks up the topic's partition count: not per-event cost
    return p


def _finish(p: RoutingProducer, began: tuple[float, float], keys: list[str]) -> Timing:
    loop = _clock()
    stats = p.close(60)
    end = _clock()
    assert stats.failed == 0 and stats.delivered == len(keys) + 1, stats
    return loop[0] - began[0], end[0] - began[0], loop[1] - began[1], end[1] - began[1]


def send_round(bootstrap: str, topic: str, keys: list[str], placement: str = "mod", hash_name: str = "murmur2",
               *, want_decision: bool = True) -> Timing:
    p = _producer(bootstrap, topic, keys, placement, hash_name)
    send = p.send
    began = _clock()
    if want_decision:
        for k in keys:
            send(k, 1.0)
    else:
        for k in keys:
            send(k, 1.0, want_decision=False)
    return _finish(p, began, keys)


def send_many_round(bootstrap: str, topic: str, keys: list[str]) -> Timing:
    p = _producer(bootstrap, topic, keys, "mod", "murmur2")
    events = [(k, 1.0) for k in keys]  # the caller's batch, built before the clock as it arrives
    began = _clock()
    p.send_many(events)
    return _finish(p, began, keys)


Variant = Callable[[str, str, list[str]], Timing]
STRICT, TYPICAL, LEAN = "bare: orjson + produce", "bare + str(uuid4())", "lean reference"
SEND = "RoutingProducer.send mod/murmur2"
VARIANTS: dict[str, Variant] = {
    STRICT: bare_round,
    TYPICAL: lambda b, t, k: bare_round(b, t, k, ids_in_loop=True),
    LEAN: lean_round,
    SEND: send_round,
    "send(want_decision=False)": lambda b, t, k: send_round(b, t, k, want_decision=False),
    "send_many": send_many_round,
    "RoutingProducer.send jump/xxh3": lambda b, t, k: send_round(b, t, k, "jump", "xxh3"),
}


def run_case(bootstrap: str, topic: str, keys: list[str], rounds: int) -> dict[str, Timing]:
    """Median of each timing of every variant over ``rounds`` alternating rounds."""
    results: dict[str, list[Timing]] = {name: [] for name in VARIANTS}
    for _ in range(rounds):
        for name, variant in VARIANTS.items():
            results[name].append(variant(bootstrap, topic, keys))
    return {name: tuple(statistics.median(t[i] for t in ts) for i in range(4))  # type: ignore[misc]
            for name, ts in results.items()}


def cold_route_vs_produce(bootstrap: str, topic: str, keys: list[str],
                          rounds: int) -> tuple[float, float, float]:
    """Median ns per call of a cold ``Router.route`` (fresh router, every key new), of one isolated
    ``produce()``, and of one ``produce()`` in a steady loop of all keys (no flush between calls).

    route and isolated produce alternate in chunks of 5,000 calls, so both see the same
    machine; the producer is flushed (untimed) after each chunk, so its background
    threads do not run during route's chunks. The steady loop is how a producer really
    runs: librdkafka's threads compete with the caller for the queue and the CPUs. All
    are timed in the calling thread's CPU time
    (``time.thread_time``): produce() is charged its call alone, as route() is, and
    neither is charged for time the shared machine gave to other processes.
    """
    route_ns, produce_ns, steady_ns = [], [], []
    ts_ms = int(time.time() * 1000)
    payload = orjson.dumps({"id": str(uuid.uuid4()), "id_kind": "uuid7", "ts_ms": ts_ms, "key": keys[0],
                            "value": 1.0, "attributes": {}})
    encoded = [k.encode() for k in keys]
    chunk = 5_000
    for _ in range(rounds):
        route = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic)]).route
        p = _bare_producer(bootstrap, topic)
        produce = p.produce
        routing = producing = 0.0
        for at in range(0, len(keys), chunk):
            began = time.thread_time()
            for k in keys[at:at + chunk]:
                route(k, ts_ms)
            routing += time.thread_time() - began
            began = time.thread_time()
            for kb in encoded[at:at + chunk]:
                produce(topic, payload, kb)
            producing += time.thread_time() - began
            assert p.flush(60) == 0  # untimed: librdkafka's threads are done before route's next chunk
        began = time.thread_time()
        for kb in encoded:  # the steady loop: every call after the first queues behind the ones before
            produce(topic, payload, kb)
        steady_ns.append((time.thread_time() - began) / len(keys) * 1e9)
        assert p.flush(60) == 0
        route_ns.append(routing / len(keys) * 1e9)
        produce_ns.append(producing / len(keys) * 1e9)
    return statistics.median(route_ns), statistics.median(produce_ns), statistics.median(steady_ns)


def print_case(title: str, n: int, timings: dict[str, Timing]) -> None:
    lean, typical, strict, send = timings[LEAN], timings[TYPICAL], timings[STRICT], timings[SEND]
    print(f"#### {title}\n")
    print("| producer | loop ns/event (wall) | events/s to last delivery (wall) | CPU ns/event to last delivery "
          "| cost vs lean (wall) | cost vs lean (CPU) | throughput vs bare + uuid4 (wall) | vs bare + uuid4 (CPU) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, (loop, total, _, cpu) in timings.items():
        print(f"| {name} | {loop / n * 1e9:,.0f} | {n / total:,.0f} | {cpu / n * 1e9:,.0f} | {total / lean[1]:.2f} | "
              f"{cpu / lean[3]:.2f} | {typical[1] / total:.2f} | {typical[3] / cpu:.2f} |")
    print()
    for measure, i in (("wall, to the last delivery", 1), ("process CPU, to the last delivery", 3)):
        vs_lean, vs_typical, vs_strict = send[i] / lean[i], typical[i] / send[i], strict[i] / send[i]
        print(f"- {measure}: send costs {vs_lean:.2f}x the lean reference (goal <= {LEAN_GOAL}: "
              f"{'met' if vs_lean <= LEAN_GOAL else 'missed'}); {vs_typical:.2f}x the throughput of bare + "
              f"str(uuid4()) (goal >= {TYPICAL_GOAL}: {'met' if vs_typical >= TYPICAL_GOAL else 'missed'}); "
              f"{vs_strict:.2f}x that of bare")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 events, 2 rounds")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5; --quick: 2)")
    args = parser.parse_args()
    recurring_n, distinct_n = (50_000, 50_000) if args.quick else (200_000, 150_000)
    rounds = 2 if args.quick else args.rounds
    rng = random.Random(3)
    recurring = [f"tenant-{int(rng.paretovariate(1.1)) % 100_000}" for _ in range(recurring_n)]
    distinct = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(distinct_n)]
    with ExitStack() as stack:
        bootstrap = broker(stack)
        admin = new_admin({"bootstrap.servers": bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        cases = {
            f"distinct keys ({distinct_n:,} events, every key a new uuid4 string)":
                (distinct_n, run_case(bootstrap, topic, distinct, rounds)),
            f"recurring keys ({recurring_n:,} events, {len(set(recurring)):,} distinct keys)":
                (recurring_n, run_case(bootstrap, topic, recurring, rounds)),
        }
        route_ns, produce_ns, steady_ns = cold_route_vs_produce(bootstrap, topic, distinct, rounds)
    load = os.getloadavg()
    print(f"`python bench/bench_producer.py{' --quick' if args.quick else ''}` - {rounds} alternating rounds, "
          f"{PARTITIONS} partitions, local broker, median of rounds; load average {load[0]:.1f} / {load[1]:.1f} "
          f"on {os.cpu_count()} CPUs\n")
    for title, (n, timings) in cases.items():
        print_case(title, n, timings)
    for name, ns in (("isolated (flushed every 5,000)", produce_ns), ("in a steady loop", steady_ns)):
        ratio = route_ns / ns
        print(f"cold route(): {route_ns:,.0f} ns per call; produce() {name}: {ns:,.0f} ns per call; "
              f"{ratio:.2f}x; goal <= {ROUTE_GOAL}: {'met' if ratio <= ROUTE_GOAL else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
