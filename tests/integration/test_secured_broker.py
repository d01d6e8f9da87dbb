"""A broker that only speaks SASL/SCRAM (over plaintext, and over TLS with a test CA): the producer, the worker, ``monitor`` and ``replay`` authenticate with
credentials from the settings (a TOML table, a string-shaped ``client_properties``, ``STREAMS_KAFKA_*``
variables), anonymous and wrong-password clients are refused, and no password appears in any output or log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient
from conftest import SecuredKafka
from worker_harness import Worker, running_worker

from streams.core.aggregate import Stats
from streams.core.config import KafkaSettings, load
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
WIDTH_MS = 5_000
GRACE_MS = 1_000
SETTINGS = {"partitions": PARTITIONS, "bucket_width": "5s", "grace": "1s", "allowed_delay": "0s",
            "idle_timeout": "3s", "retention": "1h", "session_timeout_s": 6}


# --- the three shapes credentials come in -------------------------------------------------------------


def as_env(secured: SecuredKafka, password: str | None = None) -> dict[str, str]:
    """``STREAMS_*`` variables: the bootstrap servers and every client property as ``STREAMS_KAFKA_*``."""
    env = {"STREAMS_BOOTSTRAP_SERVERS": secured.bootstrap}
    for key, value in secured.client_config().items():
        if key != "bootstrap.servers":
            env["STREAMS_KAFKA_" + key.upper().replace(".", "_")] = value
    if password is not None:
        env["STREAMS_KAFKA_SASL_PASSWORD"] = password
    return env


def as_toml_table(secured: SecuredKafka, path: Path) -> Path:
    """A settings file whose ``[kafka] client_properties`` is a TOML table."""
    props = {k: v for k, v in secured.client_config().items() if k != "bootstrap.servers"}
    rows = "\n".join(f'"{k}" = "{v}"' for k, v in props.items())
    path.write_text(f'[kafka]\nbootstrap_servers = "{secured.bootstrap}"\n\n[kafka.client_properties]\n{rows}\n')
    return path


def as_toml_string(secured: SecuredKafka, path: Path) -> Path:
    """A settings file whose ``client_properties`` is one string of key=value lines (issue 14, item 7)."""
    props = {k: v for k, v in secured.client_config().items() if k != "bootstrap.servers"}
    lines = "\n".join(f"{k}={v}" for k, v in props.items())
    path.write_text(f'[kafka]\nbootstrap_servers = "{secured.bootstrap}"\nclient_properties = """\n{lines}\n"""\n')
    return path


def streams(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m streams.cli ARGS`` with exactly ``env``'s STREAMS_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**clean, **env}, cwd=ROOT, check=False)


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return orjson.loads(result.stdout)


def assert_never_shown(password: str, outputs: list[str]) -> None:
    for i, text in enumerate(outputs):
        assert password not in text, f"output {i} shows the password:\n{text[-2000:]}"


# --- reading the worker's topics with credentials ----------------------------------------------------


def poll_until(config: dict[str, Any], topic: str, schema: str, done: Callable[[list[Any]], bool],
               timeout_s: float, worker: Worker) -> list[Any]:
    """Decoded records of ``topic`` from the beginning, polled until ``done(records)`` or the deadline."""
    codec = AvroCodec(schema)
    consumer = Consumer({**config, "group.id": f"chk-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not done(records):
            assert time.monotonic() < deadline, f"{topic}: condition not met in {timeout_s} s\n{worker.tail()}"
            assert worker.alive(), "the worker died:\n" + worker.tail()
            records += [codec.decode(m.value()) for m in consumer.consume(1000, 0.3)
                        if m.error() is None and m.value() is not None]
    finally:
        consumer.close()
    return records


def latest_by_slot(records: list[Any]) -> dict[tuple[str, str], Any]:
    return {(r["bucket"], r["key"]): r for r in records}


def wait_for_topic(config: dict[str, Any], topic: str, worker: Worker, timeout_s: float = 60) -> None:
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while topic not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline and worker.alive(), f"no {topic} after {timeout_s} s:\n{worker.tail()}"
        time.sleep(0.2)  # polling the broker's metadata until the worker has created its topics


# --- the tests -----------------------------------------------------------------------------------------------


def test_anonymous_and_wrong_password_clients_are_refused_and_the_error_says_why(
        secured_kafka: SecuredKafka, tmp_path: Path) -> None:
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": secured_kafka.bootstrap}).list_topics(timeout=3)
    with pytest.raises(KafkaException):
        AdminClient(secured_kafka.client_config(**{"sasl.password": "wrong-password-1"})).list_topics(timeout=3)

    anonymous = streams({"STREAMS_BOOTSTRAP_SERVERS": secured_kafka.bootstrap}, "topics", "describe", "--timeout", "3s")
    assert anonymous.returncode == 1, anonymous
    assert anonymous.stderr.startswith("streams: error: ") and "security.protocol" in anonymous.stderr, \
        anonymous.stderr

    wrong = streams(as_env(secured_kafka, password="wrong-password-2"), "topics", "describe", "--timeout", "3s")
    assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1, wrong
    assert "refused the connection: SASL authentication error" in wrong.stderr, wrong.stderr
    assert "invalid credentials" in wrong.stderr, wrong.stderr
    debug = streams(as_env(secured_kafka, password="wrong-password-2"), "--debug", "topics", "describe",
                    "--timeout", "3s")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "invalid credentials" in debug.stderr
    outputs = [anonymous.stdout, anonymous.stderr, wrong.stdout, wrong.stderr, debug.stdout, debug.stderr]
    assert_never_shown("wrong-password-2", outputs)
    assert_never_shown(secured_kafka.password, outputs)


@pytest.fixture(params=["secured_kafka", "tls_kafka"], ids=["sasl_plaintext", "sasl_ssl"])
def any_secured(request: pytest.FixtureRequest) -> SecuredKafka:
    """Each secured broker in turn: SASL_PLAINTEXT (SCRAM-SHA-256), then SASL_SSL (SCRAM-SHA-512, test CA)."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_producer_worker_monitor_and_replay_authenticate_from_settings_and_never_print_the_password(
        any_secured: SecuredKafka, tmp_path: Path) -> None:
    secured_kafka = any_secured
    password = secured_kafka.password
    table, string = as_toml_table(secured_kafka, tmp_path / "table.toml"), as_toml_string(secured_kafka, tmp_path / "str.toml")
    outputs: list[str] = []
    config = secured_kafka.client_config()
    buckets = TimeBuckets("5s", grace="1s")
    t0 = (int(time.time() * 1000) - 120_000) // WIDTH_MS * WIDTH_MS  # two minutes ago, bucket-aligned

    # The worker takes its credentials from a string-shaped client_properties.
    with running_worker(secured_kafka.bootstrap, tmp_path, **SETTINGS, config=string) as worker:
        names = worker.names
        wait_for_topic(config, names.events, worker)

        # The producer takes them from STREAMS_KAFKA_* variables.
        settings = load(KafkaSettings, env=as_env(secured_kafka))
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        sentinels = [k for p in range(PARTITIONS)
                     for k in [f"s{j}" for j in range(200) if router.route(f"s{j}", t0).partition == p][:3]]
        with RoutingProducer(router, settings) as producer:
            for i, ts in enumerate(sorted(t0 + (i * 37) % (2 * WIDTH_MS) for i in range(400))):  # in time order
                key = f"k{i % 13}"
                producer.send(key, float(i), ts_ms=ts)
                oracle[(buckets.bucket_of(ts).label, key)].add(float(i))
            # Records on every partition push the watermark past both buckets (several per partition:
            # a watermark may wait for agreement, not trust one record).
            for key in sentinels:
                producer.send(key, 0.0, ts_ms=t0 + 2 * WIDTH_MS + GRACE_MS + 1_000)
        assert producer.stats().delivered == 400 + len(sentinels)

        aggregates = poll_until(config, names.aggregates, "aggregate", lambda rs: all(
            latest_by_slot(rs).get(slot, {}).get("count") == s.count for slot, s in oracle.items()), 90, worker)
        got = latest_by_slot(aggregates)
        assert all(got[slot]["sum"] == s.sum for slot, s in oracle.items())

        first = buckets.bucket_of(t0).label
        with RoutingProducer(router, settings) as producer:
            for i in range(5):  # the first bucket is closed: these go to the late-events topic
                producer.send("k-late", 1.0, ts_ms=t0 + i)
        poll_until(config, names.late_events, "late_event", lambda rs: len(rs) >= 5, 60, worker)

        # `streams monitor` takes them from a TOML table.
        monitor = streams({"STREAMS_CONFIG": str(table)}, "monitor", "--once", "--json", "--interval", "300ms",
                          "--events-topic", names.events, "--hot-keys-topic", names.hot_keys, "--group",
                          worker.env["STREAMS_APP_ID"])
        outputs += [monitor.stdout, monitor.stderr]
        snapshot = ok_json(monitor)
        assert sum(p["end_offset"] for p in snapshot["events"]["partitions"]) == 400 + len(sentinels) + 5

        # `streams replay late` from STREAMS_KAFKA_* variables: the late events go back into their bucket.
        replay = streams(as_env(secured_kafka), "replay", "late", "--late-events-topic", names.late_events,
                         "--partials-topic", names.partials, "--bucket-width", "5s", "--json")
        outputs += [replay.stdout, replay.stderr]
        assert (ok_json(replay)["read"], ok_json(replay)["replayed"]) == (5, 5)
        poll_until(config, names.aggregates, "aggregate",
                   lambda rs: latest_by_slot(rs).get((first, "k-late"), {}).get("count") == 5, 60, worker)

        # `streams replay events` from the string-shaped file: exact counts of the range.
        events = streams({"STREAMS_CONFIG": str(string)}, "replay", "events", "--events-topic", names.events,
                         "--from", str(t0), "--to", str(t0 + 2 * WIDTH_MS), "--bucket-width", "5s", "--json")
        outputs += [events.stdout, events.stderr]
        assert ok_json(events)["events"] == 400 + 5

        # Dry runs and --debug print nothing secret either, whatever shape carries the password.
        for env in ({"STREAMS_CONFIG": str(string)}, {"STREAMS_CONFIG": str(table)}, as_env(secured_kafka)):
            dry = streams(env, "--debug", "worker", "--dry-run", "--partitions", "2")
            assert dry.returncode == 0, dry.stderr
            outputs += [dry.stdout, dry.stderr]
        assert worker.alive(), worker.tail()
    outputs.append(worker.log.read_text(errors="replace"))
    assert_never_shown(password, outputs)


def test_a_client_that_does_not_trust_the_test_ca_is_refused_and_the_error_says_why(tls_kafka: SecuredKafka) -> None:
    env = {k: v for k, v in as_env(tls_kafka).items() if k != "STREAMS_KAFKA_SSL_CA_LOCATION"}
    result = streams(env, "topics", "describe", "--timeout", "3s")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result
    assert "refused the connection: SSL handshake failed" in result.stderr, result.stderr
    assert_never_shown(tls_kafka.password, [result.stdout, result.stderr])
