"""Growing the events topic live: two workers, producers following the routing maps, 6 -> 8 partitions."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from test_worker_buckets import aggregates_by_slot, wait_for_topic
from worker_harness import TopicReader, Worker, worker_env

from streams.core.aggregate import Stats
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import topic_partitions
from streams.kafka.maps import read_maps
from streams.kafka.producer import RoutingProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_worker_faults import assert_exact, group_members, send_sentinels, wait_until  # noqa: E402

OLD, NEW = 6, 8
WIDTH_MS, GRACE_MS = 5_000, 3_000
# Real-time stamps: a grace of 3 s leaves room for two workers on two shared cores.
SETTINGS = dict(partitions=OLD, placement="jump", hash="xxh3", bucket_width="5s", grace="3s", allowed_delay="0s",
                idle_timeout="3s", retention="1h", hot_min_window_events=10**9, session_timeout_s=6)
KEYS = 400
# jump moves a key from N to M partitions with probability 1 - N/M (0.25 for 6 -> 8); over 400 keys the
# binomial standard deviation is 2.2 points, so 0.25 +- 0.07 is three of them.
MOVED_TOLERANCE = 0.07


def send_for(producer: RoutingProducer, seconds: float, rng: random.Random, buckets: TimeBuckets,
             oracle: dict[tuple[str, str], Stats], sent: list[tuple[str, int]]) -> None:
    """Real-time events at about 300/s for ``seconds`` of wall-clock time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ts = int(time.time() * 1000)
        for _ in range(3):
            key, value = f"key-{rng.randrange(KEYS)}", float(rng.randrange(-100, 100))
            producer.send(key, value, ts_ms=ts)
            oracle[(buckets.bucket_of(ts).label, key)].add(value)
            sent.append((key, ts))
        producer.poll(0)
        time.sleep(0.01)  # pacing the producer in wall-clock time (the stream is real time)


def test_growing_the_events_topic_from_6_to_8_while_two_workers_run_moves_a_quarter_of_keys_and_stays_exact(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random(5)
    buckets = TimeBuckets("5s", grace="3s")
    client = {"bootstrap.servers": kafka_bootstrap}
    env, names = worker_env(kafka_bootstrap, **SETTINGS)
    group = env["STREAMS_APP_ID"]
    workers = [Worker(dict(env, STREAMS_INSTANCE=name), names, tmp_path / f"worker-{name}.log") for name in "ab"]
    for w in workers:
        w.start()
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    sent: list[tuple[str, int]] = []
    try:
        wait_for_topic(kafka_bootstrap, names.events)
        wait_for_topic(kafka_bootstrap, names.routing_maps)
        wait_until(lambda: group_members(kafka_bootstrap, group) == 2, 90, "both workers in the group")
        v1 = RoutingMap(version=1, partitions=OLD, topic=names.events, placement="jump", hash="xxh3")
        router = Router(buckets, [v1])
        # headers='all': the check below reads each record's map version from its streams-map-version header
        producer = RoutingProducer(router, client, routing_maps_topic=names.routing_maps, headers="all")
        send_for(producer, 6, rng, buckets, oracle, sent)

        grow = subprocess.Popen(
            [str(Path(sys.executable).parent / "streams"), "topics", "grow", "--partitions", str(NEW)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while grow.poll() is None:  # events keep flowing while the topic grows
            send_for(producer, 0.5, rng, buckets, oracle, sent)
        output = grow.stdout.read() if grow.stdout else ""
        assert grow.returncode == 0, output
        assert topic_partitions(client, names.events) == NEW
        assert topic_partitions(client, f"{group}-stage1-changelog") == NEW, "stage 1's changelog grows with it"
        history = read_maps(client, names.routing_maps)
        assert [(m.version, m.partitions) for m in history] == [(1, OLD), (2, NEW)], output
        v2 = history[-1]
        assert v2.first_bucket_ms % WIDTH_MS == 0 and v2.first_bucket_ms >= int(time.time() * 1000) - 2 * WIDTH_MS
        assert producer.map_follower is not None
        wait_until(lambda: len(router.maps) == 2, 30, "the producer installed v2")

        # Until two buckets after the switch, then the sentinels close the last of them.
        while int(time.time() * 1000) < v2.first_bucket_ms + 2 * WIDTH_MS:
            send_for(producer, 0.5, rng, buckets, oracle, sent)
        last_ts = int(time.time() * 1000)
        send_sentinels(producer, router, last_ts + WIDTH_MS + GRACE_MS + 1_000)
        assert producer.close().failed == 0

        # Routing: every record went where the map of its bucket sends its key, and the new partitions got traffic.
        consumer = Consumer({**client, "group.id": f"chk-{rng.random()}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(names.events, p, 0) for p in range(NEW)])
        per_partition: Counter[int] = Counter()
        wrong = 0
        deadline = time.monotonic() + 60
        while sum(per_partition.values()) < len(sent) and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                if msg.error() is not None or not msg.key().startswith(b"key-"):
                    continue
                headers = dict(msg.headers() or [])
                version = int(headers["streams-map-version"])
                expected = (v1 if version == 1 else v2).partition_of(msg.key())
                wrong += msg.partition() != expected
                per_partition[msg.partition()] += 1
        consumer.close()
        assert wrong == 0 and sum(per_partition.values()) == len(sent)
        assert per_partition[6] > 0 and per_partition[7] > 0, per_partition
        moved = sum(v1.partition_of(f"key-{k}") != v2.partition_of(f"key-{k}") for k in range(KEYS)) / KEYS
        assert abs(moved - (1 - OLD / NEW)) <= MOVED_TOLERANCE, moved

        # Exact, including the buckets on both sides of the switch; nothing late, nothing dead.
        closed_by_stream = {slot: s for slot, s in oracle.items()
                            if buckets.parse_label(slot[0]).end_ms <= last_ts - WIDTH_MS}
        switch = buckets.bucket_of(v2.first_bucket_ms).label
        before = buckets.bucket_of(v2.first_bucket_ms - 1).label
        assert {label for label, _ in closed_by_stream} >= {switch, before}
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert_exact(aggregates, closed_by_stream, 120, *workers)
        got = aggregates_by_slot(aggregates.records)
        assert sum(got[slot]["count"] for slot in closed_by_stream) == sum(s.count for s in closed_by_stream.values())
        late = TopicReader(kafka_bootstrap, names.late_events, "late_event")
        dead = TopicReader(kafka_bootstrap, names.dead_letters, "dead_letter")
        late.poll(1.0), dead.poll(0.5)
        assert late.records == [] and dead.records == [], (late.records[:3], dead.records[:3])
        for reader in (aggregates, late, dead):
            reader.close()
    finally:
        for w in workers:
            w.stop()
