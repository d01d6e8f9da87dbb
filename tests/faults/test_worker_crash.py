"""Kill -9 a worker mid-stream and restart it: the final aggregates are still exact.

Part-way through, the producer's directory moves one key whole and splits another
(as a decider's notices would), in the middle of a bucket and before the crash, so
stage 2 must merge each of those keys from every partition that carried it.
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from test_worker_buckets import (  # noqa: E402
    GRACE_MS,
    PARTITIONS,
    SETTINGS,
    WIDTH_MS,
    aggregates_by_slot,
    counts_reached,
    keys_covering_partitions,
    wait_for_topic,
)
from worker_harness import TopicReader, running_worker  # noqa: E402

from streams.core.aggregate import Stats
from streams.core.routing.hashing import canonical_key
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer


def test_killing_and_restarting_a_worker_mid_stream_changes_no_final_aggregate(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    buckets = TimeBuckets("5s", grace="1s")
    t0 = (int(time.time() * 1000) - 900_000) // WIDTH_MS * WIDTH_MS
    times = sorted(t0 + rng.randrange(3 * WIDTH_MS) for _ in range(6000))
    events = [(f"k{rng.randrange(40)}", float(rng.randrange(-500, 500)), ts) for ts in times]
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    for key, value, ts in events:
        oracle[(buckets.bucket_of(ts).label, key)].add(value)

    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        half = len(events) // 2
        for i, (key, value, ts) in enumerate(events[:half]):
            if i == half // 2:  # mid-bucket: k1 moves whole, k2 is split over three partitions, none its home
                home = router.home_of("k1")
                router.directory.set(canonical_key("k1"), ((home + 5) % PARTITIONS,), PARTITIONS)
                others = tuple(p for p in range(PARTITIONS) if p != router.home_of("k2"))
                router.directory.set(canonical_key("k2"), others[:3], PARTITIONS)
            producer.send(key, value, ts_ms=ts)
        assert producer.flush(30) == 0

        # Wait until the worker has folded part of the stream into its changelog, then crash it.
        changelog = TopicReader(kafka_bootstrap, f"{worker.env['STREAMS_APP_ID']}-stage1-changelog", None)
        assert changelog.until(lambda rs: len(rs) >= 40, 60, worker), worker.tail()
        changelog.close()
        worker.kill()

        for key, value, ts in events[half:]:
            producer.send(key, value, ts_ms=ts)
        sentinel_ts = t0 + 3 * WIDTH_MS + GRACE_MS + 1_000
        for key in keys_covering_partitions(router, sentinel_ts):
            producer.send(key, 0.0, ts_ms=sentinel_ts)
        assert producer.close().failed == 0

        worker.start()  # same app id: recovers its tables from the changelog, resumes from committed offsets
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        done = aggregates.until(counts_reached(oracle), 120, worker)
        got = aggregates_by_slot(aggregates.records)
        wrong = {slot: (got.get(slot, {}).get("count"), s.count) for slot, s in oracle.items()
                 if got.get(slot, {}).get("count") != s.count}
        assert done, f"{len(wrong)} slots wrong, (bucket, key): (count, expected) {wrong}:\n{worker.tail()}"
        aggregates.poll(2.0)
        got = aggregates_by_slot(aggregates.records)
        for slot, stats in oracle.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max), slot
        late = TopicReader(kafka_bootstrap, names.late_events, "late_event")
        late.poll(1.0)
        assert late.records == [], "a restart must not turn on-time events into late ones"
        aggregates.close()
        late.close()
