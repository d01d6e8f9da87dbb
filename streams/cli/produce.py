"""``streams produce``: a load generator through :class:`~streams.kafka.producer.RoutingProducer`.

Keys come from the same seeded distributions as ``streams simulate``
(:func:`streams.core.simulate.iter_keys`). Nothing is created implicitly: the topic must
exist (checked with a bounded metadata request, never by a request that would let
the broker auto-create it) unless ``--create-topic`` is given.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    duration_s,
    kafka_client_config,
    non_negative_float,
    positive_int,
    print_fields,
    print_json,
    print_table,
)
from streams.cli.simulate import add_workload_arguments, workload_from
from streams.core.config import ProducerSettings, TopicNames, load
from streams.core.errors import ConfigError, DeliveryError, RoutingMapError, UndeliveredError
from streams.core.routing.placement import HASHES, PLACEMENTS
from streams.core.routing.router import BUCKET_PLACEHOLDER, Router, RoutingMap
from streams.core.simulate import iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import (
    TopicNotFoundError,
    TopicSpec,
    ensure_topics,
    topic_partitions,
)
from streams.kafka.maps import read_maps
from streams.kafka.metrics import ProducerMetrics
from streams.kafka.producer import DeliveryStats, RoutingProducer

NAME = "produce"
DEFAULT_COUNT = 10_000
VALUE_FIELDS = ("one", "uniform", "none")
_PROGRESS_EVERY = 500
_MAX_IDLE_S = 0.1

_EPILOG = """\
examples:
  streams produce --topic streams.events --count 100000
  streams produce --topic load-test --create-topic --partitions 12 --duration 60s --rate 2000
  streams produce --distribution tenants --elephants 2 --elephant-share 0.5 --hot-keys-topic streams.hot-keys
  streams produce --topic streams.events --count 5000 --serializer avro --id-kind snowflake --json

