"""How long partitions stall when a second worker joins and when it leaves gracefully (issue 28).

    .venv/bin/python bench/bench_handover.py [--rate 2000] [--protocols classic,consumer]

One worker reads 12 partitions while a producer sends ``--rate`` events/s; a second
worker joins, runs, then stops with SIGTERM (it persists, commits and leaves its
groups). Every 100 ms the bench reads stage 1's committed offsets. For each event
(join, leave) and each partition it reports how long the partition's committed
offset did not move: for partitions that stayed with their worker (kept) and for
partitions that changed owner (moved: from the event until the new owner's first
commit). Committed offsets move about once a second (the commit cadence), so a
kept partition's stall of about 1.1 s is no stall at all. Each protocol in turn:
``classic`` (eager range assignor, the worker before KIP-848) and ``consumer``
(KIP-848, incremental). Timings vary on a shared machine: read them as rough figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import broker, stop  # noqa: E402
from streams.core.routing.router import Router, RoutingMap  # noqa: E402
from streams.core.time.buckets import TimeBuckets  # noqa: E402
from streams.kafka.admin import ensure_topics, group_progress, project_topic_specs  # noqa: E402
from streams.core.config import TopicNames  # noqa: E402
from streams.kafka.producer import RoutingProducer  # noqa: E402

PARTITIONS = 12
FAUST = str(Path(sys.executable).parent / "faust")


def worker(bootstrap: str, env: dict[str, str], name: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([FAUST, "-A", "streams.app", "worker", "-l", "info", "--without-web"],
                            env=dict(env, STREAMS_INSTANCE=name), stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            cwd=log.parent)


def measure(bootstrap: str, protocol: str, rate: int, workdir: Path) -> dict[str, tuple[float, float]]:
    tag = uuid.uuid4().hex[:8]
    names = TopicNames(**{f: f"h{tag}.{getattr(TopicNames(), f).split('.', 1)[1]}"
                          for f in TopicNames.__dataclass_fields__})
    app = f"handover-{tag}"
    env = dict(os.environ, STREAMS_BOOTSTRAP_SERVERS=bootstrap, STREAMS_APP_ID=app, STREAMS_PARTITIONS=str(PARTITIONS),
               STREAMS_GROUP_PROTOCOL=protocol, STREAMS_BUCKET_WIDTH="5s", STREAMS_GRACE="1s",
               STREAMS_BALANCE_ENABLED="false", PYTHONUNBUFFERED="1",
               **{f"STREAMS_{f.upper()}_TOPIC": getattr(names, f) for f in TopicNames.__dataclass_fields__})
    client = {"bootstrap.servers": bootstrap}
    ensure_topics(client, project_topic_specs(names, partitions=PARTITIONS), timeout_s=30)
    router = Router(TimeBuckets("5s", grace="1s"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events)])
    producer = RoutingProducer(router, client)
    done = threading.Event()

    def load() -> None:
        i = 0
        while not done.is_set():
            for _ in range(rate // 20):
                producer.send(f"user-{i % 997}", 1.0)
                i += 1
            producer.poll(0)
            done.wait(0.05)

    samples: list[tuple[float, dict[int, int]]] = []

    def sample() -> None:
        while not done.is_set():
            try:
                parts = group_progress(client, f"{app}-events", [names.events]).get(names.events, ())
                samples.append((time.monotonic(), {p.partition: p.committed or 0 for p in parts}))
            except Exception:  # noqa: BLE001 - a sample lost is a sample lost
                pass
            done.wait(0.1)

    threads = [threading.Thread(target=load, daemon=True), threading.Thread(target=sample, daemon=True)]
    for t in threads:
        t.start()
    a = worker(bootstrap, env, "a", workdir / f"{protocol}-a.log")
    try:
        time.sleep(20)  # a settles alone
        joined = time.monotonic()
        b = worker(bootstrap, env, "b", workdir / f"{protocol}-b.log")
        time.sleep(25)
        left = time.monotonic()
        stop(b)
        time.sleep(20)
    finally:
        done.set()
        stop(a)
        for t in threads:
            t.join(10)
        producer.close(30)
    return {"join": stalls(samples, joined, joined + 20), "leave": stalls(samples, left, left + 18)}


def stalls(samples: list[tuple[float, dict[int, int]]], start: float, end: float) -> tuple[float, float]:
    """(longest pause of any partition that kept moving, longest wait of a partition that paused) in [start, end]."""
    window = [(t, s) for t, s in samples if start - 2 <= t <= end]
    longest: dict[int, float] = {}
    for p in range(PARTITIONS):
        last_t, last_v = None, None
        for t, s in window:
            v = s.get(p)
            if v is None:
                continue
            if last_v is None or v != last_v:
                if last_t is not None and t >= start:
                    longest[p] = max(longest.get(p, 0.0), t - max(last_t, start))
                last_t, last_v = t, v
    values = sorted(longest.values())
    kept = [v for v in values if v < 2.5]
    moved = [v for v in values if v >= 2.5]
    return (max(kept) if kept else 0.0, max(moved) if moved else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--protocols", default="classic,consumer")
    args = parser.parse_args()
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-handover-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    with ExitStack() as stack:
        bootstrap = broker(stack)
        print(f"`python bench/bench_handover.py --rate {args.rate}`: 12 partitions, {args.rate} events/s; the "
              "longest time a partition's committed offset did not move (commits come about every 1.1 s)")
        print(f"{'protocol':<10} {'event':<6} {'kept partitions':>16} {'worst partition':>16}")
        for protocol in args.protocols.split(","):
            result = measure(bootstrap, protocol, args.rate, workdir)
            for event, (kept, moved) in result.items():
                print(f"{protocol:<10} {event:<6} {kept:>15.1f}s {max(kept, moved):>15.1f}s")
    print(f"worker logs: {workdir}")


if __name__ == "__main__":
    main()
