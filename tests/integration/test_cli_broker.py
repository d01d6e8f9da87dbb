"""``streams produce`` and ``streams topics`` as a user runs them (subprocesses), against the real broker."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from worker_harness import consume_all

from streams.core.config import TopicNames
from streams.core.routing.hashing import canonical_key, kafka_partition
from streams.core.serde import AvroCodec, JsonCodec
from streams.core.simulate import Workload, generate_keys
from streams.core.time.buckets import TimeBuckets

ROOT = Path(__file__).resolve().parents[2]


def streams(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m streams.cli ARGS`` with no STREAMS_* settings leaking in from the caller."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=clean, cwd=ROOT)


def ok_json(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return orjson.loads(result.stdout)  # type: ignore[no-any-return]


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streams: error: "), result.stderr
    return lines[0]


def topics_now(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


@pytest.fixture
def fresh_names(kafka_bootstrap: str) -> Iterator[Callable[[str], str]]:
    """Unique topic names that do not exist yet; whatever of them exists afterwards is deleted."""
    names: list[str] = []

    def name(prefix: str) -> str:
        names.append(f"{prefix}-{uuid.uuid4().hex[:10]}")
        return names[-1]

    yield name
    delete_if_there(kafka_bootstrap, names)


def delete_if_there(bootstrap: str, names: list[str]) -> None:
    """Cleanup: delete whichever of ``names`` exist."""
    existing = [n for n in names if n in topics_now(bootstrap)]
    if existing:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.delete_topics(existing, operation_timeout=30).values():
            try:
                fut.result(30)
            except Exception:  # noqa: BLE001 - cleanup only
                pass


# --- produce -------------------------------------------------------------------------------------


def test_produce_creates_the_topic_and_its_summary_counts_equal_what_the_topic_holds(
        kafka_bootstrap: str, fresh_names: Callable[[str], str]) -> None:
    topic = fresh_names("cli-produce")
    summary = ok_json(streams("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--create-topic",
                              "--partitions", "6", "--count", "5000", "--distribution", "zipf", "--seed", "3",
                              "--json"))
    assert (summary["sent"], summary["delivered"], summary["failed"]) == (5000, 5000, 0)
    assert summary["partitions"] == 6 and summary["topic"] == topic

    got = consume_all(kafka_bootstrap, topic, 5000)
    assert len(got) == 5000
    on_partition = Counter(m.partition() for m in got)
    assert {(r["topic"], r["partition"]): r["delivered"] for r in summary["per_partition"]} == {
        (topic, p): on_partition[p] for p in range(6)}
    codec = JsonCodec("event")
    events = [(m, codec.decode(m.value())) for m in got]
    assert len({e["id"] for _, e in events}) == 5000
    # The keys are the seeded workload's, and with no hot keys each sits where Kafka's own rule puts it.
    assert Counter(e["key"] for _, e in events) == Counter(
        generate_keys(Workload("zipf", keys=1000, zipf_exponent=1.1, seed=3), 5000))
    assert all(m.partition() == kafka_partition(canonical_key(e["key"]), 6) for m, e in events)
    assert all(e["value"] == 1.0 and e["id_kind"] == "uuid7" for _, e in events)


def test_produce_paces_to_the_rate_and_writes_avro_with_snowflake_ids(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("cli-paced", partitions=3)
    summary = ok_json(streams("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--count", "600",
                              "--rate", "300", "--serializer", "avro", "--id-kind", "snowflake",
                              "--value-field", "uniform", "--distribution", "uniform", "--json"))
    assert summary["delivered"] == 600 and summary["partitions"] == 3  # taken from the topic
    assert 1.9 <= summary["elapsed_s"] < 6, summary["elapsed_s"]  # 600 events at 300/s: two seconds
    codec = AvroCodec("event")
    events = [codec.decode(m.value()) for m in consume_all(kafka_bootstrap, topic, 600)]
    assert len(events) == 600
    assert all(e["id_kind"] == "snowflake" and e["id"].isdigit() for e in events)
    assert all(0.0 <= e["value"] < 100.0 for e in events) and len({e["value"] for e in events}) > 500


def test_produce_to_a_missing_topic_gives_one_line_and_creates_nothing(
        kafka_bootstrap: str, fresh_names: Callable[[str], str]) -> None:
    topic = fresh_names("cli-missing")
    line = one_error_line(streams("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
                                  "--count", "10"))
    assert f"topic '{topic}' does not exist" in line and "--create-topic" in line
    time.sleep(1)  # the broker auto-creates topics on request: make sure nothing asked it to
    assert topic not in topics_now(kafka_bootstrap)


def test_produce_with_partitions_that_disagree_with_the_topic_is_refused(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("cli-mismatch", partitions=3)
    line = one_error_line(streams("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
                                  "--partitions", "4", "--count", "10"))
    assert f"topic '{topic}' has 3 partitions, not --partitions 4" in line


# --- topics create / describe --------------------------------------------------------------------


ROLES = tuple(f.name for f in dataclasses.fields(TopicNames))
COMPACTED = {"hot_keys", "aggregates", "routing_maps"}
CONTROL = {"sketches", "hot_keys", "bucket_closed", "dead_letters", "routing_maps", "id_leases"}
#: Topics whose retention is their own, whatever --retention says: leases matter for an hour at most.
OWN_RETENTION = {"id_leases": 3_600_000}


def test_topics_create_then_describe_shows_compacted_and_delete_configs(
        kafka_bootstrap: str, fresh_names: Callable[[str], str]) -> None:
    names = {role: fresh_names(f"cli-{role.replace('_', '-')}") for role in ROLES}
    flags = [arg for role, name in names.items() for arg in (f"--{role.replace('_', '-')}-topic", name)]
    common = ["--bootstrap-server", kafka_bootstrap, *flags, "--json"]

    created = ok_json(streams("topics", "create", *common, "--partitions", "3", "--retention", "2d"))
    assert {t["role"]: t["created"] for t in created["topics"]} == dict.fromkeys(ROLES, True)

    described = {t["role"]: t for t in ok_json(streams("topics", "describe", *common))["topics"]}
    assert set(described) == set(ROLES)
    for role, info in described.items():
        assert info["name"] == names[role] and info["exists"] is True
        assert info["partitions"] == (1 if role in CONTROL else 3), role
        assert info["replication_factor"] == 1
        if role in COMPACTED:
            assert (info["cleanup_policy"], info["compacted"]) == ("compact", True), role
            assert "retention.ms" not in info["overrides"]
        else:
            assert (info["cleanup_policy"], info["compacted"]) == ("delete", False), role
            retention = OWN_RETENTION.get(role, 2 * 86_400_000)
            assert info["retention_ms"] == retention == int(info["overrides"]["retention.ms"]), role

    again = ok_json(streams("topics", "create", *common, "--partitions", "5"))
    assert {t["role"]: (t["created"], t["partitions"]) for t in again["topics"]} == {
        role: (False, 1 if role in CONTROL else 3) for role in ROLES}


def test_topics_describe_reports_a_missing_topic_as_not_existing(
        kafka_bootstrap: str, make_topic: Callable[..., str], fresh_names: Callable[[str], str]) -> None:
    present, absent = make_topic("cli-present", partitions=2), fresh_names("cli-absent")
    got = ok_json(streams("topics", "describe", "--bootstrap-server", kafka_bootstrap, present, absent, "--json"))
    assert [(t["name"], t["exists"], t["partitions"]) for t in got["topics"]] == [(present, True, 2), (absent, False, None)]


# --- topics roll ------------------------------------------------------------------------------


def test_topics_roll_dry_run_changes_nothing_and_roll_creates_ahead_and_deletes_the_expired(
        kafka_bootstrap: str) -> None:
    prefix = f"cli-roll-{uuid.uuid4().hex[:10]}."
    template = prefix + "{bucket}"
    minute = TimeBuckets("1m")
    expired = prefix + minute.bucket_of(int(time.time() * 1000) - 3 * 3_600_000).label
    bystander = prefix + "other"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(expired, 1, 1), NewTopic(bystander, 1, 1)]).values():
        fut.result(30)
    roll = ["topics", "roll", "--bootstrap-server", kafka_bootstrap, "--template", template, "--bucket-width", "1m",
            "--ahead", "2", "--retention", "1h", "--partitions", "2", "--json"]

    def ours() -> set[str]:
        return {t for t in topics_now(kafka_bootstrap) if t.startswith(prefix)}

    try:
        assert ours() == {expired, bystander}
        dry = ok_json(streams(*roll, "--dry-run"))
        assert dry["dry_run"] is True and dry["created"] == [] and dry["deleted"] == []
        assert len(dry["plan"]["create"]) == 3 and dry["plan"]["delete"] == [expired]
        indexes = [minute.bucket_of(dry["now_ms"]).index + i for i in range(3)]
        assert dry["plan"]["create"] == [prefix + minute.bucket_at_index(i).label for i in indexes]
        assert ours() == {expired, bystander}

        done = ok_json(streams(*roll))
        assert done["dry_run"] is False
        assert done["created"] == done["plan"]["create"] and len(done["created"]) == 3
        assert done["deleted"] == [expired]
        assert ours() == {bystander, *done["created"]}
        created_parts = {t: len(md.partitions) for t, md in admin.list_topics(timeout=15).topics.items()
                         if t in done["created"]}
        assert created_parts == dict.fromkeys(done["created"], 2)
    finally:
        delete_if_there(kafka_bootstrap, sorted(ours()))


def test_produce_exposes_its_delivery_counters_to_prometheus_while_it_runs(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    import socket
    import urllib.error
    import urllib.request

    topic = make_topic("metrics", partitions=3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "produce", "--bootstrap-server", kafka_bootstrap,
                             "--topic", topic, "--count", "4000", "--rate", "1000", "--metrics-port", str(port),
                             "--json"], env=clean, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and seen.get("streams_producer_delivered", 0) <= 0:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except (urllib.error.URLError, ConnectionError):
            continue  # the server is not up yet
        seen = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line and not line.startswith("#")}
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert 0 < seen["streams_producer_delivered"] <= seen["streams_producer_sent"] < 4000
    assert seen["streams_producer_failed"] == 0
    assert orjson.loads(out)["delivered"] == 4000


# --- produce follows the fleet; its summary during an outage ------------------------------------------


def publish_placement(bootstrap: str, topic: str, key: str, placement: tuple[int, ...], partitions: int) -> None:
    """Publish a version-2 notice placing ``key`` on ``placement``, as the decider does."""
    from confluent_kafka import Producer

    from streams.core.routing.directory import HotKeyNotice, encode_notice, notice_headers

    now = int(time.time() * 1000)
    kb = canonical_key(key)
    notice = HotKeyNotice(key=kb, key_display=key, placement=placement, home=kafka_partition(kb, partitions),
                          estimated_rate=500.0, share=0.5, partitions=partitions, detected_at_ms=now,
                          hot_since_ms=now, map_version=1, detector="test")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, encode_notice(notice), kb, headers=notice_headers())
    assert producer.flush(30) == 0


def test_produce_follows_the_key_directory_by_default_and_says_once_when_told_not_to(
        kafka_bootstrap: str, make_topic: Callable[..., str], fresh_names: Callable[[str], str]) -> None:
    hot = make_topic("follow-hot", 1, {"cleanup.policy": "compact"})
    keys = generate_keys(Workload("uniform", keys=8, seed=5), 2000)
    key = Counter(keys).most_common(1)[0][0]
    home = kafka_partition(canonical_key(key), 4)
    publish_placement(kafka_bootstrap, hot, key, ((home + 1) % 4,), 4)
    common = ["--bootstrap-server", kafka_bootstrap, "--hot-keys-topic", hot, "--routing-maps-topic",
              fresh_names("follow-maps-absent"), "--count", "2000", "--distribution", "uniform", "--keys", "8",
              "--seed", "5", "--json"]

    following = make_topic("follow-events", 4)
    result = streams("produce", "--events-topic", following, *common)
    summary = ok_json(result)
    assert summary["following"] == {"hot_keys_topic": hot, "routing_maps_topic": None}
    assert "ignoring" not in result.stderr
    landed = consume_all(kafka_bootstrap, following, 2000)
    assert {m.partition() for m in landed if m.key() == key.encode()} == {(home + 1) % 4}  # every event, the first too
    assert all(m.partition() == kafka_partition(m.key(), 4) for m in landed if m.key() != key.encode())

    ignoring = make_topic("nofollow-events", 4)
    result = streams("produce", "--events-topic", ignoring, "--no-follow", *common)
    assert ok_json(result)["following"] == {"hot_keys_topic": None, "routing_maps_topic": None}
    notes = [line for line in result.stderr.splitlines() if "ignoring the key directory" in line]
    assert notes == [f"streams: note: ignoring the key directory on '{hot}', which places 1 key(s) (--no-follow): "
                     "every key goes to its hash partition"]
    landed = consume_all(kafka_bootstrap, ignoring, 2000)
    assert {m.partition() for m in landed if m.key() == key.encode()} == {home}


def wait_until_visible(bootstrap: str, *topics: str, deadline_s: float = 30) -> None:
    """Wait until the broker's metadata lists ``topics`` with partitions (a new topic takes a moment)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = time.monotonic() + deadline_s
    missing = set(topics)
    while missing and time.monotonic() < end:
        listed = admin.list_topics(timeout=10).topics
        missing = {t for t in missing if t not in listed or listed[t].error is not None or not listed[t].partitions}
    assert not missing, f"topics not in the metadata after {deadline_s} s: {sorted(missing)}"


