#!/usr/bin/env python3
"""A steady stream settling live: one worker, 12 partitions, Zipf 1.1 over 1,000 keys, 800 events/s, 3 minutes.

    .venv/bin/python bench/bench_settle_live.py

Issue 27's scenario (before: 97 directory changes in 3 minutes, 65 after the first
minute). Prints the directory records (placements and tombstones) in all, after the
first minute and in the last minute, and max/mean of the partition counts over the
last minute and per 30 s, as the producer routed them, and the true max/mean of the
directory in force at the end (the workload's long-run shares under it: no counting
noise). Default worker settings.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from common import broker  # noqa: E402
from test_hot_keys import paced  # noqa: E402
from test_worker_buckets import wait_for_topic  # noqa: E402
from worker_harness import running_worker  # noqa: E402

from streams.core.hotkeys.decider import max_over_mean  # noqa: E402
from streams.core.routing.router import Router, RoutingMap  # noqa: E402
from streams.core.simulate import Workload, expected_loads, iter_keys  # noqa: E402
from streams.core.time.buckets import TimeBuckets  # noqa: E402
from streams.kafka.monitor import Monitor  # noqa: E402
from streams.kafka.producer import RoutingProducer  # noqa: E402

PARTITIONS, RATE, SECONDS = 12, 800, 180
WORKLOAD = Workload("zipf", keys=1000, zipf_exponent=1.1, seed=0)


def main() -> int:
    with ExitStack() as stack:
        bootstrap = broker(stack)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        worker = stack.enter_context(running_worker(bootstrap, folder, partitions=PARTITIONS, bucket_width="1m",
                                                    grace="0s", session_timeout_s=6))
        names = worker.names
        wait_for_topic(bootstrap, names.events)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": bootstrap}, hot_keys_topic=names.hot_keys)
        stack.callback(producer.close)
        producer.follower.wait_until_current(30)
        monitor = Monitor({"bootstrap.servers": bootstrap}, events_topic=names.events,
                          hot_keys_topic=names.hot_keys, group=names.events, timeout_s=20)
        stack.callback(monitor.close)
        by_second: dict[int, Counter[int]] = defaultdict(Counter)
        records_at: dict[int, int] = {}  # second -> hot-keys records so far
        began = time.monotonic()
        for key in paced(iter_keys(WORKLOAD), RATE, SECONDS):
            second = int(time.monotonic() - began)
            by_second[second][producer.send(key, 1.0).partition] += 1
            for mark in (60, 120):
                if second >= mark and mark not in records_at:
                    records_at[mark] = monitor.snapshot().notices_read
        producer.flush(30)
        snapshot = monitor.snapshot()
        total = snapshot.notices_read
        published = {notice.key_display: notice.placement for notice in snapshot.hot_keys}
        true = max_over_mean(expected_loads(WORKLOAD, PARTITIONS, router.current.partition_of, published))

    def balance(first: int, last: int) -> float:
        counts: Counter[int] = Counter()
        for second in range(first, last):
            counts.update(by_second[second])
        return max_over_mean([counts[p] for p in range(PARTITIONS)])

    print(f"directory records: {total} in all, {total - records_at[60]} after the first minute, "
          f"{total - records_at[120]} in the last minute")
    print(f"max/mean over the last minute: {balance(120, 180):.3f}; true max/mean of the directory in force "
          f"at the end ({len(published)} keys): {true:.3f}")
    print("max/mean per 30 s:", " ".join(f"{balance(s, s + 30):.3f}" for s in range(0, SECONDS, 30)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
