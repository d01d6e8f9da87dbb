"""``streams produce``: a load generator through :class:`~streams.kafka.producer.RoutingProducer`.

Keys come from the same seeded distributions as ``streams simulate``
(:func:`streams.core.simulate.iter_keys`). Nothing is created implicitly: the topic must
exist (checked with a bounded metadata request, never by a request that would let
the broker auto-create it) unless ``--create-topic`` is given.

It follows the fleet by default: the key directory on the hot-keys topic (live) and
the routing-map history on the routing-maps topic (when that topic exists and its
maps are for this topic). ``--no-follow`` opts out; a producer that ignores a
directory that places keys says so once on stderr.

The summary counts acknowledged records: ``delivered`` and the per-partition table
are what the broker acknowledged, ``failed`` what it refused or librdkafka gave up
on, ``pending`` what had no acknowledgement when the flush timed out (given up then:
some may still have been written). Without a terminal on stderr, a progress line is
printed there every ``--progress-interval`` (sending and flushing alike).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import threading
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
from streams.cli.options import BoolAction, add_setting_flags, flag_values, resolve_settings
from streams.cli.simulate import add_workload_arguments, workload_from
from streams.core.config import ProducerSettings, TopicNames
from streams.core.errors import ConfigError, DeliveryError, RoutingMapError, UndeliveredError
from streams.core.routing.router import BUCKET_PLACEHOLDER, Router, RoutingMap
from streams.core.simulate import iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import (
    TopicNotFoundError,
    TopicSpec,
    ensure_topics,
    list_topic_names,
    topic_partitions,
)
from streams.kafka.maps import read_maps
from streams.kafka.replay import read_topic
from streams.kafka.metrics import ProducerMetrics
from streams.kafka.producer import DeliveryStats, RoutingProducer

NAME = "produce"
DEFAULT_COUNT = 10_000
VALUE_FIELDS = ("one", "uniform", "none")
_PROGRESS_EVERY = 500
_MAX_IDLE_S = 0.1
DEFAULT_PROGRESS_INTERVAL_S = 5.0

_EPILOG = """\
examples:
  streams topics create && streams produce --count 100000
  streams produce --topic load-test --create-topic --partitions 12 --duration 60s --rate 2000 --no-follow
  streams produce --distribution tenants --elephants 2 --elephant-share 0.5
  streams produce --events-topic streams.events --count 5000 --serializer avro --id-kind snowflake --json

The topic is the events topic of the settings (--events-topic or its alias --topic,
$STREAMS_EVENTS_TOPIC, [topics] events_topic in the --config file, else
streams.events). --partitions defaults to the topic's own partition count. With
neither --count nor --duration, sends 10000 events. Ctrl-C stops sending, flushes,
and prints the summary. By default it follows the hot-keys directory and the
routing maps of the settings' topics (--hot-keys-topic, --routing-maps-topic);
--no-follow sends every key to its hash partition.
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
    add_setting_flags(target, TopicNames, ["events"], extra_names={"events": ["--topic"]},
                      helps={"events": "topic, or a template such as events.{bucket}"})
    target.add_argument("--create-topic", action="store_true",
                        help="create the topic with --partitions first if it does not exist")
    add_setting_flags(target, ProducerSettings, ["partitions", "placement", "hash", "bucket_width"], helps={
        "partitions": "partition count of the routing map, checked against the topic's",
        "bucket_width": "time-bucket width, e.g. 1m, 5m, 1h"}, shown_defaults={
        "partitions": f"the topic's; with --create-topic, the setting, {ProducerSettings().partitions}"})
    add_workload_arguments(parser)
    amount = parser.add_argument_group("how much")
    which = amount.add_mutually_exclusive_group()
    which.add_argument("--count", type=positive_int, metavar="N", help=f"events to send (default: {DEFAULT_COUNT})")
    which.add_argument("--duration", type=duration_s, metavar="DURATION", help="send for this long, e.g. 30s or 5m")
    amount.add_argument("--rate", type=non_negative_float, default=0.0, metavar="R",
                        help="target events/s; 0 = as fast as possible (default: 0)")
    events = parser.add_argument_group("events")
    add_setting_flags(events, ProducerSettings, ["id_kind", "serializer"],
                      helps={"id_kind": "event IDs", "serializer": "payload format"})
    events.add_argument("--value-field", choices=VALUE_FIELDS, default="one",
                        help="each event's numeric value: 1.0, uniform in [0, 100), or null (default: one)")
    fleet = parser.add_argument_group("following the fleet")
    fleet.add_argument("--follow", action=BoolAction,
                       help="follow the key directory (hot-keys topic) and the routing maps (routing-maps topic), "
                            "as the workers and the monitor do (default: true); --no-follow: every key goes to its "
                            "hash partition under the configured map")
    add_setting_flags(fleet, TopicNames, ["hot_keys", "routing_maps"], helps={
        "hot_keys": "the key directory to follow",
        "routing_maps": "the routing-map history to follow (read before the first event, then each new map applies "
                        "from its first bucket on; not followed while the topic does not exist)"})
    parser.add_argument("--flush-timeout", type=duration_s, default=30.0, metavar="DURATION",
                        help="how long to wait for outstanding deliveries at the end; records still unacknowledged "
                             "then are given up and reported as pending (default: 30s)")
    parser.add_argument("--progress-interval", type=duration_s, default=DEFAULT_PROGRESS_INTERVAL_S,
                        metavar="DURATION", help="without a terminal on stderr, print a progress line there this "
                                                 f"often (default: {DEFAULT_PROGRESS_INTERVAL_S:g}s)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--metrics-port", type=positive_int, metavar="PORT",
                        help="expose the producer's counters for Prometheus on http://0.0.0.0:PORT/metrics")
    return parser


