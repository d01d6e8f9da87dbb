"""Fleet-unique Snowflake worker IDs leased through the real broker (streams.kafka.leases).

Producers started together with default settings never mint the same ID; a killed
producer's worker ID is taken again only after its lease expired and rested; a
producer whose lease cannot be renewed stops minting with WorkerIdLeaseError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from streams.core.errors import WorkerIdLeaseError
from streams.core.ids import parse_id
from streams.core.ids.lease import LeaseTable, LeaseTerms, decode_lease_record
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.leases import WorkerIdLease
from streams.kafka.producer import RoutingProducer

ROOT = Path(__file__).resolve().parents[2]
FAST = LeaseTerms(lease_ms=2_000, reuse_delay_ms=1_000)

PRODUCER_SCRIPT = """
import sys
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer
bootstrap, topic, leases, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=4, topic=topic)])
# Default settings but the leases topic's name (one per test run): no worker ID is chosen here.
producer = RoutingProducer(router, {"bootstrap.servers": bootstrap}, id_kind="snowflake", id_leases_topic=leases)
print("worker", producer._lease.worker, flush=True)
for i in range(count):
    producer.send(f"user-{i % 997}", 1.0)
producer.close(60)
print("done", flush=True)
"""


def read_all(bootstrap: str, topic: str, partitions: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "leases-test", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, done = [], {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 120
    while len(done) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                out.append(msg)
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
    consumer.close()
    return out


def test_sixteen_producers_started_at_once_with_default_settings_mint_no_id_twice(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("ids", partitions=4)
    leases = f"leases-{topic}"
    per_process, processes = 6_500, 16
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", PRODUCER_SCRIPT, kafka_bootstrap, topic, leases,
                               str(per_process)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(processes)]
    workers = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        workers.append(int(out.split()[1]))
    assert len(set(workers)) == processes, f"worker IDs handed out twice: {sorted(workers)}"
    records = read_all(kafka_bootstrap, topic, 4)
    ids = [json.loads(m.value())["id"] for m in records]
    assert len(ids) == per_process * processes
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} repeated Snowflake IDs"
    assert {parse_id(int(i)).worker for i in ids} == set(workers)


def test_a_killed_producers_worker_id_is_taken_again_only_after_its_lease_expired_and_rested(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    leases = make_topic("leases-kill", config={"message.timestamp.type": "LogAppendTime"})
    script = (f"import sys, time\nfrom streams.kafka.leases import WorkerIdLease\n"
              f"from streams.core.ids.lease import LeaseTerms\n"
              f"lease = WorkerIdLease({{'bootstrap.servers': {kafka_bootstrap!r}}}, topic={leases!r}, "
              f"terms=LeaseTerms(lease_ms={FAST.lease_ms}, reuse_delay_ms={FAST.reuse_delay_ms}))\n"
              f"print(lease.acquire(), flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        worker = int(holder.stdout.readline())  # type: ignore[union-attr]
        rival = WorkerIdLease({"bootstrap.servers": kafka_bootstrap}, topic=leases, terms=FAST, worker=worker)
        with pytest.raises(WorkerIdLeaseError, match=f"snowflake_worker {worker} is leased by"):
            rival.acquire()
    finally:
        holder.kill()  # no release: the lease must run out by itself
        holder.wait()
    taker = WorkerIdLease({"bootstrap.servers": kafka_bootstrap}, topic=leases, terms=FAST, worker=worker)
    deadline = time.monotonic() + 60
    while True:
        try:
            assert taker.acquire() == worker
            break
        except WorkerIdLeaseError as exc:
            assert "is leased by" in str(exc) and time.monotonic() < deadline, exc
            taker = WorkerIdLease({"bootstrap.servers": kafka_bootstrap}, topic=leases, terms=FAST, worker=worker)
    try:
        # The oracle is the log itself: the taker's first accepted hold is stamped at least
        # lease + reuse delay after the killed holder's last hold.
        table = LeaseTable(FAST.reuse_delay_ms)
        log = [(decode_lease_record(m.value(), 1023), m.timestamp()[1]) for m in read_all(kafka_bootstrap, leases, 1)]
        killed = next(r.owner for r, _ in log if r.worker == worker)
        last_killed = max(ts for r, ts in log if r.owner == killed)
        accepted = [ts for r, ts in log if table.apply(r, ts) and r.owner == taker.owner]
        taken = accepted[0]
        assert killed != taker.owner
        assert taken >= last_killed + FAST.lease_ms + FAST.reuse_delay_ms
    finally:
        taker.close()


def test_a_producer_whose_lease_cannot_be_renewed_stops_minting(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    leases = make_topic("leases-refused", config={"message.timestamp.type": "LogAppendTime"})
    topic = make_topic("ids-refused", partitions=1)
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=1, topic=topic)])
    producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, id_kind="snowflake",
                               id_leases_topic=leases, lease_terms=FAST)
    producer.send("before", 1.0)
    # The cluster now refuses every lease record (too large for the topic): renewals fail.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, leases, incremental_configs=[
        ConfigEntry("max.message.bytes", "10", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    deadline = time.monotonic() + 30
    with pytest.raises(WorkerIdLeaseError, match="lapsed"):
        while time.monotonic() < deadline:
            producer.send("after", 1.0)
            producer.poll(0.01)
    assert producer.stats().sent >= 1
    producer.close(30)
