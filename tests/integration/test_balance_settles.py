"""A steady stream settles on the real broker: two workers, 24 partitions, few changes after the first, exact results."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

from test_hot_keys import paced
from test_worker_buckets import aggregates_by_slot, counts_reached, keys_covering_partitions, wait_for_topic
from worker_harness import TopicReader, Worker, worker_env

from streams.core.aggregate import Stats
from streams.core.fleet import simulate_fleet
from streams.core.hotkeys.decider import BalancePolicy, max_over_mean, noise_z
from streams.core.ids import UUIDv7Generator
from streams.core.routing.router import Router, RoutingMap
from streams.core.simulate import Workload, expected_loads, iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.monitor import Monitor
from streams.kafka.producer import RoutingProducer

PARTITIONS = 24
# Two worker processes. With four (48 partitions, 6,000 events/s) six runs of seven settled at 1.07-1.10, and one
# CI run, on a machine the suite had kept busy, at 1.127: four workers, the broker and the producer fill two cores.
WORKERS = "ab"
# events/s: enough that counting noise lets the decider tell 1.10 from its aim within the run (167 events/s a
# partition; at 2,000 events/s it could not, and the simulation of that rate left up to 1.099 standing)
RATE = 4000
SECONDS = 80.0
WORKLOAD = Workload("zipf", keys=30_000, zipf_exponent=1.1, seed=5)
SETTINGS = dict(partitions=PARTITIONS, bucket_width="1m", grace="0s", allowed_delay="0s", idle_timeout="10s",
                retention="2h", session_timeout_s=6)


def test_a_steady_zipf_stream_settles_over_two_workers_with_exact_aggregates(kafka_bootstrap: str,
                                                                              tmp_path: Path) -> None:
    env, names = worker_env(kafka_bootstrap, **SETTINGS)
    workers = [Worker(dict(env, STREAMS_INSTANCE=name), names, tmp_path / f"worker-{name}.log") for name in WORKERS]
    for worker in workers:
        worker.start()
    try:
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, hot_keys_topic=names.hot_keys)
        assert producer.follower.wait_until_current(30)
        home = Router(TimeBuckets("1m"), [router.current])
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        by_second: dict[int, Counter] = defaultdict(Counter)
        hash_only: Counter = Counter()
        ids = UUIDv7Generator()
        monitor = Monitor({"bootstrap.servers": kafka_bootstrap}, events_topic=names.events,
                          hot_keys_topic=names.hot_keys, group=names.events, timeout_s=20)
        early: int | None = None  # directory records published before the last 30 s
        began = time.monotonic()
        for i, key in enumerate(paced(iter_keys(WORKLOAD), RATE, SECONDS)):
            decision = producer.send(key, float(i % 89), event_id=ids.next())
            oracle[(decision.bucket_label, key)].add(float(i % 89))
            second = int(time.monotonic() - began)
            by_second[second][decision.partition] += 1
            hash_only[home.route(key, 0).partition] += 1
            if early is None and second >= SECONDS - 30:
                early = monitor.snapshot().notices_read
        assert producer.flush(30) == 0
        snapshot = monitor.snapshot()  # every record of the hot-keys topic up to its end now
        total = snapshot.notices_read
        monitor.close()
        # The balance the published directory gives this workload in the long run: free of counting noise.
        published = {notice.key_display: notice.placement for notice in snapshot.hot_keys}
        true = max_over_mean(expected_loads(WORKLOAD, PARTITIONS, router.current.partition_of, published))
        assert early is not None
        last = Counter()
        for second in range(int(SECONDS) - 30, int(SECONDS)):
            last.update(by_second[second])
        settled = max_over_mean([last[p] for p in range(PARTITIONS)])
        unbalanced = max_over_mean([hash_only[p] for p in range(PARTITIONS)])
        predicted = simulate_fleet(WORKLOAD, partitions=PARTITIONS, workers=len(WORKERS), rate=RATE, windows=int(SECONDS // 5))
        print(f"\n[settle] {sum(sum(c.values()) for c in by_second.values()):,} events; directory changes: "
              f"{total} in all, {total - early} in the last 30 s; max/mean over the last 30 s {settled:.3f} "
              f"(hash alone {unbalanced:.3f}); true max/mean of the published directory {true:.3f} "
              f"({len(published)} keys); the simulated fleet predicts true max/mean "
              f"{predicted.windows[-1].true:.3f} and {sum(w.changes for w in predicted.windows)} changes")
        assert unbalanced > 1.5, "the workload must be skewed for this test to mean anything"
        # The decider's promise: no partition stays above the target by more than counting noise explains.
        # Checked with its own rule over the last 30 s: a partition's count less z standard deviations
        # (z of the decider's confidence over 24 partitions, about 3.3; 5,000 events a partition make a
        # sd of 1.4 %) must not be above the target.
        policy = BalancePolicy(partitions=PARTITIONS)
        z = noise_z(PARTITIONS, policy.confidence)
        counts = [last[p] for p in range(PARTITIONS)]
        mean = sum(counts) / PARTITIONS
        beyond_noise = max((c - z * c ** 0.5) / mean for c in counts)
        assert beyond_noise <= policy.balance_target, (beyond_noise, settled)
        assert settled <= 1.20, settled  # and far from the hash alone's skew (4.5) or a half-done plan
        # Issue 27's figure, free of counting noise: the workload's long-run shares under the published
        # directory. Local runs: 1.067-1.100 (the simulation of these settings gives 1.041-1.085 over twelve
        # traffic seeds); the bound leaves room for that spread and a busy CI machine's timing.
        assert true <= 1.15, (true, published)
        # A decider chasing noise changed the directory every window (issue 27 measured 12-19 changes per 30 s
        # on 12 partitions at 800 events/s); a settling one is done within the first minute. Local runs: 0 in
        # the last 30 s; the simulation: at most 1 over twelve seeds; issue 27's goal: at most 3.
        assert total - early <= 3, (early, total)

        closer_ts = int(time.time() * 1000) + 120_000  # close the bucket(s): stage 2 then emits exact aggregates
        for i in range(2):  # two records a partition: watermark_agreement (2) trusts a time two records reached
            for key in keys_covering_partitions(router, closer_ts):
                producer.send(key, 0.0, ts_ms=closer_ts + i)
        assert producer.close().failed == 0
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert aggregates.until(counts_reached(oracle), 180, workers[0]), workers[0].tail()
        got = aggregates_by_slot(aggregates.records)
        for slot, stats in oracle.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max)
        aggregates.close()
    finally:
        for worker in workers:
            worker.stop()