@dataclass(frozen=True)
class ProduceSummary:
    """What one run sent and what became of it: ``sent`` = ``delivered`` + ``failed`` + ``pending``.

    ``delivered``: acknowledged by the broker; ``failed``: refused, or given up by
    librdkafka; ``pending``: without an acknowledgement when the flush timed out, then
    given up (some may have been written). ``per_partition`` is (topic, partition,
    acknowledged records), so it sums to ``delivered``. ``following`` names the
    hot-keys and routing-maps topics the producer followed (None: not followed).
    """

    topic: str
    partitions: int
    placement: str
    hash: str
    workload: str
    sent: int
    delivered: int
    failed: int
    pending: int
    elapsed_s: float
    interrupted: bool
    last_error: str | None
    per_partition: tuple[tuple[str, int, int], ...]
    hot_keys_topic: str | None = None
    routing_maps_topic: str | None = None

    @property
    def events_per_s(self) -> float:
        """Delivered events per second of the whole run (flush included)."""
        return self.delivered / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "topic": self.topic, "partitions": self.partitions, "placement": self.placement, "hash": self.hash,
            "workload": self.workload, "sent": self.sent, "delivered": self.delivered, "failed": self.failed,
            "pending": self.pending, "elapsed_s": self.elapsed_s, "events_per_s": self.events_per_s,
            "interrupted": self.interrupted, "last_error": self.last_error,
            "following": {"hot_keys_topic": self.hot_keys_topic, "routing_maps_topic": self.routing_maps_topic},
            "per_partition": [{"topic": t, "partition": p, "delivered": n} for t, p, n in self.per_partition],
        }


@dataclass(frozen=True)
class Following:
    """Which of the fleet's control topics a producer follows (None: not followed), and why not, if not."""

    hot_keys_topic: str | None
    routing_maps_topic: str | None
    history: tuple[RoutingMap, ...]
    notes: tuple[str, ...]
    directory_exists: bool = False


