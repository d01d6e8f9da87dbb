"""``streams monitor``, ``streams replay`` and ``streams worker`` as a user runs them (subprocesses)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from test_cli_broker import (
    delete_if_there,
    ok_json,
    one_error_line,
    streams,
    topics_now,
)

from streams.core.aggregate import Stats
from streams.core.config import TopicNames
from streams.core.ids import uuid7
from streams.core.partials import LATE_SLOT
from streams.core.routing.directory import notice_headers
from streams.core.routing.hashing import kafka_partition
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec, JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

ROOT = Path(__file__).resolve().parents[2]
MINUTE_MS = 60_000


def read_all(bootstrap: str, topic: str) -> list:
    """Every record of ``topic`` now, read to the end offsets (no group offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts if ends[p]])
        todo = {p for p in parts if ends[p]}
        got: list = []
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    got.append(msg)
                    if msg.offset() + 1 >= ends[msg.partition()]:
                        todo.discard(msg.partition())
        assert not todo, f"could not read {topic} to its end"
        return got
    finally:
        consumer.close()


# --- monitor --------------------------------------------------------------------------------------


def notice(key: str, split_factor: int, rate: float, now_ms: int) -> bytes:
    """A version 1 notice (no schema header): a split factor, as deciders before the directory wrote."""
    return AvroCodec("hot_key_notice_v1").encode({
        "key": key.encode(), "key_display": key, "split_factor": split_factor, "estimated_rate": rate,
        "share": 0.25, "partitions": 12, "detected_at_ms": now_ms, "hot_since_ms": now_ms - 30_000,
        "map_version": 1, "detector": "test-detector"})


def placement_notice(key: str, placement: list[int], rate: float, now_ms: int) -> bytes:
    """A version 2 notice: an explicit partition list (send it with notice_headers())."""
    return AvroCodec("hot_key_notice").encode({
        "key": key.encode(), "key_display": key, "placement": placement, "home": 0, "estimated_rate": rate,
        "share": 0.25, "partitions": 12, "detected_at_ms": now_ms, "hot_since_ms": now_ms - 30_000,
        "map_version": 1, "detector": "test-detector"})