The topic defaults to the events topic of the configuration ($STREAMS_EVENTS or
[topics] events in $STREAMS_CONFIG, else streams.events). --partitions defaults to
the topic's own partition count. With neither --count nor --duration, sends
10000 events. Ctrl-C stops sending, flushes, and prints the summary.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``produce`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="send generated events through the routing producer (a load generator)",
        description="Generate keyed events from a seeded distribution and send them through the routing "
                    "producer: time-ordered IDs, time buckets, explicit partitions, hot-key splits.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_kafka_arguments(parser)
    target = parser.add_argument_group("target")
    target.add_argument("--topic", help="topic, or a template such as events.{bucket} (default: the events topic)")
    target.add_argument("--create-topic", action="store_true",
                        help="create the topic with --partitions first if it does not exist")
    target.add_argument("--partitions", type=positive_int, metavar="N",
                        help="partition count of the routing map (default: the topic's; with --create-topic, 12)")
    target.add_argument("--placement", choices=PLACEMENTS, help="placement (default: mod)")
    target.add_argument("--hash", choices=HASHES, help="hash (default: murmur2)")
    target.add_argument("--bucket-width", metavar="WIDTH", help="time-bucket width, e.g. 1m, 5m, 1h (default: 1m)")
    add_workload_arguments(parser)
    amount = parser.add_argument_group("how much")
    which = amount.add_mutually_exclusive_group()
    which.add_argument("--count", type=positive_int, metavar="N", help=f"events to send (default: {DEFAULT_COUNT})")
    which.add_argument("--duration", type=duration_s, metavar="DURATION", help="send for this long, e.g. 30s or 5m")
    amount.add_argument("--rate", type=non_negative_float, default=0.0, metavar="R",
                        help="target events/s; 0 = as fast as possible (default: 0)")
    events = parser.add_argument_group("events")
    events.add_argument("--id-kind", choices=("uuid7", "snowflake"), help="event IDs (default: uuid7)")
    events.add_argument("--serializer", choices=("json", "avro"), help="payload format (default: json)")
    events.add_argument("--value-field", choices=VALUE_FIELDS, default="one",
                        help="each event's numeric value: 1.0, uniform in [0, 100), or null (default: one)")
    events.add_argument("--hot-keys-topic", metavar="TOPIC",
                        help="follow hot-key notices on this compacted topic and split hot keys")
    events.add_argument("--routing-maps-topic", metavar="TOPIC",
                        help="follow the routing-map history on this compacted topic (e.g. streams.routing-maps): "
                             "read it before the first event, then apply each new map from its first bucket on")
    parser.add_argument("--flush-timeout", type=duration_s, default=30.0, metavar="DURATION",
                        help="how long to wait for outstanding deliveries at the end (default: 30s)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--metrics-port", type=positive_int, metavar="PORT",
                        help="expose the producer's counters for Prometheus on http://0.0.0.0:PORT/metrics")
    return parser


@dataclass(frozen=True)
class ProduceSummary:
    """What one run sent and what the broker acknowledged; ``per_partition`` is (topic, partition, delivered)."""

    topic: str
    partitions: int
    placement: str
    hash: str
    workload: str
    sent: int
    delivered: int
    failed: int
    elapsed_s: float
    interrupted: bool
    last_error: str | None
    per_partition: tuple[tuple[str, int, int], ...]

    @property
    def events_per_s(self) -> float:
        """Delivered events per second of the whole run (flush included)."""
        return self.delivered / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "topic": self.topic, "partitions": self.partitions, "placement": self.placement, "hash": self.hash,
            "workload": self.workload, "sent": self.sent, "delivered": self.delivered, "failed": self.failed,
            "elapsed_s": self.elapsed_s, "events_per_s": self.events_per_s, "interrupted": self.interrupted,
            "last_error": self.last_error,
            "per_partition": [{"topic": t, "partition": p, "delivered": n} for t, p, n in self.per_partition],
        }


def run(args: argparse.Namespace) -> int:
    """Produce, print the summary; raises StreamsError for a missing topic, an unreachable broker, bad flags."""
    config = kafka_client_config(args)
    topic = args.topic or load(TopicNames).events
    overrides = {name: getattr(args, name) for name in ("partitions", "placement", "hash", "bucket_width",
                                                        "serializer", "id_kind") if getattr(args, name) is not None}
    settings = load(ProducerSettings, **overrides)
    workload = workload_from(args)
    buckets = TimeBuckets(settings.bucket_width, settings.grace)
    partitions = _partitions(args, config, topic, settings.partitions)
    first = RoutingMap(version=1, partitions=partitions, topic=topic, placement=settings.placement,
                       hash=settings.hash)
    # Following a routing-map history: start from the topic's own first map (it may predate a grown topic).
    history = read_maps(config, args.routing_maps_topic, timeout_s=args.timeout,
                        bucket_width_ms=buckets.width_ms) if args.routing_maps_topic else []
    router = Router(buckets, history[:1] or [first])
    producer = RoutingProducer(router, config, serializer=settings.serializer, id_kind=settings.id_kind,
                               snowflake_worker=settings.snowflake_worker, hot_keys_topic=args.hot_keys_topic,
                               routing_maps_topic=args.routing_maps_topic)
    count = args.count if args.count is not None or args.duration is not None else DEFAULT_COUNT
    observe = None
    if args.metrics_port:
        metrics = ProducerMetrics()
        metrics.serve(args.metrics_port)
        observe = lambda: metrics.update(producer)  # noqa: E731 - a one-line callback
    started = time.monotonic()
    with producer:
        sent, interrupted = _send(producer, iter_keys(workload), _values(args.value_field, workload.seed),
                                  count=count, duration_s=args.duration, rate=args.rate, observe=observe)
        try:
            stats = producer.close(timeout=args.flush_timeout)
        except UndeliveredError:  # print what was and was not delivered, then raise below
            stats = producer.stats()
    summary = _summary(stats, topic, partitions, settings, workload.describe(), time.monotonic() - started,
                       interrupted, template=BUCKET_PLACEHOLDER in topic)
    if args.json:
        print_json(summary.to_record())
    else:
        _print_summary(summary)
    if summary.delivered < summary.sent:
        raise DeliveryError(f"{summary.sent - summary.delivered} of {summary.sent} events not delivered: "
                            f"{summary.failed} failed, the rest still in flight after {args.flush_timeout} s "
                            f"(last error: {summary.last_error})")
    return 130 if interrupted else 0


def _partitions(args: argparse.Namespace, config: dict[str, Any], topic: str, default: int) -> int:
    """The routing map's partition count; creates the topic first with ``--create-topic``."""
    template = BUCKET_PLACEHOLDER in topic
    if args.create_topic:
        if template:
            raise ConfigError(f"--create-topic cannot create the template {topic!r}: "
                              "create its bucket topics with 'streams topics roll'")
        ensure_topics(config, [TopicSpec(topic, default, {"cleanup.policy": "delete"})], timeout_s=args.timeout)
    if template:
        return default  # one topic per bucket: RoutingProducer checks each on first use
    try:
        actual = topic_partitions(config, topic, timeout_s=args.timeout)
    except TopicNotFoundError as exc:
        raise TopicNotFoundError(f"{exc}; create it with --create-topic or 'streams topics create'") from None
    if args.partitions is not None and args.partitions != actual:
        raise RoutingMapError(f"topic {topic!r} has {actual} partitions, not --partitions {args.partitions}")
    return actual


def _values(kind: str, seed: int) -> Callable[[], float | None]:
    if kind == "one":
        return lambda: 1.0
    if kind == "none":
        return lambda: None
    rng = random.Random(f"{seed}-values")
    return lambda: rng.uniform(0.0, 100.0)


def _send(producer: RoutingProducer, keys: Iterator[str], value: Callable[[], float | None], *,
          count: int | None, duration_s: float | None, rate: float,
          observe: Callable[[], None] | None = None) -> tuple[int, bool]:
    """Send until ``count`` events or ``duration_s`` seconds; paced to ``rate`` events/s (0: unpaced).

    Pacing never spins: when ahead of schedule it blocks in ``producer.poll`` (which
    serves delivery reports meanwhile). ``observe`` runs with each progress update
    (metrics). Returns (events sent, interrupted by Ctrl-C).
    """
    limit = math.inf if count is None else count
    interval = 1.0 / rate if rate > 0 else 0.0
    send, clock, poll = producer.send, time.monotonic, producer.poll
    sent = 0
    with _Progress(count, duration_s, rate) as progress:
        start = clock()
        deadline = math.inf if duration_s is None else start + duration_s
        try:
            while sent < limit:
                now = clock()
                if now >= deadline:
                    break
                if interval:
                    due = start + sent * interval
                    if due > now:
                        poll(min(due - now, deadline - now, _MAX_IDLE_S))
                        progress.update(sent)
                        continue
                send(next(keys), value())
                sent += 1
                if not sent % _PROGRESS_EVERY:
                    progress.update(sent)
                    if observe is not None:
                        observe()
        except KeyboardInterrupt:
            return sent, True
        finally:
            progress.update(sent)
    return sent, False


class _Progress:
    """A rich progress bar with the send rate on stderr, when stderr is a terminal; else nothing."""

    def __init__(self, count: int | None, duration_s: float | None, rate: float) -> None:
        self._bar: Any = None
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        total = count if count is not None else (rate * duration_s if rate and duration_s else None)
        self._bar = Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                             console=Console(stderr=True), transient=True)
        self._task = self._bar.add_task("send", total=total, rate="")
        self._start = time.monotonic()

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, sent: int) -> None:
        if self._bar is None:
            return
        elapsed = time.monotonic() - self._start
        rate = f"{sent / elapsed:,.0f} events/s" if elapsed > 0 else ""
        self._bar.update(self._task, completed=sent, rate=rate)


def _summary(stats: DeliveryStats, topic: str, partitions: int, settings: ProducerSettings, workload: str,
             elapsed_s: float, interrupted: bool, *, template: bool) -> ProduceSummary:
    counts = dict(stats.per_partition)
    if not template:  # list every partition, the idle ones too
        for p in range(partitions):
            counts.setdefault((topic, p), 0)
    rows = tuple((t, p, n) for (t, p), n in sorted(counts.items()))
    return ProduceSummary(topic, partitions, settings.placement, settings.hash, workload, stats.sent,
                          stats.delivered, stats.failed, elapsed_s, interrupted, stats.last_error, rows)


def _print_summary(s: ProduceSummary) -> None:
    print_fields("produced" + (" (interrupted)" if s.interrupted else ""), [
        ("topic", s.topic),
        ("routing", f"{s.partitions} partitions, {s.placement} + {s.hash}"),
        ("keys", s.workload),
        ("sent", s.sent),
        ("delivered", s.delivered),
        ("failed", s.failed),
        ("elapsed", f"{s.elapsed_s:.2f} s"),
        ("rate", f"{s.events_per_s:,.0f} events/s"),
    ] + ([("last error", s.last_error)] if s.last_error else []))
    several_topics = len({t for t, _, _ in s.per_partition}) > 1
    if several_topics:
        print_table("delivered per partition", ["topic", "partition", "delivered"], s.per_partition)
    else:
        print_table("delivered per partition", ["partition", "delivered"], [(p, n) for _, p, n in s.per_partition])
