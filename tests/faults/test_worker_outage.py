"""A broker outage under load is waited out (issue 26): the worker stays up, every aggregate is exact, the log stays short.

The single broker of the session is stopped for 60 s while a producer keeps sending
(its records wait in librdkafka) and restarted; on the three-node cluster every broker
is restarted, one after the other. The worker must neither stop nor lose or double an
event: every (bucket, key) aggregate equals the oracle, nothing is late, and the
worker's log gains a few dozen lines, not thousands of librdkafka's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from test_worker_buckets import SETTINGS, wait_for_topic  # noqa: E402
from test_worker_faults import Oracle, assert_exact, assert_nothing_late_or_dead, send_sentinels, wait_until  # noqa: E402
from worker_harness import TopicReader, running_worker  # noqa: E402

from streams.core.aggregate import Stats
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import group_progress
from streams.kafka.producer import RoutingProducer

# The idle rule stays on (3 s): a worker that waited for the cluster must not take its own silence for a
# quiet stream. The decider is off: its directory lines would only lengthen the log being measured.
OUTAGE_SETTINGS = dict(SETTINGS, balance_enabled="false")
#: Lines the worker may log for an outage and its end (they are one per state change and client kind).
MAX_OUTAGE_LINES = 40


class Load:
    """A producer thread sending ``rate`` events/s stamped with the wall clock, into ``oracle``, until stopped."""

    def __init__(self, producer: RoutingProducer, buckets: TimeBuckets, rate: int = 300) -> None:
        self.producer, self.buckets, self.rate = producer, buckets, rate
        self.oracle: Oracle = defaultdict(Stats.empty)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for _ in range(self.rate // 10):
                ts = int(time.time() * 1000)
                key, value = f"k{i % 40}", float(i % 97)
                self.producer.send(key, value, ts_ms=ts)
                self.oracle[(self.buckets.bucket_of(ts).label, key)].add(value)
                i += 1
            self.sent = i
            self.producer.poll(0)
            self._stop.wait(0.1)  # the pacing of the load, not a synchronisation

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)


def until_folded(worker: Any, events: int, timeout_s: float = 60) -> None:
    """Wait until stage 1 has made at least ``events`` records durable (its committed offsets say so)."""
    group = f"{worker.env['STREAMS_APP_ID']}-events"
    client = {"bootstrap.servers": worker.env["STREAMS_BOOTSTRAP_SERVERS"]}

    def folded() -> bool:
        try:
            parts = group_progress(client, group, [worker.names.events]).get(worker.names.events, ())
            return sum(p.committed or 0 for p in parts) >= events
        except Exception:  # noqa: BLE001 - the group may not have committed yet
            return False
    wait_until(folded, timeout_s, f"stage 1 folded {events} events")


def run_through(bootstrap: str, tmp_path: Path, disrupt: Any) -> None:
    """A worker under load; ``disrupt()`` runs mid-stream; then every aggregate must be exact."""
    buckets = TimeBuckets("5s", grace="1s")
    with running_worker(bootstrap, tmp_path, **OUTAGE_SETTINGS) as worker:
        names = worker.names
        wait_for_topic(bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": bootstrap})
        with Load(producer, buckets) as load:
            until_folded(worker, 1_000)
            lines_before = len(worker.log.read_text(errors="replace").splitlines())
            disrupt()
            until_folded(worker, load.sent, 120)  # the backlog of the outage is folded
        lines = worker.log.read_text(errors="replace").splitlines()[lines_before:]
        assert worker.alive(), worker.tail()
        assert len(lines) <= MAX_OUTAGE_LINES, "\n".join(lines[:80])
        send_sentinels(producer, router, int(time.time() * 1000) + 8_000)
        assert producer.close(120).failed == 0
        aggregates = TopicReader(bootstrap, names.aggregates, "aggregate")
        assert_exact(aggregates, load.oracle, 120, worker)
        aggregates.close()
        assert_nothing_late_or_dead(bootstrap, names, "the outage")


def test_a_sixty_second_outage_of_the_only_broker_is_waited_out_exactly_and_quietly(
        local_kafka: Any, tmp_path: Path) -> None:
    def outage() -> None:
        local_kafka.terminate()
        local_kafka.wait_or_kill(60)
        time.sleep(60)  # the outage itself: the broker stays down this long
        local_kafka.launch()
        local_kafka.wait_ready(time.monotonic())

    run_through(local_kafka.bootstrap, tmp_path, outage)


def test_every_broker_of_three_restarted_one_by_one_is_waited_out_exactly_and_quietly(
        kafka_cluster: Any, tmp_path: Path) -> None:
    def rolling() -> None:
        for node in (1, 2, 3):
            kafka_cluster.kill(node)
            time.sleep(5)  # each broker stays down this long before its restart
            kafka_cluster.restart(node)

    run_through(kafka_cluster.bootstrap, tmp_path, rolling)


def test_an_outage_longer_than_broker_outage_timeout_stops_the_worker_with_one_clear_error(
        local_kafka: Any, tmp_path: Path) -> None:
    buckets = TimeBuckets("5s", grace="1s")
    settings = dict(OUTAGE_SETTINGS, broker_outage_timeout="10s")
    with running_worker(local_kafka.bootstrap, tmp_path, **settings) as worker:
        wait_for_topic(local_kafka.bootstrap, worker.names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=worker.names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": local_kafka.bootstrap})
        for i in range(200):
            producer.send(f"k{i % 20}", 1.0)
        assert producer.close(30).failed == 0
        until_folded(worker, 200)
        lines_before = len(worker.log.read_text(errors="replace").splitlines())
        local_kafka.terminate()
        local_kafka.wait_or_kill(60)
        stopped_at = time.monotonic()
        try:
            wait_until(lambda: not worker.alive(), 120, "the worker stopped after its outage timeout")
            waited = time.monotonic() - stopped_at
        finally:
            local_kafka.launch()
            local_kafka.wait_ready(time.monotonic())
        assert worker.proc is not None and worker.proc.returncode != 0, "a supervisor must see a failure"
        assert waited >= 10, f"it stopped after {waited:.1f} s, before its 10 s timeout"
        lines = worker.log.read_text(errors="replace").splitlines()[lines_before:]
        stops = [line for line in lines if "could not write to Kafka" in line]
        assert stops and "after 10 s (broker_outage_timeout)" in stops[0], "\n".join(lines[-60:])
        traceback_at = next((i for i, line in enumerate(lines) if line.startswith("Traceback")), None)
        assert traceback_at is None, "an outage is not a bug: no traceback\n" + "\n".join(
            lines[max(0, (traceback_at or 0) - 5):(traceback_at or 0) + 40])
        print(f"\n[outage] the worker stopped {waited:.1f} s into the outage; {len(lines)} log lines; "
              f"first error: {stops[0][-160:]}")
