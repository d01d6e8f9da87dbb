"""Topic per bucket, end to end: the worker follows bucket topics as `topics roll` creates them, and roll
deletes an old one only once the worker group has consumed it."""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Producer
from test_worker_buckets import aggregates_by_slot, counts_reached, keys_covering_partitions, wait_for_topic
from worker_harness import TopicReader, running_worker

from streams.core.aggregate import Stats
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.monitor import Monitor
from streams.kafka.admin import group_progress, list_topic_names, roll_bucket_topics
from streams.kafka.producer import RoutingProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_worker_faults import wait_until  # noqa: E402

PARTITIONS = 4
WIDTH_MS = 5_000
GRACE_MS = 1_000
SETTINGS = dict(partitions=PARTITIONS, bucket_width="5s", grace="1s", allowed_delay="0s", idle_timeout="3s",
                retention="1h", hot_min_window_events=10**9, session_timeout_s=6, bucket_topics_refresh_s=0.5)
BUCKETS = 6


def test_a_worker_on_a_bucket_template_subscribes_to_each_new_bucket_topic_and_aggregates_every_bucket_exactly(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    buckets = TimeBuckets("5s", grace="1s")
    client = {"bootstrap.servers": kafka_bootstrap}
    t0 = (int(time.time() * 1000) - 600_000) // WIDTH_MS * WIDTH_MS  # ten minutes ago, bucket-aligned
    with running_worker(kafka_bootstrap, tmp_path, bucket_topics=True, **SETTINGS) as worker:
        names = worker.names
        template = names.events
        assert "{bucket}" in template
        wait_for_topic(kafka_bootstrap, names.partials)
        topics = [template.replace("{bucket}", buckets.bucket_at_index(t0 // WIDTH_MS + i).label)
                  for i in range(BUCKETS + 1)]
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=template)])
        producer = RoutingProducer(router, client)
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        for i in range(BUCKETS):
            # Each bucket's topic appears (with the next one) only now, while the worker runs.
            roll = roll_bucket_topics(client, template, buckets, ahead=1, retention_ms=3_600_000,
                                      partitions=PARTITIONS, now_ms=t0 + i * WIDTH_MS)
            assert set(roll.created) <= set(topics) and topics[i] in list_topic_names(client), roll
            start = t0 + i * WIDTH_MS
            for ts in sorted(start + rng.randrange(WIDTH_MS) for _ in range(300)):
                key, value = f"k{rng.randrange(40)}", float(rng.randrange(-1000, 1000))
                producer.send(key, value, ts_ms=ts)
                oracle[(buckets.bucket_of(ts).label, key)].add(value)
            assert producer.flush(30) == 0
            # The worker consumed the new topic: bucket i-1 closes once bucket i's events arrive.
            if i > 0:
                previous = buckets.bucket_of(start - WIDTH_MS).label
                assert aggregates.until(lambda rs, p=previous: sum(
                    v["count"] for (b, _), v in aggregates_by_slot(rs).items() if b == p) == sum(
                    s.count for (b, _), s in oracle.items() if b == p), 60, worker), (previous, worker.tail())
        sentinel_ts = t0 + BUCKETS * WIDTH_MS + GRACE_MS + 1_000  # closes the last bucket, in the next topic
        for key in keys_covering_partitions(router, sentinel_ts):
            for _ in range(2):  # watermark agreement: two records of a partition must reach a time
                producer.send(key, 0.0, ts_ms=sentinel_ts)
        assert producer.close().failed == 0

        last = buckets.bucket_of(t0 + (BUCKETS - 1) * WIDTH_MS).label
        assert aggregates.until(counts_reached(oracle), 90, worker), worker.tail()
        aggregates.poll(1.0)
        got = aggregates_by_slot(aggregates.records)
        for slot, stats in oracle.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max), slot
        labels = {label for label, _ in oracle}
        assert len(labels) == BUCKETS and last in labels
        assert sum(v["count"] for (b, _), v in got.items() if b in labels) == sum(s.count for s in oracle.values())
        existing = set(list_topic_names(client))
        assert set(topics) <= existing, "every bucket had its own topic"
        aggregates.close()

        # Retention: the first bucket topics go once their buckets are closed, past retention and consumed.
        group = f'{worker.env["STREAMS_APP_ID"]}-events'  # stage 1's group reads the events topics
        old = topics[:2]
        wait_until(lambda: all(p.committed == p.end for progress in group_progress(client, group, old).values()
                               for p in progress), 60, "the worker committed the first bucket topics to their end")
        with Monitor(client, events_topic=template, hot_keys_topic=names.hot_keys, group=group,
                     routing_maps_topic=names.routing_maps, buckets=buckets) as monitor:
            shown = {t.topic: t for t in monitor.snapshot().bucket_topics}
        assert set(topics) <= set(shown), "the monitor lists every bucket topic"
        assert all(shown[t].lag == 0 and shown[t].partitions == PARTITIONS for t in old), [shown[t] for t in old]
        worker.stop()
        raw = Producer(client)  # one more record in the second topic that no one in the group will read
        raw.produce(old[1], b"unconsumed", b"k", partition=0)
        assert raw.flush(10) == 0
        now = t0 + (BUCKETS + 1) * WIDTH_MS
        roll = roll_bucket_topics(client, template, buckets, ahead=0, retention_ms=3 * WIDTH_MS,
                                  partitions=PARTITIONS, group=group, now_ms=now)
        assert old[0] in roll.deleted and old[1] not in roll.deleted, roll
        refusal = {r.topic: r.reasons for r in roll.plan.refused}[old[1]]
        assert any(f"group {group} has not consumed partition 0" in reason for reason in refusal), refusal
        remaining = set(list_topic_names(client))
        assert old[0] not in remaining and old[1] in remaining
