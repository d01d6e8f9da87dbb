"""Partitions handed between two workers stay exact, whichever way they move.

A pure simulation of a consumer group of two :class:`EventProcessor` workers sharing
one changelog and one committed-offset map, with faust's in-memory store semantics:
on assignment faust replays the changelog of each newly assigned partition into the
worker's table (last value per key, tombstones delete), and on revocation it forgets
only the keys it recovered itself, so a worker's own writes of a revoked partition
stay in its table unless the worker drops them. Every rebalance seeks each assigned
partition back to its committed offset; what was handled but not persisted is read
again. Stage 2 upserts every partial in the order they were sent; the merged
aggregates must equal the exact oracle and no on-time event may turn late.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from streams.core.aggregate import Stats
from streams.core.config import WorkerSettings
from streams.core.ids import UUIDv7Generator
from streams.core.serde import JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.worker.merge import PartialMerger
from streams.worker.processor import EventProcessor, InMessage, Output, Stage1Store

T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)
SETTINGS = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="1h", retention="1h",
                          hot_window_s=1.0)
BUCKETS = TimeBuckets("1m", grace="5s")
CODEC = JsonCodec("event")
PARTITIONS = (0, 1, 2, 3)


class Cluster:
    """The shared parts: one changelog (partition, key, value) in landing order, committed offsets, outputs."""

    def __init__(self) -> None:
        self.changelog: list[tuple[int, str, Any]] = []
        self.outputs: list[Output] = []
        self.committed = {p: 0 for p in PARTITIONS}


class Worker:
    """One worker process: a processor on its own table, and its read positions."""

    def __init__(self, cluster: Cluster, clock: list[int], name: str) -> None:
        self.cluster = cluster
        self.table: dict[str, Any] = {}
        self.processor = EventProcessor(SETTINGS, Stage1Store(self.table, self._write), instance=name,
                                        clock_ms=lambda: clock[0])
        self.owned: set[int] = set()
        self.position: dict[int, int] = {}
        self.handled: dict[int, int] = {}
        self._pending: list[tuple[str, Any]] = []

    def _write(self, partition: int, key: str, value: Any) -> None:
        self._pending.append(("changelog", (partition, key, value)))

    def send(self, output: Output) -> None:
        self._pending.append(("output", output))

    def _flush(self) -> None:
        for kind, write in self._pending:
            (self.cluster.changelog if kind == "changelog" else self.cluster.outputs).append(write)
        self._pending = []

    def assign(self, partitions: set[int]) -> None:
        """faust's rebalance as this worker sees it: forget unflushed writes, recover new partitions, seek."""
        self._pending = []  # the rebalance revoked everything first: nothing unflushed survives it as acked
        for p in sorted(partitions - self.owned):  # faust's recovery of a newly assigned changelog partition
            for partition, key, value in self.cluster.changelog:
                if partition != p:
                    continue
                if value is None:
                    self.table.pop(key, None)
                else:
                    self.table[key] = value
        self.owned = set(partitions)
        self.processor.assign(("events", p) for p in partitions)
        self.processor.store.mark_stale()
        self.position = {p: self.cluster.committed[p] for p in partitions}
        self.handled = dict(self.position)

    def step(self, records: dict[int, list[InMessage]], clock: list[int]) -> bool:
        """Handle the next record (by event time over the owned partitions); False when none is left."""
        ready = [p for p in self.owned if self.position[p] < len(records[p])]
        if not ready:
            return False
        p = min(ready, key=lambda q: int(records[q][self.position[q]].headers["ts"]))
        msg = records[p][self.position[p]]
        clock[0] = max(clock[0], int(msg.headers["ts"]) + 500)
        for output in self.processor.handle(msg):
            self.send(output)
        self.position[p] += 1
        self.handled[p] = self.position[p]
        return True

    def tick_and_persist(self) -> None:
        for output in self.processor.tick().outputs:
            self.send(output)
        self.processor.persist(self._flush)
        self.cluster.committed.update(self.handled)


def make_stream(rng: random.Random) -> tuple[dict[int, list[InMessage]], dict[tuple[str, str], Stats]]:
    """Four buckets of events on four partitions (each key on one partition), and the oracle."""
    ids = UUIDv7Generator()
    records: dict[int, list[InMessage]] = {p: [] for p in PARTITIONS}
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    for ts in sorted(T0 + rng.randrange(4 * 60_000) for _ in range(1200)):
        key = f"k{rng.randrange(16)}"
        partition = int(key[1:]) % len(PARTITIONS)
        value = float(rng.randrange(-1000, 1000))
        oracle[(BUCKETS.bucket_of(ts).label, key)].add(value)
        records[partition].append(_message(partition, len(records[partition]), ids, key, ts, value))
    sentinel = T0 + 4 * 60_000 + 10_000  # past the last bucket's close on every partition
    for partition in PARTITIONS:
        for _ in range(SETTINGS.watermark_agreement):
            records[partition].append(_message(partition, len(records[partition]), ids, f"s{partition}", sentinel, 0.0))
    return records, oracle


