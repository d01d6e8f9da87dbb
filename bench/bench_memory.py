#!/usr/bin/env python3
"""Memory of one streams worker on a live stream: its RSS every 10 s at a steady event rate.

    .venv/bin/python bench/bench_memory.py [--quick] [--minutes 10] [--rate 3000] [--retention 3m]

One ``faust -A streams.app worker`` process (the settings of bench_worker.py, but a
retention shorter than the run) consumes events stamped now, produced here at
``--rate`` events/s for ``--minutes`` (``--quick``: one minute). The worker's
resident set size is read every 10 s (psutil when installed, else VmRSS from
/proc/<pid>/status). Printed: the RSS after a 30 s warm-up, at the end, the maximum,
and the least-squares slope after the warm-up in MB/min. Stage-1 state holds the
open buckets and stage-2 state the buckets within retention, so after retention
plus a bucket or two the RSS should be flat: a slope that stays positive on a
ten-minute run is growth that retention does not explain. The worker must keep up
for the figure to mean anything; the lag at the end says whether it did.

Ten minutes by default, so ``run_all.py`` runs it only when given ``--memory``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from bench_worker import KEYS, PARTITIONS, committed_total, faust_worker, running, streams_env
from common import broker
from confluent_kafka.admin import NewTopic

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_admin
from streams.kafka.producer import RoutingProducer

SAMPLE_S = 10.0
WARM_UP_S = 30.0


def rss_mb(pid: int) -> float:
    """The resident set size of process ``pid`` in MB (10^6 bytes)."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
        raise RuntimeError(f"no VmRSS in /proc/{pid}/status") from None
    return float(psutil.Process(pid).memory_info().rss) / 1e6


def slope_per_min(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MB) samples, in MB per minute (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / len(samples)
    mean_m = sum(m for _, m in samples) / len(samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    return 60.0 * sum((t - mean_t) * (m - mean_m) for t, m in samples) / spread


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one minute")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=3000.0, help="events per second")
    parser.add_argument("--retention", default="3m", help="the worker's retention (shorter than the run)")
    args = parser.parse_args()
    minutes = 1.0 if args.quick else args.minutes
    samples: list[tuple[float, float]] = []
    with ExitStack() as stack:
        bootstrap = broker(stack)
        group = f"bench-{uuid.uuid4().hex[:6]}-memory"
        topic = f"{group}.events"
        admin = new_admin({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic)])
        producer = RoutingProducer(router, {"bootstrap.servers": bootstrap})
        logs = Path(os.environ.get("TMPDIR", "/tmp"))
        env = streams_env(bootstrap, topic, group, retention=args.retention)
        with running(faust_worker("streams.app"), [env], logs, group) as procs:
            pid = procs[0].pid
            began = time.monotonic()
            sent = 0
            next_sample = 0.0
            while (elapsed := time.monotonic() - began) < minutes * 60:
                due = int(elapsed * args.rate)
                while sent < due:  # events stamped now, in steady steps of ~10 ms
                    producer.send(f"key-{sent % KEYS}", float(sent % 100))
                    sent += 1
                producer.poll(0)
                if elapsed >= next_sample:
                    if procs[0].poll() is not None:
                        raise SystemExit(f"the worker exited: see {logs / group}-0.log")
                    samples.append((elapsed, rss_mb(pid)))
                    next_sample += SAMPLE_S
                time.sleep(0.01)  # pacing the producer, not a synchronisation
            samples.append((time.monotonic() - began, rss_mb(pid)))
            stats = producer.close()
            drain_until = time.monotonic() + 30
            while (done := committed_total(bootstrap, f"{group}-events", topic)) < sent and time.monotonic() < drain_until:
                time.sleep(0.5)  # polling committed offsets until the worker has caught up (or 30 s)
    after = [(t, m) for t, m in samples if t >= WARM_UP_S] or samples[-1:]
    print(f"`python bench/bench_memory.py{' --quick' if args.quick else ''}` — one streams worker, "
          f"{args.rate:,.0f} events/s for {minutes:g} min ({KEYS} keys, {PARTITIONS} partitions, 1-minute buckets, "
          f"retention {args.retention}), RSS every {SAMPLE_S:g} s, local broker, {os.cpu_count()} CPUs\n")
    print(f"| RSS after {WARM_UP_S:g} s | at the end | max | slope after warm-up |")
    print("| ---: | ---: | ---: | ---: |")
    print(f"| {after[0][1]:.1f} MB | {samples[-1][1]:.1f} MB | {max(m for _, m in samples):.1f} MB | "
          f"{slope_per_min(after):+.2f} MB/min |")
    print(f"\nkept up: {done:,} of {sent:,} events committed within 30 s of the last ({sent - done:,} behind); "
          f"{stats.failed} not delivered")
    print("samples (s: MB): " + ", ".join(f"{t:.0f}: {m:.1f}" for t, m in samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
