"""Prometheus metrics of the worker and the producer (prometheus-client).

Each :class:`WorkerMetrics` / :class:`ProducerMetrics` owns its own
``CollectorRegistry``, so several can live in one process (tests) and nothing is
registered at import time. ``serve(port)`` exposes ``/metrics`` on that port.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["WorkerMetrics", "ProducerMetrics"]


class WorkerMetrics:
    """Events in, records out per topic role, the key directory and balance, watermark and close lag."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("streams_worker_events", "records consumed from the events topic", registry=r)
        self.outputs = Counter("streams_worker_outputs", "records produced, by topic role", ["role"], registry=r)
        self.hot_keys = Gauge("streams_directory_keys", "keys the directory places (moved or split)", registry=r)
        self.split_factor = Gauge("streams_key_partitions", "partitions a placed key is spread over (1: moved)",
                                  ["key"], registry=r)
        self.decisions = Counter("streams_directory_decisions", "directory changes published, by kind", ["kind"],
                                 registry=r)
        self.balance = Gauge("streams_partition_balance", "max/mean of the measured partition rates", registry=r)
        self.late = Gauge("streams_late_events", "events routed to the late-events topic", registry=r)
        self.dead = Gauge("streams_dead_letters", "events dead-lettered", registry=r)
        self.collisions = Gauge("streams_event_id_collisions",
                                "distinct events folded although another event of their bucket and partition "
                                "had the same ID (counted, never dropped)", registry=r)
        self.duplicates = Gauge("streams_duplicate_events", "resent or re-read events folded once", registry=r)
        self.watermark_lag = Gauge("streams_watermark_lag_seconds", "wall clock minus the low watermark", registry=r)
        self.open_buckets = Gauge("streams_open_buckets", "buckets holding stage-1 state", registry=r)
        self.close_lag = Gauge("streams_bucket_close_lag_seconds",
                               "wall clock at close minus the bucket's close time, last close", registry=r)
        self.rejected = Counter("streams_rejected_sketch_summaries", "malformed sketch summaries", registry=r)
        self.partition_rate = Gauge("streams_partition_rate",
                                    "events/s read from each events partition this worker owns, over the hot-key "
                                    "sketch's window", ["partition"], registry=r)
        self.backlog = Gauge("streams_consumer_backlog",
                             "records of the events partitions this worker owns not read yet (end offset minus "
                             "position, summed)", registry=r)
        self._split_keys: set[str] = set()
        self._rated: set[str] = set()
        self._serving: int | None = None

    def serve(self, port: int) -> None:
        """Expose ``/metrics`` on ``port`` (all interfaces) from a daemon thread; once per process."""
        if self._serving is None:
            start_http_server(port, registry=self.registry)
            self._serving = port

    def event_in(self, n: int = 1) -> None:
        """Count ``n`` consumed records (the worker counts per flush, not per record)."""
        self.events.inc(n)

    def sent(self, role: str) -> None:
        """Count one produced record of ``role``."""
        self.outputs.labels(role).inc()

    def rejected_summary(self) -> None:
        """Count one rejected sketch summary."""
        self.rejected.inc()

    def observe_balance(self, max_over_mean: float) -> None:
        """Record the measured partition balance (max/mean of partition rates)."""
        self.balance.set(max_over_mean)

    def decision(self, decision: Any) -> None:
        """Track a directory change (partitions per placed key, placed-key count)."""
        self.decisions.labels(decision.kind).inc()
        if decision.kind == "placed":
            self.split_factor.labels(decision.key[:100]).set(len(decision.partitions))
            self._split_keys.add(decision.key[:100])
        elif decision.key[:100] in self._split_keys:
            self.split_factor.remove(decision.key[:100])
            self._split_keys.discard(decision.key[:100])
        self.hot_keys.set(len(self._split_keys))

    def observe_tick(self, processor: Any, result: Any, decider: Any) -> None:
        """Refresh the gauges after a tick of ``processor``."""
        counts = processor.counts()
        self.late.set(counts.late + counts.too_old)
        self.dead.set(counts.dead_lettered)
        self.collisions.set(counts.collisions)
        self.duplicates.set(counts.duplicates)
        self.open_buckets.set(processor.open_buckets())
        now_ms = time.time() * 1000
        if result.watermark_ms is not None:
            self.watermark_lag.set(max(0.0, (now_ms - result.watermark_ms) / 1000))
        summary = result.summary  # the sketch summary this tick published: partition counts and backlog
        rated = {str(p): count / summary.span_s for p, count in summary.partition_counts}
        for gone in self._rated - rated.keys():  # partitions handed to another worker
            self.partition_rate.remove(gone)
        for partition, rate in rated.items():
            self.partition_rate.labels(partition).set(rate)
        self._rated = set(rated)
        self.backlog.set(summary.backlog)
        for output in result.outputs:
            if output.role == "bucket_closed":
                close_ms = output.record["bucket_end_ms"] + processor.buckets.grace_ms
                self.close_lag.set(max(0.0, (output.record["closed_at_ms"] - close_ms) / 1000))


class ProducerMetrics:
    """A producer's delivery counters, its follower's rejected hot-key notices and routing maps, as gauges.

    Refreshed on ``update``.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sent = Gauge("streams_producer_sent", "records handed to librdkafka", registry=r)
        self.delivered = Gauge("streams_producer_delivered", "records acknowledged by the broker", registry=r)
        self.failed = Gauge("streams_producer_failed", "records whose delivery failed", registry=r)
        self.split_keys = Gauge("streams_producer_directory_keys", "keys the producer's directory places now",
                                registry=r)
        self.rejected_notices = Gauge("streams_producer_rejected_notices",
                                      "hot-key notices the producer refused, by reason", ["reason"], registry=r)
        self.map_version = Gauge("streams_producer_routing_map_version", "the newest routing map version installed",
                                 registry=r)
        self.applied_maps = Gauge("streams_producer_applied_maps",
                                  "routing-map records the producer accepted from the routing-maps topic", registry=r)
        self.rejected_maps = Gauge("streams_producer_rejected_maps",
                                   "routing-map records the producer refused, by reason", ["reason"], registry=r)

    def serve(self, port: int) -> None:
        """Expose ``/metrics`` on ``port`` from a daemon thread."""
        start_http_server(port, registry=self.registry)

    def update(self, producer: Any) -> None:
        """Copy a RoutingProducer's counters into the gauges."""
        stats = producer.stats()
        self.sent.set(stats.sent)
        self.delivered.set(stats.delivered)
        self.failed.set(stats.failed)
        self.split_keys.set(len(producer.router.directory))
        self.map_version.set(producer.router.current.version)
        if producer.follower is not None:
            for reason, count in producer.follower.rejections.items():
                self.rejected_notices.labels(reason).set(count)
        if producer.map_follower is not None:
            self.applied_maps.set(producer.map_follower.applied)
            for reason, count in producer.map_follower.rejections.items():
                self.rejected_maps.labels(reason).set(count)
