"""A worker whose stage 1 cannot write stops, and acknowledges nothing it could not make durable.

Stage 1 runs in its own thread (streams.worker.stage1); a write the broker refuses must
not leave a worker that looks alive while its events pile up unread. Here the stage-1
changelog is created beforehand with a record size limit no changelog entry fits in, so
the first flush fails.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from test_worker_buckets import SETTINGS, keys_covering_partitions, wait_for_topic  # noqa: E402
from worker_harness import Worker, worker_env  # noqa: E402

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer


def test_a_stage1_write_the_broker_refuses_stops_the_worker_with_nothing_committed(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    env, names = worker_env(kafka_bootstrap, **SETTINGS)
    app_id = env["STREAMS_APP_ID"]
    partitions = int(SETTINGS["partitions"])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    changelog = NewTopic(f"{app_id}-stage1-changelog", partitions, 1,
                         config={"cleanup.policy": "compact", "max.message.bytes": "64"})
    admin.create_topics([changelog])[changelog.topic].result(30)
    worker = Worker(env, names, tmp_path / "worker.log")
    worker.start()
    try:
        wait_for_topic(kafka_bootstrap, names.events)
        now = int(time.time() * 1000)
        router = Router(TimeBuckets("5s"), [RoutingMap(version=1, partitions=partitions, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        for key in keys_covering_partitions(router, now):
            producer.send(key, 1.0, ts_ms=now)
        assert producer.close().failed == 0
        deadline = time.monotonic() + 90
        while worker.alive() and time.monotonic() < deadline:
            time.sleep(0.5)  # waiting for another process to exit
        assert not worker.alive(), "the worker kept running without stage 1:\n" + worker.tail()
        assert worker.proc is not None and worker.proc.returncode != 0, worker.tail()
        log = worker.log.read_text(errors="replace")
        assert "stage 1 stopped" in log and "could not write to Kafka" in log and "too large" in log.lower(), log[-4000:]
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{app_id}-events"})
        try:
            committed = consumer.committed([TopicPartition(names.events, p) for p in range(partitions)], timeout=10)
        finally:
            consumer.close()
        assert all(tp.offset < 0 for tp in committed), committed  # nothing acknowledged
    finally:
        worker.stop()
