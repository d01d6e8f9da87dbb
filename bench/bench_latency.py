#!/usr/bin/env python3
"""Detection-to-split latency on the loopback broker: p50 and p95.

    .venv/bin/python bench/bench_latency.py [--quick] [--window SECONDS]

A worker (``faust -A streams.app worker``) and a ``RoutingProducer`` following the
hot-keys topic run against the local broker. A steady background stream (uniform
over 20,000 keys) keeps the window full; then, one after another, a fresh key
bursts to half of the traffic. For each burst we time from its first event to the
first record the producer places off its hash home (``send()`` returns salt >= 0:
moved or split), i.e. the whole loop: worker consumes → sketch and partition counts →
summary (every 250 ms) → decider → notice on the compacted topic → producer's
follower → key directory. Baseline for scale: the
producer→broker→consumer round trip of one record on the same broker, same run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from common import broker, stop  # noqa: E402

from streams.core.config import TopicNames
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import TopicSpec, ensure_topics, project_topic_specs
from streams.kafka.clients import new_consumer, new_producer
from streams.kafka.producer import RoutingProducer

PARTITIONS = 6
RATE = 600


def round_trip_ms(bootstrap: str, topic: str, n: int = 20) -> float:
    ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(topic, 1)], timeout_s=30)
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    producer = new_producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    times = []
    for i in range(n):
        began = time.perf_counter()
        producer.produce(topic, f"rt-{i}".encode(), b"rt")
        producer.flush(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == f"rt-{i}".encode():
                break
        else:
            raise SystemExit("round trip: a record did not come back within 10 s")
        times.append((time.perf_counter() - began) * 1000)
    consumer.close()
    return statistics.median(times)


def bucket_close_lags(bootstrap: str, topic: str) -> list[int]:
    """closed_at - (bucket end + grace), in ms, of every bucket-closed record so far (grace is 0 here)."""
    codec = AvroCodec("bucket_closed")
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": f"bc-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    lags: list[int] = []
    end = time.monotonic() + 5
    while time.monotonic() < end:
        for msg in consumer.consume(100, 0.5):
            if msg.error() is None:
                rec = codec.decode(msg.value())
                lags.append(rec["closed_at_ms"] - rec["bucket_end_ms"])
    consumer.close()
    return lags


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--window", type=float, default=1.0,
                        help="the detector's sliding window in seconds (STREAMS_HOT_WINDOW_S; default 1)")
    args = parser.parse_args()
    bursts = 5 if args.quick else 15
    with ExitStack() as stack:
        bootstrap = broker(stack)
        tag = uuid.uuid4().hex[:6]
        names = TopicNames(**{f: f"lat-{tag}.{f.replace('_', '-')}" for f in TopicNames.__dataclass_fields__})
        client = {"bootstrap.servers": bootstrap}
        ensure_topics(client, project_topic_specs(names, partitions=PARTITIONS), timeout_s=30)
        env = dict(os.environ, STREAMS_BOOTSTRAP_SERVERS=bootstrap, STREAMS_APP_ID=f"lat-{tag}",
                   STREAMS_PARTITIONS=str(PARTITIONS), STREAMS_BUCKET_WIDTH="1m", STREAMS_GRACE="0s", STREAMS_ALLOWED_DELAY="0s",
                   STREAMS_IDLE_TIMEOUT="10s", STREAMS_HOT_WINDOW_S=str(args.window), STREAMS_BALANCE_HOLD_S="2",
                   STREAMS_HOT_MIN_WINDOW_EVENTS="200", STREAMS_SESSION_TIMEOUT_S="6",
                   **{f"STREAMS_{f.upper()}": getattr(names, f) for f in TopicNames.__dataclass_fields__})
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-latency-{tag}.log"
        worker = subprocess.Popen([str(Path(sys.executable).parent / "faust"), "-A", "streams.app", "worker",
                                   "-l", "info", "--without-web"], env=env, stdout=log.open("wb"),
                                  stderr=subprocess.STDOUT)
        stack.callback(stop, worker)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, client, hot_keys_topic=names.hot_keys)
        stack.callback(producer.close)
        producer.follower.wait_until_current(30)
        rng = random.Random(5)
        sent = 0
        began = time.monotonic()

        def send(key: str) -> int:
            nonlocal sent
            ahead = sent / RATE - (time.monotonic() - began)
            if ahead > 0.002:
                time.sleep(ahead)  # pacing the load generator
            sent += 1
            return producer.send(key, 1.0).salt

        while time.monotonic() - began < 20:  # warm-up: the worker joins its group and fills a window
            send(f"bg-{rng.randrange(2_000)}")
        latencies = []
        for b in range(bursts):
            key = f"burst-{b}-{tag}"
            first = time.monotonic()
            split = False
            while time.monotonic() - first < 20:
                if send(key if rng.random() < 0.5 else f"bg-{rng.randrange(2_000)}") >= 0:
                    split = True
                    break
            if split:
                latencies.append((time.monotonic() - first) * 1000)
            print(f"burst {b} ({key}) began {time.strftime('%H:%M:%S', time.localtime(time.time() - (time.monotonic() - first)))}"
                  f": {'split after %.0f ms' % latencies[-1] if split else 'not split in 20 s'}",
                  file=sys.stderr, flush=True)
            calm = time.monotonic()
            while time.monotonic() - calm < 4:  # let the burst cool down before the next one
                send(f"bg-{rng.randrange(2_000)}")
        rt = round_trip_ms(bootstrap, f"lat-{tag}.round-trip")
        close_lags = bucket_close_lags(bootstrap, names.bucket_closed)
    if not latencies:
        print(f"no burst was split; see {log}")
        return 1
    latencies.sort()
    p50 = statistics.median(latencies)
    p95 = latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))]
    flags = (" --quick" if args.quick else "") + (f" --window {args.window:g}" if args.window != 1.0 else "")
    print(f"`python bench/bench_latency.py{flags}` — {len(latencies)}/{bursts} bursts "
          f"split, {PARTITIONS} partitions, {RATE} events/s, {args.window:g} s window, local broker\n")
    print("| measure | ms | ratio to one produce→consume round trip |")
    print("| --- | ---: | ---: |")
    print(f"| produce→consume round trip (baseline) | {rt:.1f} | 1.0 |")
    print(f"| detection-to-split p50 | {p50:.0f} | {p50 / rt:.1f} |")
    print(f"| detection-to-split p95 | {p95:.0f} | {p95 / rt:.1f} |")
    if close_lags:
        print(f"| bucket close lag: closed_at - (end + grace), median of {len(close_lags)} | "
              f"{statistics.median(close_lags):.0f} | {statistics.median(close_lags) / rt:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
