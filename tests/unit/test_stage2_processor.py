"""Stage 2 as a consumer-loop stage (PartialsProcessor): exact merge, dead letters, persist order, handover."""

from __future__ import annotations

from typing import Any

from streams.core.aggregate import Stats
from streams.core.partials import partial_record
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.worker.merge import PartialsProcessor
from streams.worker.processor import InMessage

BUCKETS = TimeBuckets("1m")
T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)
CODEC = AvroCodec("aggregate")


def partial(key: str, slot: int, *values: float) -> bytes:
    stats = Stats.empty()
    for v in values:
        stats.add(v)
    return CODEC.encode(partial_record(BUCKETS.bucket_of(T0), key, slot, stats))


def msg(partition: int, offset: int, value: bytes, key: bytes = b"k") -> InMessage:
    return InMessage("partials", partition, offset, key, value, {})


def stage() -> tuple[PartialsProcessor, list[tuple[int, str, Any]]]:
    writes: list[tuple[int, str, Any]] = []
    processor = PartialsProcessor({}, lambda p, k, v: writes.append((p, k, v)), BUCKETS, 3_600_000,
                                  clock_ms=lambda: T0 + 120_000)
    processor.assign([("partials", 0), ("partials", 1)])
    return processor, writes


def test_partials_of_every_slot_merge_into_the_exact_aggregate_and_a_repeat_changes_nothing() -> None:
    processor, _ = stage()
    out = processor.handle_batch([msg(0, 0, partial("k", 0, 1.0, 2.0)), msg(0, 1, partial("k", 3, 5.0)),
                                  msg(0, 1, partial("k", 3, 5.0))])  # the last: a second copy of offset 1
    assert [o.role for o in out] == ["aggregates", "aggregates"]
    assert (out[-1].record["count"], out[-1].record["sum"]) == (3, 8.0)


def test_a_corrupt_partial_is_dead_lettered_naming_the_field_and_the_next_one_is_merged() -> None:
    processor, _ = stage()
    out = processor.handle_batch([msg(1, 0, b"\x00garbage"), msg(1, 1, partial("k", 1, 4.0))])
    assert [o.role for o in out] == ["dead_letters", "aggregates"]
    assert out[0].record["field"] and out[0].record["source_offset"] == 0
    assert processor.dead_lettered == 1 and processor.applied == 1


def test_persist_makes_the_aggregates_durable_before_the_checkpoint_that_vouches_for_them() -> None:
    processor, writes = stage()
    processor.handle_batch([msg(0, 7, partial("k", 0, 1.0))])
    order: list[str] = []
    processor.persist(lambda: order.append(f"flush after {len(writes)} writes"))
    assert order == ["flush after 1 writes", "flush after 2 writes"]  # the entry, then the checkpoint
    assert writes[-1][1] == "@offset|0" and processor.resume_offset(("partials", 0)) == 8


def test_a_partition_given_away_takes_its_entries_and_checkpoint_with_it() -> None:
    processor, _ = stage()
    processor.handle_batch([msg(0, 0, partial("a", 0, 1.0)), msg(1, 0, partial("b", 1, 1.0))])
    processor.persist(lambda: None)
    processor.assign([("partials", 1)])
    assert {v[0] if isinstance(v, list) else k for k, v in processor.data.items()} == {1, "@offset|1"}
    assert processor.resume_offset(("partials", 0)) == 0
