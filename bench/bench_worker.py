#!/usr/bin/env python3
"""Events per second through the streams worker, a bare faust agent, Kafka Streams, Bytewax and Quix Streams.

    .venv/bin/python bench/bench_worker.py [--events N] [--quick]

Same topic, same run; 1,000,000 events by default (shorter runs swing by a quarter on
the fast rows while Kafka Streams' JIT warms up), --quick 100,000.

Every row reads the same pre-produced events topic from the beginning in its own
consumer group; throughput is events / (time from the group's first committed offset
until its committed offsets reach the end of every partition), so start-up (imports,
group join) is left out. Each commits every second (faust's broker_commit_interval,
Quix's commit_interval).

* bare faust agent (bench/apps/baseline_app.py): decodes and counts, nothing else;
* streams worker (``faust -A streams.app worker``): decodes, validates, feeds the
  hot-key sketch, runs the watermark and bucket roller, folds stage-1 state
  (changelog writes coalesced per tick), closes ten one-minute buckets and merges
  their partials into the aggregates topic;
* streams worker, two processes in one consumer group (two partitions each): they
  start on an empty copy of the topic and the events are copied into it (same
  partitions, keys, values, headers, timestamps) once the group is stable with
  both (a worker reads the events in less time than the second one takes to
  start); the rate is counted from when the copy is written;
* Kafka Streams (bench/apps/kstreams/, the broker's version, built on demand with
  ``mvn -q package`` into a jar kept in its target/): the same one-minute buckets
  (grace 5 s) as a tumbling window, sum and count per key,
  ``suppress(untilWindowCloses)``, RocksDB state with its changelog, one stream thread;
* Bytewax (bench/apps/bytewax_app.py, in its own environment, bench/peers.py):
  ``fold_window`` over an event clock (5 s wait), tumbling one-minute windows,
  emitted on close, state in memory. Bytewax keeps its place in its own recovery
  store, not in Kafka; its source's consumers commit what they have read every
  second so that it is timed like the others;
* Quix Streams (bench/apps/quix_app.py): the same one-minute buckets (grace 5 s) as
  a tumbling window, sum and count of ``value`` per key, final results only,
  RocksDB state with its changelog, results to an output topic.

Every row but the faust agent's is checked: their results for every (bucket, key) are
compared with the sums and counts of what was produced ("exact"). Two closing
events per partition past the last bucket let every bucket close. A row whose
worker exits or whose offsets stop moving for a minute (a faust recovery that never
ends, seen on the two-process row) is printed with the reason and its logs, and the
other rows still run. The bucket-close
lag is measured on live data in bench_latency.py, memory over time in bench_memory.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import orjson  # noqa: E402
from common import broker, stop  # noqa: E402
from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers import peer_python  # noqa: E402

from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.clients import new_admin, new_consumer, new_producer
from streams.kafka.producer import RoutingProducer

PARTITIONS = 4  # two each for the two-process row
KEYS = 200  # per one-minute bucket: each closes with 200 partials and 200 aggregates
BUCKETS = 10
WIDTH_MS = 60_000
APPS = ROOT / "bench" / "apps"
KSTREAMS = APPS / "kstreams"
FAUST = str(Path(sys.executable).parent / "faust")
STREAMS_OUTPUTS = ("hot_keys", "sketches", "partials", "aggregates", "bucket_closed", "late_events", "dead_letters")

#: (bucket start ms, key) -> (count, sum of value)
Slots = dict[tuple[int, str], tuple[int, float]]
#: one slot's result as read from a worker's output: ((bucket start ms, key), (count, sum))
Result = tuple[tuple[int, str], tuple[int, float]]
#: a worker's output record (key, value) -> its Result, or None for a record that is not one
Decoder = Callable[[bytes | None, bytes], Result | None]


class Rate(NamedTuple):
    """A measured throughput: ``events`` committed in ``seconds`` after the start point, while the
    machine's CPUs were ``busy`` (0..1, all cores, every process: the broker's share included)."""

    events: int
    seconds: float
    busy: float = float("nan")

    @property
    def per_s(self) -> float:
        return self.events / max(self.seconds, 1e-9)


class Exactness(NamedTuple):
    """How many of the oracle's (bucket, key) slots a worker's results match exactly."""

    equal: int
    slots: int

    def __str__(self) -> str:
        if self.equal == self.slots:
            return f"yes ({self.slots:,} slots)"
        return f"no ({self.equal:,} of {self.slots:,} slots equal)"


# -- the input --------------------------------------------------------------------------


def balanced_keys(router: Router, ts_ms: int) -> list[str]:
    """``KEYS`` key names ``key-<i>``, ``KEYS / PARTITIONS`` placed on each partition, the partitions taking turns.

    Every partition then gets the same share of the events (exactly, when the event
    count is a multiple of ``KEYS``), so two processes holding two partitions each
    split the work evenly and the two-process row measures scaling, not a skew of the
    hash.
    """
    per_partition = KEYS // PARTITIONS
    placed: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(names) < per_partition for names in placed.values()):
        names = placed[router.route(f"key-{i}", ts_ms).partition]
        if len(names) < per_partition:
            names.append(f"key-{i}")
        i += 1
    return [name for turn in zip(*placed.values()) for name in turn]


def produce_events(bootstrap: str, topic: str, n: int) -> tuple[int, Slots]:
    """Write ``n`` events over ten one-minute buckets an hour ago, then the closers; return (records, oracle).

    Events are in time order, the ``i % KEYS``-th of :func:`balanced_keys`, value ``i % 100`` (integral, so
    every sum is exact in floating point). The closers are two events per partition
    half a minute past the last bucket: the streams worker's watermark needs two
    records to agree and trails by its allowed delay (2 s), Quix closes a partition's
    windows at its largest event time minus the grace. They open an eleventh bucket
    that never closes and is not in the oracle.
    """
    buckets = TimeBuckets("1m")
    router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=topic)])
    producer = RoutingProducer(router, {"bootstrap.servers": bootstrap})
    t0 = (int(time.time() * 1000) - 3_600_000) // WIDTH_MS * WIDTH_MS
    oracle: Slots = {}
    keys = balanced_keys(router, t0)
    for i in range(n):
        key, value, ts = keys[i % KEYS], float(i % 100), t0 + i * BUCKETS * WIDTH_MS // n
        producer.send(key, value, ts_ms=ts)
        slot = (ts // WIDTH_MS * WIDTH_MS, key)
        count, total = oracle.get(slot, (0, 0.0))
        oracle[slot] = (count + 1, total + value)
    closing_ts = t0 + BUCKETS * WIDTH_MS + WIDTH_MS // 2
    closers: dict[int, str] = {}
    i = 0
    while len(closers) < PARTITIONS:  # one key per partition
        closers.setdefault(router.route(f"closer-{i}", closing_ts).partition, f"closer-{i}")
        i += 1
    for key in closers.values():
        for _ in range(2):
            producer.send(key, 0.0, ts_ms=closing_ts)
    stats = producer.close()
    if stats.failed:
        raise SystemExit(f"{stats.failed} events were not delivered to {topic}")
    return n + 2 * PARTITIONS, oracle


# -- running workers and timing them ----------------------------------------------------


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """The sum of ``group``'s committed offsets on ``topic`` (0 while it has none)."""
    # Consumer.committed() asks the group coordinator without joining the group.
    # (AdminClient.list_consumer_group_offsets crashed confluent-kafka 2.16.1 here
    # for a group that did not exist yet.)
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException:  # coordinator not ready yet (the group is new): nothing committed
        return 0
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in result)


