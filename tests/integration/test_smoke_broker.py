"""The foundation works end to end: confluent-kafka, aiokafka and faust on the real broker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer

APPS = Path(__file__).parent / "apps"


def _consume_with_aiokafka(bootstrap: str, topic: str, expected: int, deadline_s: float) -> list[tuple[bytes, bytes, int]]:
    async def run() -> list[tuple[bytes, bytes, int]]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"smoke-{uuid.uuid4().hex[:8]}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[tuple[bytes, bytes, int]] = []
        try:
            end = time.monotonic() + deadline_s
            while len(got) < expected and time.monotonic() < end:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    got.extend((r.key, r.value, r.partition) for r in records)
            # One more fetch after the expected count: duplicates would show up here.
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend((r.key, r.value, r.partition) for r in records)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def test_confluent_producer_and_aiokafka_consumer_exchange_10000_keyed_messages_exactly_once(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("smoke", partitions=6)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True,
                         "partitioner": "murmur2_random", "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(10_000)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []

    got = _consume_with_aiokafka(kafka_bootstrap, topic, len(sent), deadline_s=60)

    counts = Counter(k for k, _, _ in got)
    assert len(got) == len(sent), f"expected {len(sent)} records, consumed {len(got)}"
    assert [k for k, n in counts.items() if n > 1] == []
    assert {k: v for k, v, _ in got} == sent
    assert len({p for _, _, p in got}) == 6, "murmur2 should spread 10,000 keys over all 6 partitions"


def test_a_faust_agent_forwards_every_record_to_its_output_topic(
        kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path) -> None:
    src = make_topic("fwd-src", partitions=3)
    dst = make_topic("fwd-dst", partitions=3)
    env = dict(os.environ, KAFKA_BOOTSTRAP=kafka_bootstrap, SRC=src, DST=dst, APP_ID=f"fwd-{uuid.uuid4().hex[:8]}",
               PYTHONPATH=str(APPS))
    faust_bin = Path(sys.executable).parent / "faust"
    log = tmp_path / "worker.log"
    worker = subprocess.Popen([str(faust_bin), "-A", "forward_app", "worker", "-l", "warn", "--without-web"],
                              env=env, cwd=APPS, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        sent = {f"k{i}".encode(): f"v{i}".encode() for i in range(2_000)}
        for key, value in sent.items():
            producer.produce(src, key=key, value=value)
        assert producer.flush(30) == 0

        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"chk-{uuid.uuid4().hex[:8]}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([dst])
        got: dict[bytes, bytes] = {}
        end = time.monotonic() + 90
        try:
            while len(got) < len(sent) and time.monotonic() < end and worker.poll() is None:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got[msg.key()] = msg.value()
        finally:
            consumer.close()
        assert worker.poll() is None, "the faust worker died:\n" + log.read_text(errors="replace")[-3000:]
        assert got == sent
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
