"""The Grafana dashboard queries only metrics a running worker and ``streams produce`` export.

``grafana/streams-dashboard.json`` is read as Grafana reads it; every ``streams_*``
name in its PromQL must be on the ``/metrics`` of a worker started with
``metrics_port`` (as users run it: ``STREAMS_METRICS_PORT``) or of ``streams produce
--metrics-port``. A renamed metric fails here, not on someone's dashboard.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kafka_local import free_port
from test_worker_buckets import SETTINGS
from worker_harness import running_worker

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "grafana" / "streams-dashboard.json"



def queries(panels: list[dict]) -> Iterator[str]:
    """Every PromQL expression of the dashboard's panels, rows' nested panels included."""
    for panel in panels:
        yield from queries(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield target["expr"]


def exported(text: str) -> set[str]:
    """The series names of a Prometheus exposition: samples, and declared families with no sample yet."""
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            names |= {family, f"{family}_total"} if kind == "counter" else {family}
    return names


def scrape(port: int, deadline_s: float, until: str = "") -> str:
    """GET /metrics on ``port``, retried until it answers (and holds ``until``) or ``deadline_s`` passes."""
    deadline = time.monotonic() + deadline_s
    text = ""
    while time.monotonic() < deadline:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if until in text:
                return text
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"/metrics on {port} did not answer with {until!r} within {deadline_s} s:\n{text[-2000:]}")


def partition_rate_total(text: str) -> float:
    """The sum of the ``streams_partition_rate`` samples in a /metrics text (0 without any)."""
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("streams_partition_rate{"))


def test_every_metric_the_grafana_dashboard_queries_is_exported_by_a_running_worker_or_producer(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name for expr in queries(dashboard["panels"]) for name in re.findall(r"\bstreams_[a-z0-9_]+", expr)}
    assert {"streams_partition_balance", "streams_directory_decisions_total", "streams_partition_rate",
            "streams_consumer_backlog", "streams_late_events", "streams_dead_letters",
            "streams_bucket_close_lag_seconds"} <= used, "the dashboard shows what issue 30 asks for"

    worker_port, producer_port = free_port(), free_port()
    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS, metrics_port=worker_port) as worker:
        router = Router(TimeBuckets(SETTINGS["bucket_width"], grace=SETTINGS["grace"]),
                        [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=worker.names.events)])
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        deadline = time.monotonic() + 90
        while worker.names.events not in admin.list_topics(timeout=10).topics:  # the worker creates its topics
            assert time.monotonic() < deadline and worker.alive(), worker.tail()
            time.sleep(0.5)
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        for i in range(200):
            producer.send(f"k{i % 20}", 1.0)
        assert producer.close(30).failed == 0
        # The rates come from the sketch's window: wait until a tick has counted the events, not just started.
        deadline = time.monotonic() + 90
        while True:
            worker_text = scrape(worker_port, 90, until="streams_partition_rate{")
            if partition_rate_total(worker_text) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polling the worker's /metrics until its next tick
        assert worker.alive(), worker.tail()

        clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
        produce = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "produce", "--bootstrap-server", kafka_bootstrap, "--events-topic",
             worker.names.events, "--partitions", str(SETTINGS["partitions"]), "--duration", "60s", "--rate", "20",
             "--no-follow", "--metrics-port", str(producer_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean, cwd=ROOT)
        try:
            producer_text = scrape(producer_port, 60, until="streams_producer_sent ")
        finally:
            produce.terminate()
            produce.wait(30)

    missing = used - exported(worker_text) - exported(producer_text)
    assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"
    assert partition_rate_total(worker_text) > 0, "partition rates are fed from the ticks"
    assert re.search(r"^streams_consumer_backlog \d", worker_text, re.M)
