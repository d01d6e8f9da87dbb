#!/usr/bin/env python3
"""The README's demo (``make demo``): the whole story on a real broker, in a few minutes.

1. start the project's local Kafka broker (or use ``$KAFKA_BOOTSTRAP``) and a faust worker;
2. produce a Zipf-skewed stream with planted elephants through ``RoutingProducer``;
3. watch the worker's load-aware decider build a key directory (a few keys moved
   whole, the biggest split over chosen light partitions) and every producer apply it live;
4. compare partition balance before and after, and print the directory;
5. send late events into a closed bucket, see them routed aside, replay them;
6. check every final aggregate against an exact oracle computed here;
7. stop everything it started.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from kafka_local import LocalKafka  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from streams.core.aggregate import Stats
from streams.core.config import TopicNames, env_var, setting_name
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.simulate import Workload, iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import ensure_topics, project_topic_specs
from streams.kafka.clients import new_consumer
from streams.kafka.producer import RoutingProducer
from streams.kafka.replay import replay_late

PARTITIONS = 12
RATE = 800  # events/s: comfortably within one faust worker process
SECONDS = 24
WIDTH = "10s"
GRACE_MS = 2_000
console = Console(highlight=False, width=110)


class Reader:
    """Reads a topic from the beginning and keeps its decoded records."""

    def __init__(self, bootstrap: str, topic: str, schema: str) -> None:
        self.codec = AvroCodec(schema)
        self.consumer = new_consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{uuid.uuid4().hex[:6]}",
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.records: list[Any] = []

    def until(self, predicate: Any, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for msg in self.consumer.consume(1000, 0.3):
                if msg.error() is None:
                    self.records.append(None if msg.value() is None else self.codec.decode(msg.value()))
            if predicate(self.records):
                return True
        return False

    def close(self) -> None:
        self.consumer.close()


def display(key: bytes) -> str:
    """A directory key (canonical bytes) as the text the demo sent."""
    return key.decode("utf-8", "backslashreplace")


def balance(counts: Counter) -> float:
    loads = [counts.get(p, 0) for p in range(PARTITIONS)]
    return max(loads) / (sum(loads) / PARTITIONS) if sum(loads) else 0.0


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return 0 when every aggregate matched its oracle.

    Prints only its own story: client logs (librdkafka's included, see streams.kafka.clients)
    go to Python logging, which shows them only with ``--debug``.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help="also print log records at DEBUG and above, librdkafka's client logs included")
    if parser.parse_args(argv).debug:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        if not bootstrap:
            broker = stack.enter_context(LocalKafka())
            bootstrap = broker.bootstrap
            console.print(f"[bold]1.[/] Kafka {broker.version} (KRaft, single node) up at {bootstrap} "
                          f"in {broker.started_in_s:.1f} s")
        tag = uuid.uuid4().hex[:6]
        names = TopicNames(**{f: f"demo-{tag}.{f.replace('_', '-')}" for f in TopicNames.__dataclass_fields__})
        client = {"bootstrap.servers": bootstrap}
        ensure_topics(client, project_topic_specs(names, partitions=PARTITIONS), timeout_s=30)
        env = dict(os.environ, STREAMS_BOOTSTRAP_SERVERS=bootstrap, STREAMS_APP_ID=f"demo-{tag}",
                   STREAMS_PARTITIONS=str(PARTITIONS), STREAMS_BUCKET_WIDTH=WIDTH, STREAMS_GRACE=f"{GRACE_MS // 1000}s",
                   STREAMS_ALLOWED_DELAY="0s", STREAMS_IDLE_TIMEOUT="5s", STREAMS_RETENTION="1h",
                   STREAMS_PLACEMENT="jump", STREAMS_HASH="xxh3",  # the producers' map: the decider needs each key's home
                   STREAMS_HOT_WINDOW_S="4", STREAMS_HOT_MIN_WINDOW_EVENTS="1500", STREAMS_SESSION_TIMEOUT_S="6",
                   **{env_var(setting_name(TopicNames, f)): getattr(names, f) for f in TopicNames.__dataclass_fields__})
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"streams-demo-worker-{tag}.log"
        worker = subprocess.Popen([str(Path(sys.executable).parent / "faust"), "-A", "streams.app", "worker",
                                   "-l", "info", "--without-web"], env=env, stdout=log.open("wb"),
                                  stderr=subprocess.STDOUT)
        stack.callback(lambda: (worker.terminate(), worker.wait(30)))
        console.print(f"[bold]2.[/] faust worker started (log: {log}); {PARTITIONS} partitions, {WIDTH} buckets")

        buckets = TimeBuckets(WIDTH, grace=f"{GRACE_MS // 1000}s")
        router = Router(buckets, [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events,
                                             placement="jump", hash="xxh3")])
        producer = RoutingProducer(router, client, hot_keys_topic=names.hot_keys)
        stack.callback(producer.close)
        producer.follower.wait_until_current(30)
        keys = iter_keys(Workload("zipf", keys=100_000, zipf_exponent=1.1, seed=1))
        elephants = ["tenant-acme", "tenant-globex", "tenant-initech"]
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        placed: list[tuple[float, int]] = []  # (seconds since start, partition) of every event
        first_change, last_change = float(SECONDS), 0.0
        seen: dict[bytes, tuple[int, ...]] = {}  # the producer's directory as last printed
        console.print(f"[bold]3.[/] producing a Zipf(1.1) stream over 100,000 keys with 3 planted elephants, "
                      f"{RATE}/s for {SECONDS} s")
        began = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - began) < SECONDS:
            ahead = sent / RATE - elapsed
            if ahead > 0.002:
                time.sleep(ahead)  # pacing the load generator, not synchronisation
            key = elephants[(sent // 8) % 3] if sent % 8 == 0 else next(keys)
            value = float(sent % 100)
            decision = producer.send(key, value)
            oracle[(decision.bucket_label, key)].add(value)
            placed.append((elapsed, decision.partition))
            sent += 1
            if sent % 400 == 0:
                now = router.directory.snapshot()
                for k in sorted(set(seen) | set(now)):
                    if seen.get(k) != now.get(k):
                        first_change, last_change = min(first_change, elapsed), elapsed
                        parts = now.get(k)
                        what = ("sent home" if parts is None else f"moved to partition {parts[0]}" if len(parts) == 1
                                else f"split over partitions {', '.join(map(str, parts))}")
                        console.print(f"   {elapsed:5.1f} s  key [yellow]{display(k)}[/] {what}")
                seen = now
        producer.flush(30)
        console.print(f"   sent {sent:,} events; the producer's directory places {len(seen)} of "
                      f"{len({k for _, k in oracle}):,} keys")

        before = Counter(p for t, p in placed if t < first_change)
        after = Counter(p for t, p in placed if t > last_change + 0.5)
        table = Table(title="4. partition load, max/mean of events per partition")
        table.add_column("phase")
        table.add_column("events", justify="right")
        table.add_column("max/mean", justify="right")
        table.add_row("hash only, before the first directory change", f"{sum(before.values()):,}",
                      f"{balance(before):.2f}")
        table.add_row(f"with the directory, after its last change ({last_change:.1f} s on)",
                      f"{sum(after.values()):,}", f"{balance(after):.2f}")
        console.print(table)
        directory = Table(title="the key directory the decider built (the hash places every other key)")
        for column in ("key", "home", "partitions", "events"):
            directory.add_column(column, justify="left" if column == "key" else "right")
        counts = Counter()
        for (_, key), stats in oracle.items():
            counts[key] += stats.count
        for k, parts in sorted(seen.items(), key=lambda kv: -counts[display(kv[0])]):
            directory.add_row(display(k), str(router.home_of(k)),
                              ("move -> " if len(parts) == 1 else f"split {len(parts)}: ") + ",".join(map(str, parts)),
                              f"{counts[display(k)]:,}")
        console.print(directory)

        closed = Reader(bootstrap, names.bucket_closed, "bucket_closed")
        first_label = buckets.bucket_of(int(time.time() * 1000) - (SECONDS - 2) * 1000).label
        if not closed.until(lambda rs: any(r["bucket"] >= first_label for r in rs), 60):
            console.print("[red]no bucket closed: see the worker log[/]")
            return 1
        late_bucket = min(r["bucket"] for r in closed.records)
        start = buckets.parse_label(late_bucket).start_ms
        late_oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        for i in range(25):
            key = elephants[i % 3]
            producer.send(key, 1000.0 + i, ts_ms=start + 100 * i)
            late_oracle[(late_bucket, key)].add(1000.0 + i)
        producer.flush(30)
        late = Reader(bootstrap, names.late_events, "late_event")
        late.until(lambda rs: len(rs) >= 25, 60)
        console.print(f"[bold]5.[/] bucket {late_bucket} closed; 25 events sent into it afterwards went to the "
                      f"late-events topic: {len(late.records)} there")
        summary = replay_late(client, names.late_events, names.partials, buckets, 3_600_000)
        console.print(f"   replay: read {summary.read}, replayed {summary.replayed}, duplicates {summary.duplicates}, "
                      f"too old {summary.too_old}, failed {summary.failed}, corrections {summary.corrections}")

        # Push the watermark past the last bucket so everything closes, then check every aggregate.
        closer_ts = int(time.time() * 1000) + 30_000
        done: set[int] = set()
        i = 0
        while len(done) < PARTITIONS:
            d = producer.send(f"closer-{i}", 0.0, ts_ms=closer_ts)
            done.add(d.partition)
            i += 1
        producer.flush(30)
        expected = dict(oracle)
        for slot, stats in late_oracle.items():
            expected[slot] = expected.get(slot, Stats.empty()).merge(stats)
        aggregates = Reader(bootstrap, names.aggregates, "aggregate")

        def matches(records: list[Any]) -> bool:
            latest = {(r["bucket"], r["key"]): r for r in records}
            return all(latest.get(slot, {}).get("count") == s.count for slot, s in expected.items())

        ok = aggregates.until(matches, 120)
        latest = {(r["bucket"], r["key"]): r for r in aggregates.records}
        exact = sum(1 for slot, s in expected.items() if slot in latest and
                    (latest[slot]["count"], latest[slot]["sum"], latest[slot]["min"], latest[slot]["max"])
                    == (s.count, s.sum, s.min, s.max))
        console.print(f"[bold]6.[/] final aggregates: {exact:,} of {len(expected):,} (bucket, key) results equal "
                      f"the exact oracle, salted keys merged back, late events replayed in")
        for reader in (closed, late, aggregates):
            reader.close()
        console.print("[bold]7.[/] stopping the worker and the broker")
        return 0 if ok and exact == len(expected) else 1


if __name__ == "__main__":
    sys.exit(main())
