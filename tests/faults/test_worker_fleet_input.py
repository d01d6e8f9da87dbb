"""What a fleet sends that used to lose data (issue 26), through a real worker on the broker.

* Two Snowflake producers forced onto one worker ID mint the same IDs for different
  events: the worker counts every event (dedupe is by identity, not by ID) and
  exports the collisions as a metric.
* Records of 1 MB and 5 MB that the events topic accepted (its ``max.message.bytes``
  raised) are dead-lettered with a bounded copy of the original; a 5 MB late event
  is replayed from its source. The worker keeps running throughout.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import orjson  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_local import free_port  # noqa: E402
from test_worker_buckets import SETTINGS, WIDTH_MS  # noqa: E402
from test_worker_faults import Oracle, assert_exact, send_sentinels  # noqa: E402
from worker_harness import TopicReader, Worker, worker_env  # noqa: E402

from streams.core.aggregate import Stats  # noqa: E402
from streams.core.deadletter import MAX_ORIGINAL_BYTES  # noqa: E402
from streams.core.ids import UUIDv7Generator  # noqa: E402
from streams.core.routing.router import Router, RoutingMap  # noqa: E402
from streams.core.time.buckets import TimeBuckets  # noqa: E402
from streams.kafka.producer import RoutingProducer  # noqa: E402
from streams.kafka.replay import replay_late  # noqa: E402

BIG = 8 * 1024 * 1024



def test_colliding_snowflake_ids_are_all_counted_and_huge_records_are_dead_lettered_without_stopping_the_worker(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    port = free_port()
    # Two producers interleave their records arbitrarily: a minute of allowed delay keeps both on time.
    settings = dict(SETTINGS, idle_timeout="10m", allowed_delay="1m", metrics_port=port)
    env, names = worker_env(kafka_bootstrap, **settings)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topic = NewTopic(names.events, SETTINGS["partitions"], 1, config={"max.message.bytes": str(BIG)})
    admin.create_topics([topic])[names.events].result(30)  # the worker keeps an existing events topic as it is
    worker = Worker(env, names, tmp_path / "worker.log")
    worker.start()
    try:
        buckets = TimeBuckets("5s", grace="1s")
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=names.events)])
        t0 = (int(time.time() * 1000) - 600_000) // WIDTH_MS * WIDTH_MS
        oracle: Oracle = defaultdict(Stats.empty)
        # Two producers with one worker ID (no leases): the same Snowflake IDs, different events.
        twins = [RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, id_kind="snowflake",
                                 snowflake_worker=7, id_leases_topic=None) for _ in range(2)]
        for i in range(2_000):
            for n, producer in enumerate(twins):
                key, ts = f"p{n}-k{i % 50}", t0 + i * 2 * WIDTH_MS // 2_000  # in time order
                producer.send(key, float(i), ts_ms=ts)
                oracle[(buckets.bucket_of(ts).label, key)].add(float(i))
        for producer in twins:
            assert producer.close(30).failed == 0

        # A 1 MB key and a 5 MB payload: refused by validation, dead-lettered in bounded form.
        raw = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": BIG})
        uuids = UUIDv7Generator()
        one_mb = orjson.dumps({"id": str(uuids.next()), "id_kind": "uuid7", "ts_ms": t0, "key": "k" * 1_000_000,
                               "value": 1.0, "attributes": {}})
        five_mb = b"\x00" + bytes(range(256)) * (5 * 1024 * 1024 // 256)
        raw.produce(names.events, one_mb, b"one-mb", partition=0, headers=[("streams-salt", b"-1")])
        raw.produce(names.events, five_mb, b"k" * 100_000, partition=1)
        assert raw.flush(60) == 0
        guard = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        send_sentinels(guard, router, t0 + 2 * WIDTH_MS + 62_000)
        assert guard.close(30).failed == 0

        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert_exact(aggregates, oracle, 150, worker)
        dead = TopicReader(kafka_bootstrap, names.dead_letters, "dead_letter")
        assert dead.until(lambda rs: len(rs) >= 2, 60, worker), worker.tail()
        by_key = {v["original_key_size"]: v for _, v in dead.records}
        one, five = by_key[len(b"one-mb")], by_key[100_000]
        assert (one["field"], one["original_size"], one["truncated"]) == ("key", len(one_mb), True)
        assert len(one["original"]) == MAX_ORIGINAL_BYTES and one_mb.startswith(one["original"])
        assert (five["field"], five["original_size"], five["truncated"]) == ("payload", len(five_mb), True)
        assert (five["source_topic"], five["source_partition"]) == (names.events, 1)

        # A valid 5 MB event whose bucket closed: late, truncated, and replayed from its source.
        late_event = {"id": str(uuids.next()), "id_kind": "uuid7", "ts_ms": t0 + 1, "key": "late-big", "value": 42.0,
                      "attributes": {"blob": "x" * (5 * 1024 * 1024)}}
        raw.produce(names.events, orjson.dumps(late_event), b"late-big", partition=2,
                    headers=[("content-type", b"application/json"), ("streams-salt", b"-1")])
        assert raw.flush(60) == 0
        late = TopicReader(kafka_bootstrap, names.late_events, "late_event")
        assert late.until(lambda rs: len(rs) >= 1, 60, worker), worker.tail()
        (_, record), = late.records
        assert record["truncated"] and record["original_size"] > 5 * 1024 * 1024
        summary = replay_late({"bootstrap.servers": kafka_bootstrap}, names.late_events, names.partials, buckets,
                              3_600_000)
        assert (summary.replayed, summary.failed) == (1, 0)
        label = buckets.bucket_of(t0).label
        assert aggregates.until(lambda rs: any(v["bucket"] == label and v["key"] == "late-big" and v["sum"] == 42.0
                                               for _, v in rs), 60, worker), worker.tail()

        assert worker.alive(), worker.tail()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        collisions = [float(line.split()[-1]) for line in metrics.splitlines()
                      if line.startswith("streams_event_id_collisions ")]
        assert collisions and collisions[0] > 0, "colliding IDs are counted, logged and exported"
        for reader in (aggregates, dead, late):
            reader.close()
    finally:
        worker.stop()