def stable_members(admin: AdminClient, group: str) -> int:
    """How many members ``group`` has when it is stable (every member holds its partitions); else 0."""
    try:
        description = admin.describe_consumer_groups([group])[group].result(10)
    except KafkaException:
        return 0
    return len(description.members) if description.state == ConsumerGroupState.STABLE else 0


def kstreams_jar() -> Path:
    """The Kafka Streams app's jar, built with ``mvn -q package`` first if it is missing or older than its sources.

    Building needs Maven and a JDK (``javac``; a JRE alone cannot compile). Raises
    SystemExit naming what is missing, or when Maven fails (its output is printed as
    it runs).
    """
    jar = KSTREAMS / "target" / "kstreams-bench.jar"
    sources = [KSTREAMS / "pom.xml", *(KSTREAMS / "src").rglob("*.java")]
    if not jar.exists() or jar.stat().st_mtime < max(path.stat().st_mtime for path in sources):
        missing = [tool for tool in ("mvn", "javac") if shutil.which(tool) is None]
        if missing:
            raise SystemExit(f"the Kafka Streams row is built with Maven and a JDK; missing: {', '.join(missing)} "
                             "(apt-get install maven openjdk-17-jdk-headless), or leave it out: --rows without kstreams")
        print(f"building {jar} (mvn -q package)", file=sys.stderr, flush=True)
        if subprocess.run(["mvn", "-q", "package"], cwd=KSTREAMS).returncode != 0:
            raise SystemExit(f"could not build the Kafka Streams app in {KSTREAMS}")
    return jar


