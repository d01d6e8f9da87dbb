"""The load-aware balancer on the real broker: measured live, keys moved and split by every producer, exact results."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

from test_worker_buckets import (
    aggregates_by_slot,
    counts_reached,
    keys_covering_partitions,
    wait_for_topic,
)
from worker_harness import TopicReader, running_worker

from streams.core.aggregate import Stats
from streams.core.hotkeys.decider import max_over_mean
from streams.core.ids import UUIDv7Generator
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.simulate import Workload, iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

PARTITIONS = 12
RATE = 1500  # events/s the producer paces itself to (well within what one faust worker processes)
SETTINGS = dict(partitions=PARTITIONS, bucket_width="1m", grace="0s", allowed_delay="0s", idle_timeout="10s",
                retention="2h", hot_window_s=4.0, session_timeout_s=6, hot_min_window_events=1500)
HEAVY = ["heavy-a", "heavy-b", "heavy-c"]  # planted: each takes 1/24 of the traffic, half a partition's share


def paced(keys, rate: float, seconds: float):  # noqa: ANN001, ANN201 - a tiny generator for the test
    began = time.monotonic()
    sent = 0
    for key in keys:
        elapsed = time.monotonic() - began
        if elapsed >= seconds:
            return
        ahead = sent / rate - elapsed
        if ahead > 0.002:
            time.sleep(ahead)  # pacing the load generator to its target rate (not synchronisation)
        sent += 1
        yield key


def test_zipf_skew_is_balanced_live_by_the_directory_and_aggregated_exactly(kafka_bootstrap: str,
                                                                             tmp_path: Path) -> None:
    keys = iter_keys(Workload("zipf", keys=30_000, zipf_exponent=1.1, seed=3))

    def stream():  # noqa: ANN202 - every 8th event is one of three planted heavy keys
        i = 0
        for key in keys:
            i += 1
            yield HEAVY[(i // 8) % 3] if i % 8 == 0 else key

    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, hot_keys_topic=names.hot_keys)
        assert producer.follower.wait_until_current(30)
        home = Router(TimeBuckets("1m"), [router.current])  # the same map with an empty directory
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        by_second: dict[int, Counter] = defaultdict(Counter)
        hash_only: Counter = Counter()
        first_placed: dict[str, float] = {}  # key -> wall clock of its first event routed off home
        began = time.monotonic()
        ids = UUIDv7Generator()
        sent: list[tuple[str, object]] = []  # (key, event ID) of every event, to replay through the final directory
        for i, key in enumerate(paced(stream(), RATE, 40.0)):
            event_id = ids.next()
            sent.append((key, event_id))
            decision = producer.send(key, float(i % 97), event_id=event_id)
            oracle[(decision.bucket_label, key)].add(float(i % 97))
            second = int(time.monotonic() - began)
            by_second[second][decision.partition] += 1
            if second >= 25:
                hash_only[home.route(key, 0).partition] += 1
            if decision.partition != home.route(key, 0).partition and key not in first_placed:
                first_placed[key] = time.time()
        in_force = router.directory.snapshot()  # the directory the last seconds of traffic were routed by
        assert producer.flush(30) == 0

        notices = TopicReader(kafka_bootstrap, names.hot_keys, "hot_key_notice")
        latest: dict[bytes, dict] = {}

        def settled(records: list) -> bool:
            # The topic's current state, as producers fold it, equals the producer's directory. The
            # decider may still publish a change or two after the traffic stops: wait for it to settle.
            latest.clear()
            for record_key, value in records:
                if value is None:
                    latest.pop(record_key, None)
                else:
                    latest[record_key] = value
            producer.follower.wait_until_current(10)
            have = router.directory.snapshot()
            return {k: tuple(v["placement"]) for k, v in latest.items()} == have

        assert notices.until(settled, 30, worker), (latest, router.directory.snapshot())
        directory = router.directory.snapshot()
        placed = {v["key_display"]: v for v in latest.values()}
        first_notice: dict[str, float] = {}
        for _, value in notices.records:
            if value is not None:
                first_notice.setdefault(value["key_display"], value["detected_at_ms"] / 1000)
        # Printed, not asserted (timings stay out of pass/fail tests; bench/bench_latency.py measures them).
        latencies = sorted(first_placed[k] - t for k, t in first_notice.items() if k in first_placed)
        last = Counter()
        for second in range(25, 40):  # the last 15 s: the directory has long been in force
            last.update(by_second[second])
        balanced = max_over_mean([last[p] for p in range(PARTITIONS)])
        unbalanced = max_over_mean([hash_only[p] for p in range(PARTITIONS)])
        final = Router(TimeBuckets("1m"), [router.current])  # the whole stream through the directory in force
        for key_bytes, parts in in_force.items():
            final.directory.set(key_bytes, parts, PARTITIONS)
        settled = max_over_mean(list(Counter(final.route(k, 0, e).partition for k, e in sent).values()))
        print(f"\n[balance] {sum(len(c) and sum(c.values()) for c in by_second.values()):,} events; "
              f"{len(placed)} keys placed ({sum(len(v['placement']) == 1 for v in placed.values())} moved); "
              f"max/mean over the last 15 s {balanced:.3f}, whole stream through the directory in force at the end "
              f"{settled:.3f} (hash alone {unbalanced:.3f}); "
              f"detection -> first re-placed record: {[round(x, 3) for x in latencies]} s")
        assert unbalanced > 1.3, "the workload must be skewed for this test to mean anything"
        # The goal is 1.10 (met in most runs: 1.03-1.07 live). The bound leaves room for Poisson noise over
        # 15 s and, on a busy CI machine, a lagging worker's late corrections; it still fails any real
        # regression, since the hash alone gives 2.77 here.
        assert balanced <= 1.15, (balanced, placed)
        assert settled <= 1.15, (settled, in_force)  # the directory in force at the end evens the whole stream
        assert placed and all(canonical_key(k) in directory for k in placed)
        for key, notice in placed.items():
            parts = notice["placement"]
            assert len(set(parts)) == len(parts) and all(0 <= p < PARTITIONS for p in parts)
            assert tuple(parts) == directory[canonical_key(key)], "the producer applies what the decider published"
        assert len(placed) <= 0.005 * 30_000, "the directory touches few keys"

        # Stage 2 merges the partials of every partition a key used: close the bucket(s).
        closer_ts = int(time.time() * 1000) + 120_000
        for key in keys_covering_partitions(router, closer_ts):
            producer.send(key, 0.0, ts_ms=closer_ts)
        assert producer.close().failed == 0
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert aggregates.until(counts_reached(oracle), 120, worker), worker.tail()
        got = aggregates_by_slot(aggregates.records)
        for slot, stats in oracle.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max)
        notices.close()
        aggregates.close()