def run(args: argparse.Namespace) -> int:
    """Produce, print the summary; raises StreamsError for a missing topic, an unreachable broker, bad flags."""
    config = kafka_client_config(args)
    names = resolve_settings(args, TopicNames).settings
    topic = names.events
    given = flag_values(args, ProducerSettings)
    settings = resolve_settings(args, ProducerSettings).settings
    workload = workload_from(args)
    buckets = TimeBuckets(settings.bucket_width, settings.grace)
    partitions = _partitions(args, config, topic, settings.partitions, given.get("partitions"))
    first = RoutingMap(version=1, partitions=partitions, topic=topic, placement=settings.placement,
                       hash=settings.hash)
    following = _following(args, config, names, topic, buckets)
    for note in following.notes:
        print(f"streams: note: {note}", file=sys.stderr)
    # Following a routing-map history: start from the topic's own first map (it may predate a grown topic).
    router = Router(buckets, list(following.history[:1]) or [first])
    producer = RoutingProducer(router, config, serializer=settings.serializer, id_kind=settings.id_kind,
                               snowflake_worker=settings.snowflake_worker, hot_keys_topic=following.hot_keys_topic,
                               routing_maps_topic=following.routing_maps_topic)
    _read_directory(producer, following, args.timeout)
    count = args.count if args.count is not None or args.duration is not None else DEFAULT_COUNT
    observe = None
    if args.metrics_port:
        metrics = ProducerMetrics()
        metrics.serve(args.metrics_port)
        observe = lambda: metrics.update(producer)  # noqa: E731 - a one-line callback
    started = time.monotonic()
    on_terminal = sys.stderr.isatty()
    reporter = _Reporter(producer, args.progress_interval, started)
    with producer:
        if not on_terminal:
            reporter.start()  # a line every interval while sending and flushing
        sent, interrupted = _send(producer, iter_keys(workload), _values(args.value_field, workload.seed),
                                  count=count, duration_s=args.duration, rate=args.rate, observe=observe)
        if on_terminal:
            reporter.start()  # the bar is gone: say what the flush is waiting for
        try:
            stats = producer.close(timeout=args.flush_timeout)
            pending = 0
        except UndeliveredError:  # give up on what is left, so every count below is final
            pending = producer.purge()
            stats = producer.stats()
        finally:
            reporter.stop()
    summary = _summary(stats, pending, topic, partitions, settings, workload.describe(), time.monotonic() - started,
                       interrupted, following, template=BUCKET_PLACEHOLDER in topic)
    if args.json:
        print_json(summary.to_record())
    else:
        _print_summary(summary)
    if summary.delivered < summary.sent:
        raise DeliveryError(f"{summary.sent - summary.delivered} of {summary.sent} events not delivered: "
                            f"{summary.failed} failed, {summary.pending} unacknowledged when the "
                            f"{args.flush_timeout:g} s flush timed out (last error: {summary.last_error})")
    return 130 if interrupted else 0


def _following(args: argparse.Namespace, config: dict[str, Any], names: TopicNames, topic: str,
               buckets: TimeBuckets) -> Following:
    """The control topics to follow: by default the settings' hot-keys and routing-maps topics.

    The routing maps are followed only if their topic exists and its maps are for
    ``topic`` (a load test on another topic must not be routed by the fleet's maps).
    With ``--no-follow``, a note says so if the hot-keys topic places keys.
    """
    if args.follow is False:
        placed = _placed_keys(config, names.hot_keys, args.timeout)
        notes = (f"ignoring the key directory on {names.hot_keys!r}, which places {placed:,} key(s) "
                 "(--no-follow): every key goes to its hash partition",) if placed else ()
        return Following(None, None, (), notes)
    existing = set(list_topic_names(config, timeout_s=args.timeout))
    directory = names.hot_keys in existing
    if names.routing_maps not in existing:
        return Following(names.hot_keys, None, (), (), directory)
    history = tuple(read_maps(config, names.routing_maps, timeout_s=args.timeout, bucket_width_ms=buckets.width_ms))
    others = sorted({m.topic for m in history} - {topic})
    if others:
        return Following(names.hot_keys, None, (), (
            f"not following the routing maps on {names.routing_maps!r}: they route {', '.join(map(repr, others))}, "
            f"not {topic!r}",), directory)
    return Following(names.hot_keys, names.routing_maps, history, (), directory)


def _read_directory(producer: RoutingProducer, following: Following, timeout_s: float) -> None:
    """Wait until the key directory that exists now is read, so the first events already follow it.

    A hot-keys topic that does not exist yet is followed live once it appears (the
    worker creates it); one not read within ``timeout_s`` is followed live too, with a note.
    """
    if producer.follower is None or not following.directory_exists:
        return
    if not producer.follower.wait_until_current(timeout_s):
        print(f"streams: note: the key directory on {following.hot_keys_topic!r} was not read within "
              f"{timeout_s:g} s: following it live from now on", file=sys.stderr)


