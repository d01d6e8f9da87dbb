"""A three-node cluster: the project's topics are replicated, and a leader's crash loses and doubles nothing."""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from confluent_kafka.admin import AdminClient
from test_cli_monitor_replay import read_all

from streams.core.config import TopicNames
from streams.core.ids import uuid7
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import (
    TopicSpec,
    describe_topics,
    ensure_topics,
    project_topic_specs,
)
from streams.kafka.producer import RoutingProducer

EVENTS = 50_000
PARTITIONS = 6
KILL_AFTER = 15_000
PACE_EVERY = 1_000  # events per pacing step: ~10k events/s, so the kill lands mid-run


def wait_for_new_leader(cluster: Any, topic: str, partition: int, old: int, timeout_s: float = 60) -> int:
    """Poll metadata until ``partition`` is led by a node other than ``old``; return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = cluster.leader_of(topic, partition)
        if leader not in (old, -1):
            return int(leader)
        time.sleep(0.2)  # metadata polling interval while the controller fences the dead node
    raise AssertionError(f"{topic}[{partition}] still led by {old} (or leaderless) after {timeout_s} s")


def wait_for_full_isr(config: dict[str, Any], topic: str, replicas: int, timeout_s: float = 90) -> None:
    """Poll metadata until every partition of ``topic`` has ``replicas`` in-sync replicas again."""
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while True:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        if all(len(p.isrs) == replicas for p in parts):
            return
        assert time.monotonic() < deadline, f"{topic}: ISRs {[p.isrs for p in parts]} after {timeout_s} s"
        time.sleep(0.2)  # metadata polling interval while the restarted node catches up


def test_project_topics_get_three_replicas_and_min_insync_two_on_three_nodes_unless_set(kafka_cluster: Any) -> None:
    config = {"bootstrap.servers": kafka_cluster.bootstrap}
    tag = uuid.uuid4().hex[:8]
    names = TopicNames(**{f: f"c{tag}.{getattr(TopicNames(), f).split('.', 1)[1]}"
                          for f in TopicNames.__dataclass_fields__})
    explicit = TopicSpec(f"c{tag}.explicit", 2, {"min.insync.replicas": "1"}, replication_factor=2)
    ensure_topics(config, (*project_topic_specs(names, partitions=3), explicit), timeout_s=30)

    infos = describe_topics(config, [getattr(names, f) for f in TopicNames.__dataclass_fields__] + [explicit.name])
    by_name = {i.name: i for i in infos}
    for role in TopicNames.__dataclass_fields__:
        info = by_name[getattr(names, role)]
        assert (info.replication_factor, info.overrides.get("min.insync.replicas")) == (3, "2"), role
    assert (by_name[explicit.name].replication_factor, by_name[explicit.name].overrides["min.insync.replicas"]) \
        == (2, "1"), "what the spec sets explicitly is kept"


def test_killing_a_partition_leader_mid_produce_loses_and_duplicates_no_acknowledged_event(
        kafka_cluster: Any) -> None:
    config = {"bootstrap.servers": kafka_cluster.bootstrap}
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    ensure_topics(config, [TopicSpec(topic, PARTITIONS)], timeout_s=30)
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=topic)])
    victim = kafka_cluster.leader_of(topic, 0)
    sent: list[str] = []
    began = time.monotonic()
    try:
        producer = RoutingProducer(router, config, producer_config={"acks": "all", "enable.idempotence": True})
        for i in range(EVENTS):
            event_id = str(uuid7())
            producer.send(f"device-{i % 997}", float(i), event_id=event_id)
            sent.append(event_id)
            if i == KILL_AFTER:
                kafka_cluster.kill(victim)
                killed_at = len(sent)
            if i % PACE_EVERY == PACE_EVERY - 1:
                producer.poll(0.1)  # pacing (serves delivery reports), so production spans the failover
        new_leader = wait_for_new_leader(kafka_cluster, topic, 0, victim)
        stats = producer.close(timeout=180)
        took = time.monotonic() - began
    finally:
        if not kafka_cluster.node(victim).running:
            kafka_cluster.restart(victim)
    print(f"\n[failover] node {victim} (leader of {topic}[0]) SIGKILLed after {killed_at:,} of {EVENTS:,} sends; "
          f"new leader {new_leader}; {stats.delivered:,} delivered, {stats.failed} failed in {took:.1f} s")
    assert (stats.sent, stats.delivered, stats.failed) == (EVENTS, EVENTS, 0), stats.last_error

    codec = JsonCodec("event")
    ids = Counter(codec.decode(m.value())["id"] for m in read_all(kafka_cluster.bootstrap, topic))
    lost = set(sent) - set(ids)
    duplicated = {i: n for i, n in ids.items() if n > 1}
    print(f"[failover] read back {sum(ids.values()):,} records: {len(lost)} lost, {len(duplicated)} duplicated")
    assert not lost, f"{len(lost)} acknowledged events lost, e.g. {sorted(lost)[:3]}"
    assert not duplicated, f"{len(duplicated)} events duplicated, e.g. {list(duplicated.items())[:3]}"
    assert set(ids) == set(sent)
    wait_for_full_isr(config, topic, 3)  # the restarted node caught up: the cluster is whole again