def test_monitor_once_json_shows_exactly_the_live_hot_keys_the_malformed_count_offsets_and_lag(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    hot = make_topic("mon-hot", 2, {"cleanup.policy": "compact"})
    events = make_topic("mon-events", 3)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, k, rate in [("alpha", 2, 900.0), ("beta", 3, 800.0), ("gamma", 4, 700.0), ("delta", 5, 600.0)]:
        producer.produce(hot, notice(key, k, rate, now), key.encode())
    producer.produce(hot, None, b"gamma")                           # tombstone: gamma cooled down
    producer.produce(hot, placement_notice("alpha", [11, 0, 3, 5, 7, 9], 950.0, now), b"alpha",
                     headers=notice_headers())                       # the latest notice per key wins (v2)
    producer.produce(hot, b"\x00 not a hot-key notice", b"junk")     # malformed: counted, never shown
    for partition, count in ((0, 7), (1, 3)):
        for i in range(count):
            producer.produce(events, b"{}", b"k%d" % i, partition=partition)
    assert producer.flush(30) == 0
    group = f"mon-group-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(events, 0, 5)], asynchronous=False)
    committer.close()

    snapshot = ok_json(streams("monitor", "--bootstrap-server", kafka_bootstrap, "--hot-keys-topic", hot,
                               "--events-topic", events, "--group", group, "--once", "--json", "--interval", "300ms"))

    hot_keys = snapshot["hot_keys"]
    assert hot_keys["keys"] == [], "nothing was produced during the interval: every placed key is idle"
    idle = hot_keys["idle"]
    assert [k["key"] for k in idle] == ["alpha", "beta", "delta"], "highest rate at placement first"
    assert idle[0]["placement"] == [11, 0, 3, 5, 7, 9]
    beta_home = kafka_partition(b"beta", 12)  # a version 1 notice: k consecutive partitions from the hash home
    assert idle[1]["placement"] == [(beta_home + i) % 12 for i in range(3)]
    assert (hot_keys["records"], hot_keys["tombstones"], hot_keys["malformed"]) == (7, 1, 1)
    partitions = {p["partition"]: p for p in snapshot["events"]["partitions"]}
    assert {p: s["end_offset"] for p, s in partitions.items()} == {0: 7, 1: 3, 2: 0}
    assert {p: (s["committed"], s["lag"]) for p, s in partitions.items()} == {
        0: (5, 2), 1: (None, None), 2: (None, None)}
    assert all(s["rate"] == 0.0 for s in partitions.values()), "nothing was produced during the interval"
    assert snapshot["events"]["total_lag"] == 2 and snapshot["events"]["group"] == group

    text = streams("monitor", "--bootstrap-server", kafka_bootstrap, "--hot-keys-topic", hot,
                   "--events-topic", events, "--group", f"never-{uuid.uuid4().hex[:8]}", "--once", "--interval", "100ms")
    assert text.returncode == 0, text.stderr
    assert "3 placed key(s) without traffic now, not listed" in text.stdout
    assert "(3 placed, 3 without traffic now, 1 tombstones, 7 records)" in text.stdout
    assert "alpha" not in text.stdout and "gamma" not in text.stdout and "junk" not in text.stdout
    assert re.search(r"^malformed notices +1$", text.stdout, re.M)


def test_monitor_shows_a_keys_rate_as_its_share_of_the_traffic_now_and_drops_a_key_whose_traffic_stopped(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    hot = make_topic("mon-hot", 1, {"cleanup.policy": "compact"})
    events = make_topic("mon-events", 4)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    # Placed when the worker measured 22 events/s as 8 % of the traffic; "gone" stopped long ago.
    for key, placement, home, rate, share in (("live", [1], 0, 22.045, 0.08), ("gone", [3], 3, 500.0, 0.5)):
        record = AvroCodec("hot_key_notice").encode({
            "key": key.encode(), "key_display": key, "placement": placement, "home": home, "estimated_rate": rate,
            "share": share, "partitions": 4, "detected_at_ms": now, "hot_since_ms": now - 30_000,
            "map_version": 1, "detector": "test-detector"})
        producer.produce(hot, record, key.encode(), headers=notice_headers())
    assert producer.flush(30) == 0
    monitor = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "monitor", "--bootstrap-server", kafka_bootstrap, "--hot-keys-topic",
         hot, "--events-topic", events, "--once", "--json", "--interval", "3s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")})
    deadline = time.monotonic() + 6
    while monitor.poll() is None and time.monotonic() < deadline:  # traffic on partitions 0..2, none on 3
        for i in range(200):
            producer.produce(events, b"{}", b"k%d" % i, partition=i % 3)
        producer.flush(10)
        time.sleep(0.1)
    out, err = monitor.communicate(timeout=60)
    assert monitor.returncode == 0, err
    snapshot = orjson.loads(out)
    total = snapshot["events"]["total_rate"]
    [live] = snapshot["hot_keys"]["keys"]
    assert live["key"] == "live" and total > 0
    assert abs(live["share"] - live["rate"] / total) < 1e-9, "rate and share agree with events/s"
    assert abs(live["rate"] - min(0.08 * total, sum(p["rate"] for p in snapshot["events"]["partitions"]
                                                   if p["partition"] in (0, 1)))) < 1e-6
    assert [k["key"] for k in snapshot["hot_keys"]["idle"]] == ["gone"]
    rates = [p["rate"] for p in snapshot["events"]["partitions"]]
    assert abs(snapshot["events"]["balance"] - max(rates) * len(rates) / sum(rates)) < 1e-9, "max/mean of what it shows"
    assert 1.25 < snapshot["events"]["balance"] < 1.42, "three even partitions of four: max/mean 4/3"
    assert snapshot["events"]["directory_changes_per_min"] == 0, "no notice was written while it watched"


def test_monitor_once_names_a_missing_topic_in_one_error_line(kafka_bootstrap: str) -> None:
    missing = f"mon-missing-{uuid.uuid4().hex[:8]}"
    line = one_error_line(streams("monitor", "--bootstrap-server", kafka_bootstrap, "--hot-keys-topic", missing,
                                  "--once"))
    assert missing in line and missing not in topics_now(kafka_bootstrap)


def test_monitor_against_an_unreachable_broker_fails_with_one_line_and_status_1() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    line = one_error_line(streams("monitor", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "2s", "--once"))
    assert "cannot reach the Kafka cluster" in line and f"127.0.0.1:{port}" in line
    assert time.monotonic() - started < 20


# --- replay late ------------------------------------------------------------------------------------


def late_record(event: dict, bucket: TimeBuckets, offset: int, original: bytes | None = None) -> bytes:
    b = bucket.bucket_of(event["ts_ms"])
    return AvroCodec("late_event").encode({
        "event_id": event["id"], "bucket": b.label, "bucket_start_ms": b.start_ms, "event_ts_ms": event["ts_ms"],
        "watermark_ms": b.close_ms + 5_000, "lateness_ms": 5_000, "reason": "bucket closed",
        "source_topic": "streams.events", "source_partition": 0, "source_offset": offset,
        "original": JsonCodec("event").encode(event) if original is None else original,
        "content_type": "application/json"})


