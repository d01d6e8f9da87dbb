#!/usr/bin/env python3
"""Events per second through the streams worker against a bare faust agent, same topic, same run.

    .venv/bin/python bench/bench_worker.py [--quick]

Both read the same pre-produced events topic from the beginning in their own
consumer group; throughput is events / (time until the group's committed offsets
reach the end of every partition). The baseline (bench/apps/baseline_app.py) only
decodes and counts; the streams worker decodes, validates, feeds the hot-key
sketch, runs the watermark and bucket roller, folds stage-1 state (changelog
writes coalesced per tick), closes ten one-minute buckets and merges their
partials. The bucket-close lag is measured on live data in bench_latency.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from common import broker, stop  # noqa: E402
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_admin, new_consumer
from streams.kafka.producer import RoutingProducer

PARTITIONS = 4
KEYS = 200  # per one-minute bucket: each closes with 200 partials and 200 aggregates
FAUST = str(Path(sys.executable).parent / "faust")


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    # Consumer.committed() asks the group coordinator without joining the group.
    # (AdminClient.list_consumer_group_offsets crashed confluent-kafka 2.16.1 here
    # for a group that did not exist yet.)
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException:  # coordinator not ready yet (the group is new): nothing committed
        return 0
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in result)


def run_worker(bootstrap: str, topic: str, n: int, app: str, env_extra: dict[str, str], log: Path) -> float:
    group = f"bench-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, STREAMS_BOOTSTRAP_SERVERS=bootstrap, STREAMS_APP_ID=group, STREAMS_EVENTS=topic,
               STREAMS_PARTITIONS=str(PARTITIONS), PYTHONPATH=str(ROOT / "bench" / "apps"), **env_extra)
    began = time.monotonic()
    proc = subprocess.Popen([FAUST, "-A", app, "worker", "-l", "warn", "--without-web"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        first = None
        while True:
            done = committed_total(bootstrap, group, topic)
            if first is None and done > 0:
                first = (time.monotonic(), done)
            if done >= n:
                end = time.monotonic()
                break
            if proc.poll() is not None or time.monotonic() - began > 600:
                raise SystemExit(f"{app} did not finish: see {log}")
            time.sleep(0.2)  # polling committed offsets: the measurement's clock, not a synchronisation
        assert first is not None
        # From the first commit on: excludes start-up (imports, group join) from the rate.
        return (n - first[1]) / max(end - first[0], 1e-9)
    finally:
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 20_000 if args.quick else 60_000
    with ExitStack() as stack:
        bootstrap = broker(stack)
        tag = uuid.uuid4().hex[:6]
        topic = f"bench-events-{tag}"
        admin = new_admin({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        buckets = TimeBuckets("1m")
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=topic)])
        producer = RoutingProducer(router, {"bootstrap.servers": bootstrap})
        t0 = (int(time.time() * 1000) - 3_600_000) // 60_000 * 60_000
        for i in range(n):  # an hour ago, spread over ten one-minute buckets, in time order
            producer.send(f"key-{i % KEYS}", float(i % 100), ts_ms=t0 + i * 600_000 // n)
        producer.close()
        logs = Path(os.environ.get("TMPDIR", "/tmp"))
        base = run_worker(bootstrap, topic, n, "baseline_app", {}, logs / f"bench-baseline-{tag}.log")
        names = {f"STREAMS_{k.upper()}": f"bench-{tag}.{k}" for k in
                 ("hot_keys", "sketches", "partials", "aggregates", "bucket_closed", "late_events", "dead_letters")}
        ours = run_worker(bootstrap, topic, n, "streams.app",
                          {**names, "STREAMS_BUCKET_WIDTH": "1m", "STREAMS_GRACE": "5s", "STREAMS_IDLE_TIMEOUT": "5s",
                           "STREAMS_RETENTION": "2h"}, logs / f"bench-worker-{tag}.log")
    print(f"`python bench/bench_worker.py{' --quick' if args.quick else ''}` — {n:,} events, {PARTITIONS} partitions, "
          f"local broker, one worker process\n")
    print("| worker | events/s | ratio |")
    print("| --- | ---: | ---: |")
    print(f"| bare faust agent: decode + count | {base:,.0f} | 1.00 |")
    print(f"| streams worker: validate, sketch, watermark, roller, stage-1 state | {ours:,.0f} | {ours / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
