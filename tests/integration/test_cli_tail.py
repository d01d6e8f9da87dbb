"""``streams tail`` as a user runs it (a subprocess) against the broker: decoded records, where to start, follow."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

import orjson  # noqa: E402
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from test_worker_buckets import SETTINGS, WIDTH_MS
from test_worker_faults import send_sentinels
from worker_harness import running_worker

from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec, schema_header
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

ROOT = Path(__file__).resolve().parents[2]


def aggregate(key: str, count: int) -> dict:
    return {"bucket": "20261202T1100Z", "bucket_start_ms": 1_764_673_200_000, "key": key, "slot": -1,
            "count": count, "measured": count, "sum": float(count), "sum_partials": [float(count)], "min": 1.0,
            "max": 1.0, "final": True}


def tail(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    return subprocess.run([sys.executable, "-m", "streams.cli", "tail", *args], capture_output=True, text=True,
                          timeout=timeout, env={**clean, **(env or {})}, cwd=ROOT)


def lines(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def test_tail_prints_every_aggregate_decoded_and_stops_at_the_end_offsets_it_saw(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("tail-agg", 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    codec = AvroCodec("aggregate")
    for i in range(6):
        producer.produce(topic, codec.encode(aggregate(f"k{i}", i + 1)), f"k{i}".encode(), partition=i % 2,
                         headers=[schema_header("aggregate")])
    assert producer.flush(30) == 0

    records = lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json"))
    assert sorted((r["value"]["key"], r["value"]["count"]) for r in records) == [(f"k{i}", i + 1) for i in range(6)]
    assert {r["schema"] for r in records} == {"aggregate/1"}

    last = lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json", "--offset", "-1"))
    assert sorted(r["value"]["key"] for r in last) == ["k4", "k5"], "the last record of each partition"
    assert len(lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json", "--max", "4"))) == 4
    assert lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json", "--since", "2099-01-01T00:00:00Z")) == []
    assert len(lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json", "--since", "10m"))) == 6

    text = tail(topic, "--bootstrap-server", kafka_bootstrap, "--partition", "0")
    assert text.returncode == 0, text.stderr
    assert len(text.stdout.splitlines()) == 3 and "aggregate/1: bucket=20261202T1100Z" in text.stdout


def test_tail_decodes_a_headerless_dead_letter_by_the_topics_role_and_shows_its_bytes_safely(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("tail-dlq", 1)
    record = {"reason": "invalid JSON payload", "field": "payload", "source_topic": "streams.events",
              "source_partition": 0, "source_offset": 3, "failed_at_ms": 5, "original_key": b"k",
              "original": b"\x1b[2J{not json", "original_size": 13, "original_key_size": 1, "truncated": False,
              "original_sha256": None}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, AvroCodec("dead_letter").encode(record), b"k")
    producer.produce(topic, b"\x1b]0;title\x07 not avro", b"x")
    assert producer.flush(30) == 0
    env = {"STREAMS_DEAD_LETTERS_TOPIC": topic}

    first, second = lines(tail(topic, "--bootstrap-server", kafka_bootstrap, "--json", env=env))
    assert first["schema"] == "dead_letter (by topic)" and first["value"]["reason"] == "invalid JSON payload"
    assert first["value"]["original"]["size"] == 13
    assert second["schema"] == "raw" and second["raw"]["size"] == 19 and "dead_letter" in second["error"]
    text = tail(topic, "--bootstrap-server", kafka_bootstrap, env=env)
    assert text.returncode == 0 and "\x1b" not in text.stdout and "original=<13 bytes: 1b5b324a" in text.stdout


def test_tail_follow_prints_records_written_after_it_started(kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("tail-follow", 1)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    follower = subprocess.Popen([sys.executable, "-m", "streams.cli", "tail", topic, "--bootstrap-server",
                                 kafka_bootstrap, "--follow", "--max", "2", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean, cwd=ROOT)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    codec = AvroCodec("aggregate")
    deadline = time.monotonic() + 30
    i = 0
    while follower.poll() is None and time.monotonic() < deadline:
        producer.produce(topic, codec.encode(aggregate(f"f{i}", 1)), headers=[schema_header("aggregate")])
        producer.flush(10)
        i += 1
        time.sleep(0.5)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert len(out.splitlines()) == 2 and all(orjson.loads(line)["schema"] == "aggregate/1" for line in out.splitlines())


def test_tail_of_a_missing_topic_fails_with_one_line(kafka_bootstrap: str) -> None:
    result = tail("no-such-topic-for-tail", "--bootstrap-server", kafka_bootstrap)
    assert result.returncode == 1 and result.stderr.startswith("streams: error: topic 'no-such-topic-for-tail'")


def test_tail_reads_what_a_running_worker_wrote_aggregates_and_bucket_closed_records_by_their_headers(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        deadline = time.monotonic() + 90
        while names.events not in admin.list_topics(timeout=10).topics:  # the worker creates its topics
            assert time.monotonic() < deadline and worker.alive(), worker.tail()
            time.sleep(0.5)
        buckets = TimeBuckets(SETTINGS["bucket_width"], grace=SETTINGS["grace"])
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        t0 = (int(time.time() * 1000) - 60_000) // WIDTH_MS * WIDTH_MS
        for i in range(60):
            producer.send(f"tenant-{i % 3}", 1.0, ts_ms=t0 + i)
        send_sentinels(producer, router, t0 + 3 * WIDTH_MS)
        assert producer.close(30).failed == 0
        label = buckets.bucket_of(t0).label

        found: dict[str, int] = {}
        deadline = time.monotonic() + 120
        while len(found) < 3 and time.monotonic() < deadline:
            assert worker.alive(), worker.tail()
            for record in lines(tail(names.aggregates, "--bootstrap-server", kafka_bootstrap, "--json")):
                assert record["schema"] == "aggregate/1"
                if record["value"]["bucket"] == label:
                    found[record["value"]["key"]] = record["value"]["count"]
            time.sleep(1)
        assert found == {"tenant-0": 20, "tenant-1": 20, "tenant-2": 20}, worker.tail()
        closed = lines(tail(names.bucket_closed, "--bootstrap-server", kafka_bootstrap, "--json"))
        assert any(r["schema"] == "bucket_closed/1" and r["value"]["bucket"] == label for r in closed)
        text = tail(names.aggregates, "--bootstrap-server", kafka_bootstrap, "--max", "1")
        assert text.returncode == 0 and " aggregate/1: bucket=" in text.stdout and len(text.stdout.splitlines()) == 1