def test_produce_follows_the_routing_maps_only_when_they_route_its_topic(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    from streams.core.routing.router import RoutingMap
    from streams.kafka.maps import publish_map

    fleet_events, load_test = make_topic("maps-events", 3), make_topic("maps-load-test", 3)
    maps = make_topic("maps", 1, {"cleanup.policy": "compact"})
    client = {"bootstrap.servers": kafka_bootstrap}
    wait_until_visible(kafka_bootstrap, fleet_events, load_test, maps)
    publish_map(client, maps, RoutingMap(version=1, partitions=3, topic=fleet_events), bucket_width_ms=60_000)
    common = ["--bootstrap-server", kafka_bootstrap, "--routing-maps-topic", maps, "--count", "100", "--json"]

    ours = streams("produce", "--events-topic", fleet_events, *common)
    assert ok_json(ours)["following"]["routing_maps_topic"] == maps and "note" not in ours.stderr
    other = streams("produce", "--events-topic", load_test, *common)
    assert ok_json(other)["following"]["routing_maps_topic"] is None
    assert f"streams: note: not following the routing maps on '{maps}': they route '{fleet_events}', not " \
           f"'{load_test}'" in other.stderr
    assert len(consume_all(kafka_bootstrap, load_test, 100)) == 100


def test_produce_during_a_broker_outage_reports_progress_and_a_summary_that_adds_up(fresh_kafka: Any) -> None:
    bootstrap = fresh_kafka.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("outage", 3, 1)])["outage"].result(30)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "produce", "--bootstrap-server", bootstrap,
                             "--events-topic", "outage", "--no-follow", "--duration", "6s", "--rate", "1000",
                             "--progress-interval", "500ms", "--flush-timeout", "2s", "--json"],
                            env=clean, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    before: list[str] = []
    for line in proc.stderr:  # without a terminal: progress lines on stderr while it sends
        before.append(line)
        if line.startswith("progress") and ", delivered 0," not in line:
            break
    fresh_kafka.kill()  # the outage: the only broker is gone, mid-run
    rest, _ = proc.stderr.read(), proc.wait(120)
    summary = orjson.loads(proc.stdout.read() if proc.stdout else b"")
    after = rest.splitlines()

    assert proc.returncode == 1
    assert after[-1].startswith("streams: error: ") and "not delivered" in after[-1]
    assert [line for line in after if line.startswith("progress")], "progress lines go on during the outage"
    assert summary["sent"] == summary["delivered"] + summary["failed"] + summary["pending"]
    assert summary["delivered"] > 0 and summary["failed"] + summary["pending"] > 0
    assert sum(p["delivered"] for p in summary["per_partition"]) == summary["delivered"]
