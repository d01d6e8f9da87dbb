"""Shared fixtures: the real Kafka broker (started once per session) and topic helpers.

``KAFKA_BOOTSTRAP`` names an existing cluster; otherwise the session starts the
project's own single-node KRaft broker (scripts/kafka_local.py). Two more brokers are
started only if a test asks for them, once per session: ``kafka_cluster`` (three
nodes, replication factor 3), ``secured_kafka`` (one node with a SASL_PLAINTEXT /
SCRAM listener only) and ``tls_kafka`` (SASL_SSL with a test CA made at start). A test that needs a broker fails loudly when it cannot be had;
nothing here skips.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# Timings never decide a test: hypothesis's per-example deadline and its "data generation is slow"
# health check measure this shared 2-core machine, not the code (a CI run failed on the latter).
settings.register_profile("streams", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("streams")
sys.path.insert(0, str(ROOT / "scripts"))

_MARK_BY_DIR = {"unit": pytest.mark.unit, "integration": pytest.mark.integration, "faults": pytest.mark.faults}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its folder, so ``-m unit`` / ``-m integration`` select them."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in _MARK_BY_DIR:
            item.add_marker(_MARK_BY_DIR[parts[0]])


@pytest.fixture(scope="session")
def _own_broker() -> Iterator[Any]:
    """The project's own single-node KRaft broker, started once per session; None with ``$KAFKA_BOOTSTRAP``."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield None
        return
    from kafka_local import LocalKafka

    broker = LocalKafka()
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001 - turn any start failure into a loud failure
        pytest.fail(f"the Kafka broker needed by this test could not be started: {exc}", pytrace=False)
    print(f"\n[kafka] local broker {broker.version} at {broker.bootstrap}, started in {broker.started_in_s:.1f} s")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(_own_broker: Any) -> str:
    """``bootstrap.servers`` of a live broker: ``$KAFKA_BOOTSTRAP`` or the local one started for the session."""
    if _own_broker is None:
        existing = os.environ["KAFKA_BOOTSTRAP"]
        _require_reachable(existing)
        return existing
    return str(_own_broker.bootstrap)


@pytest.fixture
def local_kafka(_own_broker: Any) -> Iterator[Any]:
    """The session's own broker (``LocalKafka``), for a test that stops and restarts it.

    Fails (never skips) when ``$KAFKA_BOOTSTRAP`` names another cluster: this test
    needs a broker it may stop. The broker is running again when the test ends.
    """
    if _own_broker is None:
        pytest.fail("this test stops and restarts the broker: it needs the project's own, not $KAFKA_BOOTSTRAP",
                    pytrace=False)
    yield _own_broker
    if not _own_broker.running:
        _own_broker.launch()
        _own_broker.wait_ready(time.monotonic())


@dataclass(frozen=True)
class SecuredKafka:
    """A broker whose only client listener is SASL/SCRAM (``protocol``: SASL_PLAINTEXT or SASL_SSL), and its user.

    ``ca_location`` is the test CA's certificate file for SASL_SSL (None otherwise).
    """

    bootstrap: str
    username: str
    password: str
    mechanism: str
    protocol: str = "SASL_PLAINTEXT"
    ca_location: str | None = None

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka properties that authenticate as the user (and trust the test CA), then ``extra``."""
        tls = {"ssl.ca.location": self.ca_location} if self.ca_location else {}
        return {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol,
                "sasl.mechanism": self.mechanism, "sasl.username": self.username,
                "sasl.password": self.password, **tls, **extra}


def _secured_broker(tls: bool, mechanism: str) -> Iterator[SecuredKafka]:
    from kafka_local import LocalKafka, ScramUser

    broker = LocalKafka(heap="384m", scram=ScramUser("alice", mechanism=mechanism), tls=tls)
    what = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    _start_or_fail(broker, f"secured ({what}, {mechanism}) Kafka broker")
    assert broker.scram is not None
    config = broker.client_config()
    print(f"\n[kafka] {what} broker at {broker.bootstrap} (SCRAM user {broker.scram.username}), "
          f"started in {broker.started_in_s:.1f} s")
    try:
        yield SecuredKafka(broker.bootstrap, broker.scram.username, broker.scram.password, broker.scram.mechanism,
                           config["security.protocol"], config.get("ssl.ca.location"))
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[SecuredKafka]:
    """A single-node broker with a SASL_PLAINTEXT / SCRAM-SHA-256 listener only, started the first time a test asks."""
    yield from _secured_broker(tls=False, mechanism="SCRAM-SHA-256")


@pytest.fixture(scope="session")
def tls_kafka() -> Iterator[SecuredKafka]:
    """A single-node broker with a SASL_SSL / SCRAM-SHA-512 listener only (a test CA made at start), started lazily."""
    yield from _secured_broker(tls=True, mechanism="SCRAM-SHA-512")


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[Any]:
    """A three-node KRaft cluster (``LocalKafkaCluster``), started the first time a test asks.

    Tests may ``kill`` and ``restart`` nodes; each restores what it killed.
    """
    from kafka_local import LocalKafkaCluster

    cluster = LocalKafkaCluster(nodes=3)
    _start_or_fail(cluster, "three-node Kafka cluster")
    print(f"\n[kafka] three-node cluster at {cluster.bootstrap}, started in {cluster.started_in_s:.1f} s")
    try:
        yield cluster
    finally:
        cluster.stop()


def _start_or_fail(broker: Any, what: str) -> None:
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001 - turn any start failure into a loud failure
        pytest.fail(f"the {what} needed by this test could not be started: {exc}", pytrace=False)


def _require_reachable(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"KAFKA_BOOTSTRAP={bootstrap} is set but the cluster does not answer: {exc}", pytrace=False)
    if not md.brokers:
        pytest.fail(f"KAFKA_BOOTSTRAP={bootstrap} answered with no brokers", pytrace=False)


@pytest.fixture
def make_topic(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics for one test; they are deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30)
        futures[name].result(30)
        created.append(name)
        return name

    yield make
    if created:
        for fut in admin.delete_topics(created, operation_timeout=30).values():
            try:
                fut.result(30)
            except Exception:  # noqa: BLE001 - cleanup only; the broker dies with the session anyway
                pass


@pytest.fixture
def fresh_kafka() -> Iterator[Any]:
    """A single-node broker of this test alone (``LocalKafka``): no topics at start, and the test may kill it.

    Started for every test that asks (a few seconds), whatever ``KAFKA_BOOTSTRAP`` says:
    a test of a fresh cluster or of an outage needs a broker nothing else uses.
    """
    from kafka_local import LocalKafka

    broker = LocalKafka(heap="384m")
    _start_or_fail(broker, "fresh single-node Kafka broker")
    try:
        yield broker
    finally:
        broker.stop()
