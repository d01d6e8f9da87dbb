"""``streams tail`` as a user runs it (a subprocess) against the broker: decoded records, where to start, follow."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from confluent_kafka import Producer

from streams.core.serde import AvroCodec, schema_header

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