def _placed_keys(config: dict[str, Any], topic: str, timeout_s: float) -> int:
    """How many keys the directory on the compacted ``topic`` places now (0 if it does not exist)."""
    if topic not in list_topic_names(config, timeout_s=timeout_s):
        return 0
    latest: dict[bytes | None, bool] = {}
    for msg in read_topic(config, topic, timeout_s=timeout_s):
        latest[msg.key()] = msg.value() is not None  # a tombstone sends its key home
    return sum(latest.values())


def _partitions(args: argparse.Namespace, config: dict[str, Any], topic: str, default: int,
                given: int | None) -> int:
    """The routing map's partition count; creates the topic first with ``--create-topic``.

    ``default``: the setting's count (for a template, or a topic to create); ``given``:
    the ``--partitions`` flag, which must then equal the topic's count.
    """
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
    if given is not None and given != actual:
        raise RoutingMapError(f"topic {topic!r} has {actual} partitions, not --partitions {given}")
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


def _summary(stats: DeliveryStats, pending: int, topic: str, partitions: int, settings: ProducerSettings,
             workload: str, elapsed_s: float, interrupted: bool, following: Following, *,
             template: bool) -> ProduceSummary:
    """The run's summary from final ``stats`` (nothing in flight: ``per_partition`` is acknowledged records).

    ``pending`` of ``stats.failed`` were given up at the flush timeout, not refused.
    """
    counts = dict(stats.per_partition)
    if not template:  # list every partition, the idle ones too
        for p in range(partitions):
            counts.setdefault((topic, p), 0)
    rows = tuple((t, p, n) for (t, p), n in sorted(counts.items()))
    return ProduceSummary(topic, partitions, settings.placement, settings.hash, workload, stats.sent,
                          stats.delivered, stats.failed - pending, pending + stats.in_flight, elapsed_s, interrupted,
                          stats.last_error, rows, following.hot_keys_topic, following.routing_maps_topic)


def _print_summary(s: ProduceSummary) -> None:
    print_fields("produced" + (" (interrupted)" if s.interrupted else ""), [
        ("topic", s.topic),
        ("routing", f"{s.partitions} partitions, {s.placement} + {s.hash}"),
        ("keys", s.workload),
        ("following", ", ".join(t for t in (s.hot_keys_topic, s.routing_maps_topic) if t) or "nothing (--no-follow)"),
        ("sent", s.sent),
        ("delivered", s.delivered),
        ("failed", s.failed),
        ("pending", s.pending),
        ("elapsed", f"{s.elapsed_s:.2f} s"),
        ("rate", f"{s.events_per_s:,.0f} events/s"),
    ] + ([("last error", s.last_error)] if s.last_error else []))
    several_topics = len({t for t, _, _ in s.per_partition}) > 1
    if several_topics:
        print_table("delivered (acknowledged) per partition", ["topic", "partition", "delivered"], s.per_partition)
    else:
        print_table("delivered (acknowledged) per partition", ["partition", "delivered"],
                    [(p, n) for _, p, n in s.per_partition])


class _Reporter:
    """Prints a progress line on stderr every ``interval_s`` from a daemon thread, until stopped.

    Reads the producer's counters only (``stats()``), so it keeps reporting while the
    main thread is blocked in a send waiting for queue room or in the final flush:
    a run during a broker outage is never silent.
    """

    def __init__(self, producer: RoutingProducer, interval_s: float, started: float) -> None:
        self._producer = producer
        self._interval = interval_s
        self._started = started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="produce-progress", daemon=True)

    def start(self) -> None:
        """Start reporting (at most once)."""
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def stop(self) -> None:
        """Stop reporting; returns once no further line can be printed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):  # the report period, not a synchronisation
            stats = self._producer.stats()
            elapsed = time.monotonic() - self._started
            print(f"progress {elapsed:,.0f} s: sent {stats.sent:,}, delivered {stats.delivered:,}, "
                  f"failed {stats.failed:,}, pending {stats.in_flight:,}"
                  + (f" (last error: {stats.last_error})" if stats.last_error else ""),
                  file=sys.stderr, flush=True)
