"""The faust worker on the real broker: buckets close on the watermark, nothing is lost, replay corrects."""

from __future__ import annotations

import random
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka_local import free_port
from worker_harness import TopicReader, running_worker

from streams.core.aggregate import Stats
from streams.core.ids import UUIDv7Generator
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer
from streams.kafka.replay import replay_late

PARTITIONS = 4
WIDTH_MS = 5_000
GRACE_MS = 1_000
SETTINGS = dict(partitions=PARTITIONS, bucket_width="5s", grace="1s", allowed_delay="0s", idle_timeout="3s",
                retention="1h", hot_min_rate=1e9, session_timeout_s=6)



def wait_for_topic(bootstrap: str, topic: str, timeout: float = 60) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if topic in admin.list_topics(timeout=5).topics:
            return
        time.sleep(0.2)  # polling the broker's metadata until the worker has created its topics
    raise AssertionError(f"the worker did not create {topic} within {timeout} s")


def keys_covering_partitions(router: Router, ts: int) -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < router.current.partitions:
        found.setdefault(router.route(f"sentinel-{i}", ts).partition, f"sentinel-{i}")
        i += 1
    return list(found.values())


def aggregates_by_slot(records: list) -> dict[tuple[str, str], dict]:
    latest = {}
    for _, value in records:
        latest[(value["bucket"], value["key"])] = value
    return latest


def counts_reached(expected: Mapping[tuple[str, str], Any]) -> Callable[[list], bool]:
    """A predicate for ``TopicReader.until``: every (bucket, key) slot of ``expected`` has its count.

    The records are folded into slots once per call (folding them once per slot made
    the wait quadratic: minutes of the test's own CPU at 100,000 slots).
    """
    def reached(records: list) -> bool:
        got = aggregates_by_slot(records)
        return all(got.get(slot, {}).get("count") == stats.count for slot, stats in expected.items())
    return reached