def faust_worker(app: str) -> list[str]:
    return [FAUST, "-A", app, "worker", "-l", "warn", "--without-web"]


def streams_env(bootstrap: str, topic: str, run: str, **settings: str) -> dict[str, str]:
    """The streams worker's environment: consumer group ``run``, output topics ``{run}.<role>``, 1-minute buckets.

    ``settings`` override or add ``STREAMS_<NAME>`` variables (e.g. ``retention="2m"``).
    """
    env = {"STREAMS_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_APP_ID": run, "STREAMS_EVENTS": topic,
           "STREAMS_PARTITIONS": str(PARTITIONS), "STREAMS_BUCKET_WIDTH": "1m", "STREAMS_GRACE": "5s",
           "STREAMS_IDLE_TIMEOUT": "5s", "STREAMS_RETENTION": "2h"}
    env.update({f"STREAMS_{role.upper()}": f"{run}.{role}" for role in STREAMS_OUTPUTS})
    env.update({f"STREAMS_{name.upper()}": value for name, value in settings.items()})
    return env


@contextmanager
def running(command: list[str], envs: list[Mapping[str, str]], logs: Path,
            name: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One process of ``command`` per environment in ``envs``, each in its own folder; all stopped on exit.

    Logs go to ``logs/{name}-{i}.log``; the folders (faust's data, Quix's state) are removed.
    """
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=logs) as work:
        try:
            for i, extra in enumerate(envs):
                env = dict(os.environ, PYTHONPATH=str(APPS), **extra)
                log = (logs / f"{name}-{i}.log").open("wb")
                cwd = Path(work) / str(i)
                cwd.mkdir()
                procs.append(subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT))
            yield procs
        finally:
            for proc in procs:
                stop(proc)


@contextmanager
def profiler(pid: int, out: Path | None) -> Iterator[Callable[[], None] | None]:
    """A callable that starts ``py-spy record --gil`` on ``pid`` into ``out``; the recording ends on exit.

    Collapsed stacks (``--format raw``), one root per thread (``--threads``), sampled
    without pausing the process (``--nonblocking``); only samples holding the GIL
    count, so the file shows where Python's time goes. Yields None without ``out``.
    """
    if out is None:
        yield None
        return
    spy: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        spy.append(subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "--threads",
                                     "--nonblocking", "--format", "raw", "-o", str(out), "-p", str(pid)],
                                    stdout=subprocess.DEVNULL))
    try:
        yield start
    finally:
        for proc in spy:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            proc.wait(60)


class NotTimed(Exception):
    """A row that could not be timed: a worker exited, stalled, or finished inside its first commit."""


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat ((0, 0) where there is none)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all CPUs' time spent busy between two :func:`cpu_times` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else float("nan")


def measure(bootstrap: str, group: str, topic: str, records: int, procs: list[subprocess.Popen[bytes]],
            stall_s: float = 60, on_start: Callable[[], None] | None = None) -> Rate:
    """Poll ``group``'s committed offsets until they cover ``records``; the rate from the start point on.

    The start point is the first poll that sees a commit and, with more than one
    process, the group stable with all of them. Raises NotTimed if a process exits,
    the offsets do not move for ``stall_s`` (a faust recovery that never ends looks
    like this), or the first commit already covers everything.
    """
    admin = new_admin({"bootstrap.servers": bootstrap}) if len(procs) > 1 else None
    start: tuple[float, int] | None = None
    start_cpu = (0, 0)
    last = (time.monotonic(), 0)  # (when, committed) of the last progress
    while True:
        done = committed_total(bootstrap, group, topic)
        now = time.monotonic()
        if start is None and done > 0 and (admin is None or stable_members(admin, group) >= len(procs)):
            start, start_cpu = (now, done), cpu_times()
            if on_start is not None:
                on_start()
        if done >= records:
            break
        if done > last[1]:
            last = (now, done)
        if any(proc.poll() is not None for proc in procs):
            raise NotTimed(f"a process exited at {done:,} of {records:,} committed")
        if now - last[0] > stall_s:
            raise NotTimed(f"stalled at {done:,} of {records:,} committed (no progress for {stall_s:g} s)")
        time.sleep(0.2)  # polling committed offsets: the measurement's clock, not a synchronisation
    if start is None:
        raise NotTimed(f"all {records:,} records were committed before the group held all {len(procs)} processes")
    if start[1] >= records:
        held = f", once the group held all {len(procs)} processes," if len(procs) > 1 else ""
        raise NotTimed(f"the first commit{held} covered all {records:,} records: too few to time")
    return Rate(records - start[1], now - start[0], cpu_busy(start_cpu, cpu_times()))


def wait_for_members(bootstrap: str, group: str, members: int, procs: list[subprocess.Popen[bytes]],
                     timeout_s: float = 180) -> None:
    """Wait until ``group`` is stable with ``members`` members; NotTimed if a process exits or time runs out."""
    admin = new_admin({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while stable_members(admin, group) < members:
        if any(proc.poll() is not None for proc in procs):
            raise NotTimed("a process exited before the group held all of them")
        if time.monotonic() > deadline:
            raise NotTimed(f"the group did not hold all {members} processes within {timeout_s:g} s")
        time.sleep(0.5)  # polling the group's state another process reaches


def read_raw(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None, list | None, int]]:
    """Every record of ``topic`` as (partition, key, value, headers, timestamp), to copy it elsewhere."""
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": f"copy-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "enable.partition.eof": True})
    consumer.subscribe([topic])
    out, ended = [], set()
    try:
        while len(ended) < PARTITIONS:
            for msg in consumer.consume(5000, 1.0):
                if msg.error() is not None:
                    ended.add(msg.partition())
                    continue
                out.append((msg.partition(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def copy_into(bootstrap: str, records: list[tuple[int, bytes | None, bytes | None, list | None, int]],
              topic: str) -> Callable[[], None]:
    """A feed that writes ``records`` (from :func:`read_raw`) to the same partitions of ``topic``."""
    def feed() -> None:
        producer = new_producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                                 "queue.buffering.max.messages": 1_000_000})
        for partition, key, value, headers, ts in records:
            producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts)
            producer.poll(0)
        if producer.flush(60):
            raise NotTimed(f"the events could not be copied into {topic}")
    return feed


class Row(NamedTuple):
    """One line of the table: a rate, or None with the reason in ``note``; else ``note`` is the exactness."""

    label: str  # short, for the lines under the table
    name: str
    processes: int
    rate: Rate | None
    note: str


class Run(NamedTuple):
    """What every row of one run shares: the broker, the events topic, its records and oracle, the log folder."""

    bootstrap: str
    topic: str
    records: int
    oracle: Slots
    logs: Path


def timed_row(run: Run, label: str, name: str, command: list[str], envs: list[Mapping[str, str]], group: str,
              output: str | None = None, decode: Decoder | None = None, reads_in: str | None = None,
              feed: Callable[[], None] | None = None, profile: Path | None = None) -> Row:
    """Run ``command`` once per environment in ``envs`` (``group`` names the run) and time it.

    ``reads_in`` is the consumer group that reads the events topic (default ``group``;
    the streams worker's stage 1 reads in ``<app_id>-events``). With ``feed``, the
    processes start on an empty topic and ``feed()`` writes the events once the group
    is stable with all of them (else the first process to start could read everything
    before the others join). With ``output``, the results there (read with ``decode``)
    are then checked against the oracle. With ``profile``, py-spy samples the first
    process while it is timed (see :func:`profiler`).
    """
    with running(command, envs, run.logs, group) as procs, profiler(procs[0].pid, profile) as start_profile:
        try:
            if feed is not None:
                wait_for_members(run.bootstrap, reads_in or group, len(procs), procs)
                feed()
            rate = measure(run.bootstrap, reads_in or group, run.topic, run.records, procs, on_start=start_profile)
        except NotTimed as exc:
            return Row(label, name, len(envs), None, f"not timed: {exc}; see {run.logs}/{group}-*.log")
        note = "—"
        if output is not None and decode is not None:
            note = str(read_results(run.bootstrap, output, decode, run.oracle, procs))
        return Row(label, name, len(envs), rate, note)


# -- checking results -------------------------------------------------------------------


def read_results(bootstrap: str, topic: str, decode: Decoder, oracle: Slots,
                 procs: list[subprocess.Popen[bytes]], timeout_s: float = 90) -> Exactness:
    """Read ``topic`` from the beginning until its latest result per slot equals ``oracle`` or time runs out.

    ``decode(key, value)`` gives the record's Result, or None for a record that is not
    a merged or final result. Slots outside the oracle's buckets (the
    closers') are ignored.
    """
    consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    latest: Slots = {}
    end = time.monotonic() + timeout_s
    try:
        while True:
            for msg in consumer.consume(5000, 0.5):
                if msg.error() is None and msg.value() is not None:
                    result = decode(msg.key(), msg.value())
                    if result is not None:
                        latest[result[0]] = result[1]
            equal = sum(1 for slot, want in oracle.items() if latest.get(slot) == want)
            if equal == len(oracle) or time.monotonic() > end or any(proc.poll() is not None for proc in procs):
                return Exactness(equal, len(oracle))
    finally:
        consumer.close()


_aggregate = AvroCodec("aggregate")


def streams_aggregate(key: bytes | None, value: bytes) -> Result | None:
    record = _aggregate.decode(value)
    if record["slot"] != -1:  # a merged result is slot -1
        return None
    return (record["bucket_start_ms"], record["key"]), (record["count"], record["sum"])


def window_json(key: bytes | None, value: bytes) -> Result | None:
    """A peer's closed window: ``{"start", "sum", "count", ...}`` as JSON, keyed by the key (Quix, Kafka Streams, Bytewax)."""
    record = orjson.loads(value)
    return (record["start"], (key or b"").decode()), (record["count"], float(record["sum"]))


# -- the run ----------------------------------------------------------------------------


#: --rows names: every row of the table, in the order they run
ROWS = ("faust", "streams", "kstreams", "bytewax", "quix", "streams2")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="events to produce (default 1,000,000: shorter runs swing with the JIT's warm-up)")
    parser.add_argument("--quick", action="store_true", help="100,000 events")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"the rows to run, of {','.join(ROWS)} (default all)")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="py-spy record --gil the one-process streams worker while it is timed, into FILE "
                             "(collapsed stacks, one per thread)")
    args = parser.parse_args()
    n = 100_000 if args.quick else args.events
    wanted = set(args.rows.split(","))
    if wanted - set(ROWS):
        parser.error(f"--rows: unknown {sorted(wanted - set(ROWS))}; known: {','.join(ROWS)}")
    jar = kstreams_jar() if "kstreams" in wanted else None
    bytewax = peer_python("bytewax") if "bytewax" in wanted else None
    quix_python = peer_python("quix") if "quix" in wanted else None
    rows: dict[str, Row] = {}
    with ExitStack() as stack:
        bootstrap = broker(stack)
        tag = uuid.uuid4().hex[:6]
        topic = f"bench-events-{tag}"
        admin = new_admin({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        records, oracle = produce_events(bootstrap, topic, n)
        logs = Path(os.environ.get("TMPDIR", "/tmp"))

        run = Run(bootstrap, topic, records, oracle, logs)
        if "faust" in wanted:
            group = f"bench-{tag}-baseline"
            rows["faust"] = timed_row(run, "faust agent", "bare faust agent: decode + count",
                                      faust_worker("baseline_app"),
                                      [{"STREAMS_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_APP_ID": group,
                                        "STREAMS_EVENTS": topic}], group)
        if "streams" in wanted:
            group = f"bench-{tag}-streams1"
            rows["streams"] = timed_row(run, "streams", "streams worker: validate, sketch, watermark, roller, "
                                        "stage-1 + stage-2 state", faust_worker("streams.app"),
                                        [streams_env(bootstrap, topic, group)], group, f"{group}.aggregates",
                                        streams_aggregate, f"{group}-events", profile=args.profile)
        if jar is not None:
            group = f"bench-{tag}-kstreams"
            rows["kstreams"] = timed_row(run, "Kafka Streams", "Kafka Streams 4.4.0: tumbling 1 min window, sum + "
                                         "count, suppress(untilWindowCloses), RocksDB + changelog",
                                         ["java", "-jar", str(jar)],
                                         [{"STREAMS_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_EVENTS": topic,
                                           "KSTREAMS_GROUP": group, "KSTREAMS_OUTPUT": f"{group}.windows",
                                           "KSTREAMS_STATE_DIR": "state"}], group, f"{group}.windows", window_json)
        if bytewax is not None:
            group = f"bench-{tag}-bytewax"
            rows["bytewax"] = timed_row(run, "Bytewax", "Bytewax 0.21.1: fold_window, event clock, tumbling 1 min, "
                                        "in memory", [str(bytewax), "-m", "bytewax.run", "bytewax_app:flow"],
                                        [{"STREAMS_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_EVENTS": topic,
                                          "BYTEWAX_GROUP": group, "BYTEWAX_OUTPUT": f"{group}.windows"}], group,
                                        f"{group}.windows", window_json)
        if quix_python is not None:
            group = f"bench-{tag}-quix"
            rows["quix"] = timed_row(run, "Quix", "Quix Streams 3.28.1: tumbling 1 min window, sum + count, "
                                     "RocksDB + changelog", [str(quix_python), str(APPS / "quix_app.py")],
                                     [{"STREAMS_BOOTSTRAP_SERVERS": bootstrap, "STREAMS_EVENTS": topic,
                                       "QUIX_GROUP": group, "QUIX_OUTPUT": f"{group}.windows",
                                       "QUIX_STATE_DIR": "state"}], group, f"{group}.windows", window_json)
        if "streams2" in wanted:
            group = f"bench-{tag}-streams2"
            # Two processes read a copy of the events written once both are in the group.
            topic2 = f"{topic}-copy"
            admin.create_topics([NewTopic(topic2, PARTITIONS, 1)])[topic2].result(30)
            copy = run._replace(topic=topic2)
            rows["streams2"] = timed_row(copy, "streams ×2", "streams worker ×2, one consumer group (events written "
                                         "once both joined)", faust_worker("streams.app"),
                                         [{**streams_env(bootstrap, topic2, group), "STREAMS_INSTANCE": f"{group}-{i}"}
                                          for i in range(2)], group, f"{group}.aggregates", streams_aggregate,
                                         f"{group}-events", feed=copy_into(bootstrap, read_raw(bootstrap, topic), topic2))

    print_table(args, n, rows)
    return 0


def print_table(args: argparse.Namespace, n: int, rows: Mapping[str, Row]) -> None:
    """The Markdown table: events/s, ratios against the streams worker and the strongest peer, CPUs busy, exactness."""
    ours = rows.get("streams")
    peers = [rows[name] for name in ("kstreams", "bytewax", "quix") if name in rows and rows[name].rate is not None]
    strongest = max(peers, key=lambda row: row.rate.per_s) if peers else None  # type: ignore[union-attr]
    flags = (" --quick" if args.quick else f" --events {n}" if n != 1_000_000 else "") \
        + (f" --rows {args.rows}" if args.rows != ",".join(ROWS) else "")
    print(f"`python bench/bench_worker.py{flags}` — {n:,} events ({KEYS} keys, "
          f"{BUCKETS} one-minute buckets), {PARTITIONS} partitions, local broker, {os.cpu_count()} CPUs; "
          f"commits every second\n")
    against = f"vs {strongest.label} (strongest peer)" if strongest else "vs strongest peer"
    print(f"| worker | processes | events/s | vs streams worker | {against} | CPUs busy | exact |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows.values():
        cells = ["—", "—", "—", "—"]
        if row.rate is not None:
            cells = [f"{row.rate.per_s:,.0f}"] + [f"{row.rate.per_s / to.rate.per_s:.2f}" if to and to.rate else "—"
                                                  for to in (ours, strongest)] + [f"{100 * row.rate.busy:.0f}%"]
        print(f"| {row.name} | {row.processes} | {' | '.join(cells)} | {row.note} |")
    print("\nmeasured over (CPUs busy: all cores, every process, the broker's and other users' included): "
          + "; ".join(f"{row.label} {row.rate.events:,} events in {row.rate.seconds:.1f} s "
                      f"({100 * row.rate.busy:.0f}%)" for row in rows.values() if row.rate))
    two = rows.get("streams2")
    if ours and ours.rate and two and two.rate:
        print(f"two processes vs one: {two.rate.per_s / ours.rate.per_s:.2f}×")


if __name__ == "__main__":
    sys.exit(main())
