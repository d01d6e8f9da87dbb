"""The worker's write protocol survives a crash at any flush, whatever subset of its writes lands.

A pure simulation of what :mod:`streams.app` does with Kafka: records are consumed
from two partitions, handled, ticked, persisted with :meth:`EventProcessor.persist`,
acknowledged and (sometimes) committed. A "broker" keeps the writes each flush
acknowledged; at the chosen flush the process dies and an *arbitrary* subset of the
writes still in flight survives (harsher than Kafka, which keeps a per-partition
prefix). The restarted worker recovers its table from the surviving changelog and
re-reads from the committed offsets. Stage 2 upserts every surviving partial; the
merged aggregates must equal the exact oracle, and no on-time event may turn late.
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


class Crash(Exception):
    """The worker process died."""


class Broker:
    """Writes land when a flush returns; at flush number ``crash_at`` a random subset lands and the worker dies."""

    def __init__(self, rng: random.Random, crash_at: int | None) -> None:
        self.rng = rng
        self.crash_at = crash_at
        self.flushes = 0
        self.pending: list[tuple[str, Any]] = []
        self.changelog: list[tuple[str, Any]] = []  # (entry key, value or None), in landing order
        self.outputs: list[Output] = []

    def write_changelog(self, _partition: int, key: str, value: Any) -> None:
        self.pending.append(("changelog", (key, value)))

    def send(self, output: Output) -> None:
        self.pending.append(("output", output))

    def flush(self) -> None:
        self.flushes += 1
        if self.flushes == self.crash_at:
            self._land([w for w in self.pending if self.rng.random() < 0.5])
            raise Crash
        self._land(self.pending)

    def _land(self, writes: list[tuple[str, Any]]) -> None:
        for kind, write in writes:
            (self.changelog if kind == "changelog" else self.outputs).append(write)
        self.pending = []

    def recovered_table(self) -> dict[str, Any]:
        """The table faust rebuilds from the changelog: the last value per key, tombstones delete."""
        table: dict[str, Any] = {}
        for key, value in self.changelog:
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        return table


def make_stream(rng: random.Random) -> tuple[dict[int, list[InMessage]], dict[tuple[str, str], Stats]]:
    """Three buckets of events on two partitions, and the oracle.

    Each key lives on one partition, except "hot", split over both, and "mover", which
    the directory moves from partition 0 to 1 in the middle of the second bucket.
    """
    ids = UUIDv7Generator()
    records: dict[int, list[InMessage]] = {0: [], 1: []}
    oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
    for ts in sorted(T0 + rng.randrange(3 * 60_000) for _ in range(600)):
        key = rng.choice(["hot"] * 5 + ["mover"] * 2 + [f"k{i}" for i in range(12)])
        if key == "hot":
            salt = rng.randrange(2)
            partition = salt
        elif key == "mover":
            salt, partition = 0, int(ts >= T0 + 90_000)
        else:
            salt, partition = -1, int(key[1:]) % 2
        value = float(rng.randrange(-1000, 1000))
        oracle[(BUCKETS.bucket_of(ts).label, key)].add(value)
        records[partition].append(_message(partition, len(records[partition]), ids, key, ts, value, salt))
    sentinel = T0 + 3 * 60_000 + 10_000  # past the last bucket's close on both partitions
    for partition in (0, 1):
        for _ in range(SETTINGS.watermark_agreement):  # so many records must agree before a watermark moves
            records[partition].append(_message(partition, len(records[partition]), ids, f"s{partition}", sentinel, 0.0))
    return records, oracle


def _message(partition: int, offset: int, ids: UUIDv7Generator, key: str, ts: int, value: float,
             salt: int = -1) -> InMessage:
    payload = CODEC.encode({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": ts, "key": key, "value": value,
                            "attributes": {}})
    return InMessage("events", partition, offset, key.encode(), payload,
                     {"content-type": b"application/json", "streams-salt": str(salt).encode(), "ts": str(ts).encode()})


def _ts(msg: InMessage) -> int:
    return int(msg.headers["ts"])


def run_worker(broker: Broker, records: dict[int, list[InMessage]], committed: dict[int, int],
               rng: random.Random) -> None:
    """One worker process: from the committed offsets to the end of both partitions, or until it crashes."""
    clock = [T0]
    processor = EventProcessor(SETTINGS, Stage1Store(broker.recovered_table(), broker.write_changelog),
                               instance="sim", clock_ms=lambda: clock[0])
    processor.assign([("events", 0), ("events", 1)])
    position = dict(committed)
    handled = dict(committed)

    def persist_and_ack() -> None:
        processor.persist(broker.flush)
        if rng.random() < 0.5:  # faust commits acknowledged offsets on an interval, not at every ack
            committed.update(handled)

    while any(position[p] < len(records[p]) for p in (0, 1)):
        # Alternate partitions by event time, as a fetch over both would deliver them.
        p = min((p for p in (0, 1) if position[p] < len(records[p])), key=lambda q: _ts(records[q][position[q]]))
        msg = records[p][position[p]]
        clock[0] = max(clock[0], _ts(msg) + 500)
        for output in processor.handle(msg):
            broker.send(output)
        position[p] += 1
        handled[p] = position[p]
        if rng.random() < 0.1:  # a timer tick: close what is due, then persist before the next record
            for output in processor.tick().outputs:
                broker.send(output)
            persist_and_ack()
    for _ in range(2):
        for output in processor.tick().outputs:
            broker.send(output)
        persist_and_ack()
    committed.update(handled)


def merged_aggregates(outputs: list[Output]) -> dict[tuple[str, str], dict[str, Any]]:
    merger = PartialMerger({}, lambda *a: None, BUCKETS, 10**12)
    merged = {}
    for out in outputs:
        if out.role == "partials":
            rec = merger.apply(0, out.record)
            merged[(rec["bucket"], rec["key"])] = rec
    return merged


def total_flushes(seed: int) -> int:
    rng = random.Random(seed)
    records, _ = make_stream(rng)
    broker = Broker(random.Random(0), crash_at=None)
    run_worker(broker, records, {0: 0, 1: 0}, rng)
    return broker.flushes


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_at_any_flush_with_any_subset_of_writes_landing_leaves_every_aggregate_exact(seed: int) -> None:
    flushes = total_flushes(seed)
    assert flushes > 10
    for crash_at in range(1, flushes + 1):
        rng = random.Random(seed)  # the same stream and schedule as the run without a crash
        records, oracle = make_stream(rng)
        broker = Broker(random.Random(seed * 1000 + crash_at), crash_at)
        committed = {0: 0, 1: 0}
        with pytest.raises(Crash):
            run_worker(broker, records, committed, rng)
        broker.crash_at = None
        run_worker(broker, records, committed, rng)  # the restart

        merged = merged_aggregates(broker.outputs)
        for slot, stats in oracle.items():
            got = merged.get(slot)
            assert got is not None, f"crash at flush {crash_at}: {slot} lost"
            assert (got["count"], got["sum"], got["min"], got["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max), f"crash at flush {crash_at}: {slot}"
        late = [o.record["event_id"] for o in broker.outputs if o.role == "late_events"]
        assert late == [], f"crash at flush {crash_at}: on-time events turned late"


def test_the_same_simulation_without_a_crash_is_exact_and_closes_every_bucket_once() -> None:
    rng = random.Random(99)
    records, oracle = make_stream(rng)
    broker = Broker(rng, crash_at=None)
    run_worker(broker, records, {0: 0, 1: 0}, rng)
    merged = merged_aggregates(broker.outputs)
    assert {slot: (m["count"], m["sum"]) for slot, m in merged.items() if not slot[1].startswith("s")} == \
        {slot: (s.count, s.sum) for slot, s in oracle.items()}
    closed = [o.record["bucket"] for o in broker.outputs if o.role == "bucket_closed"]
    assert sorted(closed) == sorted(set(closed)) and len(closed) == 3
    open_index = str(BUCKETS.bucket_of(T0 + 3 * 60_000 + 10_000).index)
    left = [k for k in broker.recovered_table() if not k.startswith("meta|")]
    bucket_of = {k: k.split("|", 2)[1] if k.startswith("ids|") else k.split("|", 1)[0] for k in left}
    assert left and set(bucket_of.values()) == {open_index}, "closed buckets leave no state behind"