def test_replay_late_json_counts_exactly_writes_one_late_slot_partial_per_bucket_key_and_is_idempotent(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    late, partials = make_topic("replay-late", 2), make_topic("replay-partials", 3)
    buckets = TimeBuckets("1m")
    now = int(time.time() * 1000)
    first, second = buckets.bucket_of(now - 5 * MINUTE_MS), buckets.bucket_of(now - 3 * MINUTE_MS)
    old = buckets.bucket_of(now - 3 * 3_600_000)  # ended long before the 1 h retention
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    records: list[bytes] = []

    def event(key: str, ts_ms: int, value: float) -> dict:
        return {"id": str(uuid7()), "id_kind": "uuid7", "ts_ms": ts_ms, "key": key, "value": value, "attributes": {}}

    plan = [("k1", first, 1.5), ("k1", first, 2.0), ("k2", first, -4.0), ("k1", second, 10.0), ("k3", second, 0.25),
            ("k3", second, 0.5)]
    for i, (key, b, value) in enumerate(plan):
        e = event(key, b.start_ms + 1_000 * i, value)
        records.append(late_record(e, buckets, i))
        oracle[(b.label, key)].add(value)
    records.append(records[0])  # the same late event again (a re-delivery): one duplicate
    records.append(late_record(event("k1", first.start_ms, 1.0), buckets, 90, original=b"\xff not json"))  # failed
    records.append(late_record(event("k9", old.start_ms, 1.0), buckets, 91))  # too old for retention
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, value in enumerate(records):
        producer.produce(late, value, b"late", partition=i % 2)
    assert producer.flush(30) == 0
    args = ("replay", "late", "--bootstrap-server", kafka_bootstrap, "--late-events-topic", late,
            "--partials-topic", partials, "--bucket-width", "1m", "--retention", "1h", "--json")

    summary = ok_json(streams(*args))

    assert {k: summary[k] for k in ("read", "replayed", "duplicates", "too_old", "failed", "outside_range",
                                    "corrections")} == {
        "read": 9, "replayed": 6, "duplicates": 1, "too_old": 1, "failed": 1, "outside_range": 0, "corrections": 4}
    assert summary["buckets"] == [first.label, second.label]
    codec = AvroCodec("aggregate")
    once = {(m.partition(), m.offset()): (m.key(), codec.decode(m.value())) for m in read_all(kafka_bootstrap, partials)}
    by_slot = {(r["bucket"], r["key"]): (key, r) for key, r in once.values()}
    assert len(once) == len(by_slot) == 4, "one correction per (bucket, key)"
    assert set(by_slot) == set(oracle)
    for slot, stats in oracle.items():
        key, r = by_slot[slot]
        assert key == slot[1].encode() and (r["slot"], r["final"]) == (LATE_SLOT, True)
        assert (r["count"], r["sum"], r["min"], r["max"]) == (stats.count, stats.sum, stats.min, stats.max)

    again = ok_json(streams(*args))

    assert again == summary
    new = [(m.key(), codec.decode(m.value())) for m in read_all(kafka_bootstrap, partials)
           if (m.partition(), m.offset()) not in once]
    assert len(new) == 4
    assert {(r["bucket"], r["key"]): (key, r) for key, r in new} == by_slot, "the second run writes identical partials"

    # Only the second bucket: the rest is read but left alone.
    ranged = ok_json(streams(*args[:-1], "--from-bucket", second.label, "--to-bucket",
                             datetime.fromtimestamp(second.start_ms / 1000, timezone.utc).isoformat(), "--json"))
    assert {k: ranged[k] for k in ("read", "replayed", "duplicates", "too_old", "failed", "outside_range",
                                   "corrections")} == {
        "read": 9, "replayed": 3, "duplicates": 0, "too_old": 0, "failed": 1, "outside_range": 5, "corrections": 2}
    assert ranged["buckets"] == [second.label]


def test_replay_late_into_a_missing_partials_topic_fails_without_creating_it(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    late = make_topic("replay-late", 1)
    missing = f"replay-missing-{uuid.uuid4().hex[:8]}"
    line = one_error_line(streams("replay", "late", "--bootstrap-server", kafka_bootstrap, "--late-events-topic", late,
                                  "--partials-topic", missing))
    assert missing in line and "does not exist" in line
    assert missing not in topics_now(kafka_bootstrap)


# --- replay events ----------------------------------------------------------------------------------


def test_replay_events_json_gives_the_exact_count_and_sum_per_bucket_and_key_of_the_range_only(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("replay-events", 4)
    buckets = TimeBuckets("1m")
    start = buckets.bucket_of(int(time.time() * 1000) - 20 * MINUTE_MS).start_ms
    end = start + 3 * MINUTE_MS
    router = Router(buckets, [RoutingMap(version=1, partitions=4, topic=topic)])
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    with RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}) as producer:
        for i in range(600):
            key, ts, value = "key-hot" if i % 4 == 0 else f"key-{i % 5}", start + (i * 997) % (end - start), float(i % 11)
            producer.send(key, value, ts_ms=ts)
            oracle[(buckets.bucket_of(ts).label, key)].add(value)
        for ts in (start - 1, end, end + MINUTE_MS):  # just outside the range
            producer.send("key-outside", 1.0, ts_ms=ts)
    start_iso = datetime.fromtimestamp(start / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    result = ok_json(streams("replay", "events", "--bootstrap-server", kafka_bootstrap, "--events-topic", topic,
                             "--from", start_iso, "--to", str(end), "--bucket-width", "1m", "--json"))

    assert (result["from_ms"], result["to_ms"], result["events"]) == (start, end, 600)
    got = {(r["bucket"], r["key"]): r for r in result["aggregates"]}
    assert set(got) == set(oracle)
    for slot, stats in oracle.items():
        assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == (
            stats.count, stats.sum, stats.min, stats.max)
    per_key: Counter[str] = Counter()
    for (_, key), r in got.items():
        per_key[key] += r["count"]
    assert per_key == Counter("key-hot" if i % 4 == 0 else f"key-{i % 5}" for i in range(600))
    assert per_key["key-hot"] == 150 and "key-outside" not in per_key

    text = streams("replay", "events", "--bootstrap-server", kafka_bootstrap, "--events-topic", topic,
                   "--from", str(start), "--to", str(end), "--top", "3")
    assert text.returncode == 0, text.stderr
    assert "top 3 of" in text.stdout and "key-hot" in text.stdout


def test_replay_events_rejects_an_unparseable_time_as_a_usage_error() -> None:
    result = streams("replay", "events", "--from", "yesterday", "--to", "1")
    assert result.returncode == 2 and "--from" in result.stderr and "yesterday" in result.stderr


# --- worker -------------------------------------------------------------------------------------------


def test_worker_help_and_dry_run_map_each_flag_onto_its_streams_variable_offline() -> None:
    help_text = streams("worker", "--help")
    assert help_text.returncode == 0
    for flag in ("--bucket-width", "--grace", "--metrics-port", "--app-id", "--events-topic", "--loglevel"):
        assert flag in help_text.stdout
    dry = ok_json(streams("worker", "--dry-run", "--json", "--bootstrap-server", "broker:9092", "--partitions", "4",
                          "--bucket-width", "5m", "--grace", "3s", "--metrics-port", "9108", "--app-id", "a1",
                          "--events-topic", "my.events", "--balance-target", "1.2", "-l", "debug",
                          "--", "--blocking-timeout", "5"))
    assert dry["env"] == {"STREAMS_BOOTSTRAP_SERVERS": "broker:9092", "STREAMS_PARTITIONS": "4",
                          "STREAMS_BUCKET_WIDTH": "5m", "STREAMS_GRACE": "3s", "STREAMS_METRICS_PORT": "9108",
                          "STREAMS_APP_ID": "a1", "STREAMS_EVENTS_TOPIC": "my.events", "STREAMS_BALANCE_TARGET": "1.2"}
    assert dry["command"][0] == str(Path(sys.executable).parent / "faust")
    assert dry["command"][1:] == ["-A", "streams.app", "worker", "--loglevel", "debug", "--without-web",
                                  "--blocking-timeout", "5"]
    line = one_error_line(streams("worker", "--dry-run", "--bucket-width", "7m"))
    assert "bucket width '7m'" in line


def test_worker_becomes_the_faust_worker_creates_the_topics_and_exits_0_on_sigterm(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    names = {role: f"w{tag}.{role.replace('_', '-')}" for role in TopicNames.__dataclass_fields__}
    flags = [f"--{role.replace('_', '-')}-topic={name}" for role, name in names.items()]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "worker", "--bootstrap-server", kafka_bootstrap,
                             "--app-id", f"w-{tag}", "--partitions", "2", "--datadir", str(tmp_path / "data"),
                             *flags], env=clean, cwd=tmp_path, stdout=(tmp_path / "log").open("wb"),
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not set(names.values()) <= topics_now(kafka_bootstrap) and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "log").read_text()[-3000:]
            time.sleep(0.5)
        assert set(names.values()) <= topics_now(kafka_bootstrap), (tmp_path / "log").read_text()[-3000:]
        assert "faust" in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"), \
            "the streams process became faust (exec), so signals reach it directly"
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        md = admin.list_topics(timeout=10)
        assert len(md.topics[names["events"]].partitions) == 2
        resource = ConfigResource(ResourceType.TOPIC, names["hot_keys"])
        config = admin.describe_configs([resource])[resource].result(30)
        assert config["cleanup.policy"].value == "compact"
        time.sleep(2)  # let it finish joining the group: a real stop, not an abort during start-up
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        faust_topics = [f"w-{tag}-stage1-changelog", f"w-{tag}-stage2-changelog", f"w-{tag}-__assignor-__leader"]
        delete_if_there(kafka_bootstrap, list(names.values()) + faust_topics)