def test_events_late_events_and_dead_letters_add_up_and_replay_corrects_exactly_and_idempotently(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random(42)
    buckets = TimeBuckets("5s", grace="1s")
    t0 = (int(time.time() * 1000) - 600_000) // WIDTH_MS * WIDTH_MS  # ten minutes ago, bucket-aligned
    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        n_events = 0
        for ts in sorted(t0 + rng.randrange(3 * WIDTH_MS) for _ in range(1500)):  # three buckets
            key, value = f"k{rng.randrange(50)}", float(rng.randrange(-1000, 1000))
            producer.send(key, value, ts_ms=ts)
            oracle[(buckets.bucket_of(ts).label, key)].add(value)
            n_events += 1
        sentinel_ts = t0 + 3 * WIDTH_MS + GRACE_MS + 1_000  # pushes the watermark past the third bucket's close
        for key in keys_covering_partitions(router, sentinel_ts):
            producer.send(key, 0.0, ts_ms=sentinel_ts)
        assert producer.flush(30) == 0

        closed = TopicReader(kafka_bootstrap, names.bucket_closed, "bucket_closed")
        labels = [buckets.bucket_of(t0 + i * WIDTH_MS).label for i in range(3)]
        assert closed.until(lambda rs: {v["bucket"] for _, v in rs} >= set(labels), 90, worker), worker.tail()
        closed_records = [v for _, v in closed.records]
        assert [v["bucket"] for v in closed_records][:3] == labels, "buckets close in order"
        for record in closed_records:
            assert record["watermark_ms"] >= record["bucket_end_ms"] + GRACE_MS, "never before end + grace"

        # Now the first bucket is closed: these are late, and these are corrupt.
        late_oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        for _ in range(30):
            ts, key, value = t0 + rng.randrange(WIDTH_MS), f"k{rng.randrange(50)}", float(rng.randrange(100))
            producer.send(key, value, ts_ms=ts)
            late_oracle[(labels[0], key)].add(value)
            n_events += 1
        raw = Producer({"bootstrap.servers": kafka_bootstrap})
        corrupt = [b"\x00\xff not json", b'{"id": "x", "key": 1}', b"[]", b"",
                   b'{"id": "not-an-id", "id_kind": "uuid7", "ts_ms": 1, "key": "k"}']
        for i in range(20):
            raw.produce(names.events, corrupt[i % len(corrupt)], b"corrupt", partition=i % PARTITIONS)
            n_events += 1
        # Issue 14, items 1 and 2: a key too long to sketch (it crash-looped the worker), and a late
        # event whose content-type header is null (it was lost): dead-lettered naming the key, and late.
        ids = UUIDv7Generator()
        poison = orjson.dumps({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": t0 + 3 * WIDTH_MS, "key": "p" * 1025,
                               "value": 1.0, "attributes": {}})
        raw.produce(names.events, poison, b"poison", partition=0, headers=[("streams-salt", b"-1")])
        null_type = {"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": t0 + 1, "key": "k-null-type", "value": 7.0,
                     "attributes": {}}
        raw.produce(names.events, orjson.dumps(null_type), b"k-null-type", partition=1,
                    headers=[("content-type", None), ("streams-salt", b"-1")])
        late_oracle[(labels[0], "k-null-type")].add(7.0)
        n_events += 2
        assert raw.flush(10) == 0 and producer.close().failed == 0

        late = TopicReader(kafka_bootstrap, names.late_events, "late_event")
        dead = TopicReader(kafka_bootstrap, names.dead_letters, "dead_letter")
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert late.until(lambda rs: len(rs) >= 31, 60, worker)
        assert dead.until(lambda rs: len(rs) >= 21, 60, worker)
        on_time = {slot: s for slot, s in oracle.items()}
        assert aggregates.until(counts_reached(on_time), 60, worker)
        late.poll(1.0), dead.poll(1.0), aggregates.poll(1.0)

        got = aggregates_by_slot(aggregates.records)
        aggregated = sum(v["count"] for (label, _), v in got.items() if label in labels)
        assert aggregated + len(late.records) + len(dead.records) == n_events, "count conservation"
        for slot, stats in on_time.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max)
        assert all(v["reason"] == "bucket closed" for _, v in late.records)
        assert {v["field"] for _, v in dead.records} >= {"id"} and None not in {v["field"] for _, v in dead.records}
        assert [v["field"] for k, v in dead.records if k == b"poison"] == ["key"]
        assert [v["content_type"] for k, v in late.records if k == b"k-null-type"] == ["application/json"]

        # Replay: the late events go back into their bucket, exactly, and a second run changes nothing.
        expected = {slot: on_time.get(slot, Stats.empty()).merge(s) for slot, s in late_oracle.items()}
        client = {"bootstrap.servers": kafka_bootstrap}
        summary = replay_late(client, names.late_events, names.partials, buckets, 3_600_000)
        assert (summary.replayed, summary.duplicates, summary.failed) == (31, 0, 0)
        assert aggregates.until(counts_reached(expected), 60, worker)
        after_once = aggregates_by_slot(aggregates.records)
        again = replay_late(client, names.late_events, names.partials, buckets, 3_600_000)
        assert again.replayed == 31
        n_before = len(aggregates.records)
        assert aggregates.until(lambda rs: len(rs) >= n_before + again.corrections, 60, worker)
        assert aggregates_by_slot(aggregates.records) == after_once, "replaying twice changes nothing"
        for slot, stats in expected.items():
            assert (after_once[slot]["count"], after_once[slot]["sum"]) == (stats.count, stats.sum)
        for reader in (closed, late, dead, aggregates):
            reader.close()


def test_an_idle_partition_does_not_hold_a_bucket_open_past_the_idle_timeout(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    buckets = TimeBuckets("5s", grace="1s")
    t0 = (int(time.time() * 1000) - 300_000) // WIDTH_MS * WIDTH_MS
    metrics_port = free_port()
    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS, metrics_port=metrics_port) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        keys = keys_covering_partitions(router, t0)
        for key in keys:  # every partition gets one event in the first bucket ...
            producer.send(key, 1.0, ts_ms=t0 + 100)
        busy = keys[0]  # ... and then only one partition keeps going, far past the bucket's close
        for i in range(20):
            producer.send(busy, 1.0, ts_ms=t0 + WIDTH_MS + GRACE_MS + 500 * i)
        assert producer.close().failed == 0
        started = time.monotonic()
        closed = TopicReader(kafka_bootstrap, names.bucket_closed, "bucket_closed")
        label = buckets.bucket_of(t0).label
        assert closed.until(lambda rs: any(v["bucket"] == label for _, v in rs), 60, worker), worker.tail()
        record = next(v for _, v in closed.records if v["bucket"] == label)
        assert record["events"] == PARTITIONS
        # The worker's Prometheus endpoint counts what it consumed and reports its watermark lag.
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in scrape.splitlines()
                   if line and not line.startswith("#")}
        assert samples["streams_worker_events_total"] == PARTITIONS + 20
        assert samples["streams_watermark_lag_seconds"] > 0
        assert samples['streams_worker_outputs_total{role="bucket_closed"}'] >= 1
        # The idle partitions stopped counting after the 3 s idle timeout, not at the end of the test.
        assert time.monotonic() - started < 30
        closed.close()