def _message(partition: int, offset: int, ids: UUIDv7Generator, key: str, ts: int, value: float) -> InMessage:
    payload = CODEC.encode({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": ts, "key": key, "value": value,
                            "attributes": {}})
    return InMessage("events", partition, offset, key.encode(), payload,
                     {"content-type": b"application/json", "ts": str(ts).encode()})


def run_group(seed: int, schedule: list[tuple[set[int], set[int]]]) -> tuple[Cluster, dict[tuple[str, str], Stats]]:
    """Run two workers through ``schedule``: each phase assigns (A's partitions, B's) and handles a share of records."""
    rng = random.Random(seed)
    records, oracle = make_stream(rng)
    cluster, clock = Cluster(), [T0]
    workers = [Worker(cluster, clock, "a"), Worker(cluster, clock, "b")]
    total = sum(len(r) for r in records.values())
    for phase, assignment in enumerate(schedule):
        for worker, partitions in zip(workers, assignment):
            if partitions != worker.owned or phase == 0:
                worker.assign(partitions)
        last = phase == len(schedule) - 1
        budget = total if last else total // (len(schedule) + 1)
        while budget > 0:
            moved = False
            for worker in workers:
                if worker.owned and worker.step(records, clock):
                    moved = True
                    budget -= 1
                    if rng.random() < 0.05:
                        worker.tick_and_persist()
            if not moved:
                break
        # A phase ends with a rebalance: some workers persisted, others are cut mid-way.
        for worker in workers:
            if worker.owned and (last or rng.random() < 0.5):
                worker.tick_and_persist()
    for _ in range(2):
        for worker in workers:
            if worker.owned:
                worker.tick_and_persist()
    return cluster, oracle


def merged(outputs: list[Output]) -> dict[tuple[str, str], tuple[int, float]]:
    merger = PartialMerger({}, lambda *a: None, BUCKETS, 10**12)
    out = {}
    for output in outputs:
        if output.role == "partials":
            rec = merger.apply(0, output.record)
            out[(rec["bucket"], rec["key"])] = (rec["count"], rec["sum"])
    return out


SCHEDULES = {
    # A alone, B joins and takes half, B dies and A takes all back (the two-worker kill test's shape).
    "join then kill": [({0, 1, 2, 3}, set()), ({0, 1}, {2, 3}), ({0, 1, 2, 3}, set())],
    # Partitions go back and forth several times.
    "back and forth": [({0, 1, 2, 3}, set()), ({0, 2}, {1, 3}), ({1, 3}, {0, 2}), ({0, 1, 2, 3}, set()),
                       ({2, 3}, {0, 1})],
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_partitions_handed_between_workers_leave_every_aggregate_exact(name: str, seed: int) -> None:
    cluster, oracle = run_group(seed, SCHEDULES[name])
    got = {slot: v for slot, v in merged(cluster.outputs).items() if not slot[1].startswith("s")}
    want = {slot: (s.count, s.sum) for slot, s in oracle.items()}
    wrong = {slot: (got.get(slot), want[slot]) for slot in want if got.get(slot) != want[slot]}
    assert not wrong, f"{len(wrong)} of {len(want)} slots wrong, e.g. {list(wrong.items())[:3]}"
    late = [o for o in cluster.outputs if o.role == "late_events"]
    assert late == [], f"{len(late)} on-time events turned late"


def test_a_revoked_partition_leaves_nothing_of_its_own_in_the_table() -> None:
    cluster, clock = Cluster(), [T0]
    records, _ = make_stream(random.Random(7))
    worker = Worker(cluster, clock, "a")
    worker.assign({0, 1, 2, 3})
    for _ in range(200):
        worker.step(records, clock)
    worker.tick_and_persist()
    assert any(_slot(k, v) == 3 for k, v in worker.table.items())
    worker.assign({0, 1, 2})
    assert worker.table and all(_slot(k, v) != 3 for k, v in worker.table.items())


def _slot(key: str, value: Any) -> int:
    return int(key.rsplit("|", 1)[1]) if key.startswith("meta|") else int(value[0])
