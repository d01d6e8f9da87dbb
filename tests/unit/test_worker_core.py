"""The worker core without Kafka: conservation, emit-on-close, exact two-stage merge, restart dedup."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from streams.core.aggregate import Stats
from streams.core.config import WorkerSettings
from streams.core.ids import UUIDv7Generator
from streams.core.partials import LATE_SLOT, partial_record
from streams.core.serde import AvroCodec, JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.worker.merge import PartialMerger
from streams.worker.processor import EventProcessor, InMessage, Stage1Store

T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)  # a minute boundary
# One record moves a partition's watermark here (agreement 1), so each test drives it with one
# event; test_worker_watermarks.py covers the default, outlier-proof agreement of two.
SETTINGS = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="10s", retention="10m",
                          hot_window_s=1.0, watermark_agreement=1)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Harness:
    """A processor over a dict store, recording every changelog write."""

    def __init__(self, data: dict[str, Any] | None = None, clock: Clock | None = None) -> None:
        self.data: dict[str, Any] = {} if data is None else data
        self.changelog: list[tuple[int, str, Any]] = []
        self.clock = clock or Clock(T0)
        self.processor = EventProcessor(
            SETTINGS, Stage1Store(self.data, lambda p, k, v: self.changelog.append((p, k, v))),
            instance="test", clock_ms=self.clock)
        self.processor.assign([("events", 0), ("events", 1)])
        self.offsets = defaultdict(int)
        self.ids = UUIDv7Generator()

    def event(self, key: str, ts: int, value: float | None, *, partition: int = 0, salt: int = -1,
              payload: bytes | None = None, offset: int | None = None) -> list:
        if payload is None:
            payload = JsonCodec("event").encode({"id": str(self.ids.next()), "id_kind": "uuid7", "ts_ms": ts,
                                                 "key": key, "value": value, "attributes": {}})
        if offset is None:
            offset = self.offsets[partition]
            self.offsets[partition] += 1
        headers = {"content-type": b"application/json", "streams-salt": str(salt).encode()}
        return self.processor.handle(InMessage("events", partition, offset, key.encode(), payload, headers))


def test_on_time_events_are_emitted_only_after_end_plus_grace_and_merge_to_the_exact_oracle() -> None:
    h = Harness()
    rng = random.Random(5)
    oracle: dict[str, Stats] = defaultdict(Stats.empty)
    for i in range(2000):
        key = f"k{rng.randrange(20)}"
        value = rng.uniform(-1e6, 1e6) if i % 7 else 1e-9 * i
        salt = rng.randrange(3) if key == "k0" else -1  # k0 is split three ways
        assert h.event(key, T0 + rng.randrange(60_000), value, partition=i % 2, salt=salt) == []
        oracle[key].add(value)
    h.clock.now = T0 + 60_000 + 5_000  # the bucket ends; grace not yet passed for the watermark
    h.event("k1", T0 + 60_000 + 5_000, 1.0, partition=0)
    h.event("k1", T0 + 60_000 + 5_000, 1.0, partition=1)
    assert h.processor.tick().closed_buckets == ()
    h.clock.now += 2_000
    h.event("k1", T0 + 60_000 + 6_500, 1.0, partition=0)
    h.event("k1", T0 + 60_000 + 6_500, 1.0, partition=1)
    result = h.processor.tick()
    assert result.closed_buckets == (TimeBuckets("1m").bucket_of(T0).label,)

    merger = PartialMerger({}, lambda *a: None, TimeBuckets("1m"), 600_000)
    merged = {}
    for out in result.outputs:
        if out.role == "partials":
            merged[out.record["key"]] = merger.apply(0, out.record)
    assert {k for k, s in oracle.items()} == set(merged)
    for key, stats in oracle.items():
        assert (merged[key]["count"], merged[key]["sum"], merged[key]["min"], merged[key]["max"]) == \
            (stats.count, stats.sum, stats.min, stats.max)
    closed = [o.record for o in result.outputs if o.role == "bucket_closed"]
    assert closed[0]["events"] == 2000 and closed[0]["keys"] == 20
    for out in result.outputs:
        AvroCodec("aggregate" if out.role == "partials" else "bucket_closed").encode(out.record)


def test_every_record_is_counted_once_as_on_time_late_or_dead_letter() -> None:
    h = Harness()
    outputs = []
    outputs += h.event("a", T0 + 1000, 1.0)
    outputs += h.event("b", T0 + 2000, None, payload=b"{not json")
    outputs += h.event("c", T0 + 2000, None, payload=b'{"id": "nope", "id_kind": "uuid7", "ts_ms": 1, "key": "c"}')
    outputs += h.event(" ", T0 + 3000, 1.0)
    outputs += h.event("f", T0 + 10 * 3_600_000, 1.0)  # far in the future
    outputs += h.event("s", T0 + 4000, 1.0, salt=10**9)  # hostile salt header
    h.clock.now = T0 + 3 * 60_000
    h.event("a", T0 + 3 * 60_000, 1.0, partition=0)
    h.event("a", T0 + 3 * 60_000, 1.0, partition=1)
    h.processor.tick()
    outputs += h.event("late", T0 + 5000, 2.0)
    roles = [o.role for o in outputs]
    assert roles == ["dead_letters"] * 5 + ["late_events"]
    reasons = [o.record["reason"] for o in outputs[:5]]
    assert "invalid JSON" in reasons[0] and reasons[1].startswith("malformed id") and reasons[2] == "empty key"
    assert reasons[3] == "timestamp in the future" and reasons[4] == "malformed streams-salt header"
    assert outputs[5].record["bucket_start_ms"] == T0 and outputs[5].record["lateness_ms"] >= 0
    c = h.processor.counts()
    assert c.received == 9 and c.received == c.on_time + c.late + c.too_old + c.dead_lettered
    assert (c.on_time, c.late + c.too_old, c.dead_lettered) == (3, 1, 5)
    AvroCodec("late_event").encode(outputs[5].record)
    for out in outputs[:5]:
        AvroCodec("dead_letter").encode(out.record)


def test_a_restarted_worker_skips_records_it_had_folded_and_does_not_reopen_closed_buckets() -> None:
    h = Harness()
    for i in range(50):
        h.event(f"k{i % 5}", T0 + 60_000 + i, float(i))  # bucket 2, stays open
    h.event("old", T0 + 10, 1.0)  # bucket 1
    h.clock.now = T0 + 60_000 + 20_000
    h.event("x", T0 + 60_000 + 20_000, 0.0, partition=1)
    h.processor.tick()  # closes bucket 1 only
    # "Recovery": a new processor over the same store, as faust rebuilds it from the changelog.
    h.processor.persist(lambda: None)
    assert {k for _, k, v in h.changelog if v is not None} >= {k for k in h.data if not k.startswith("meta|")}
    h2 = Harness(data=dict(h.data), clock=h.clock)
    for offset in range(0, 20):  # records re-read after the crash
        h2.event(f"k{offset % 5}", T0 + 60_000 + offset, float(offset), offset=offset)
    late = h2.event("old", T0 + 20, 1.0, offset=999)  # the watermark is short of its close; the checkpoint is not
    assert [o.role for o in late] == ["late_events"]
    c = h2.processor.counts()
    assert (c.duplicates, c.received, c.late) == (20, 1, 1)
    h2.clock.now = T0 + 2 * 60_000 + 30_000
    h2.event("x", h2.clock.now, 0.0, partition=0, offset=1000)
    h2.event("x", h2.clock.now, 0.0, partition=1, offset=1000)
    partials = [o.record for o in h2.processor.tick().outputs if o.role == "partials"]
    by_key = {p["key"]: p for p in partials}
    assert by_key["k0"]["count"] == 10 and by_key["k0"]["sum"] == sum(float(i) for i in range(50) if i % 5 == 0)


def test_replay_slot_and_repeated_partials_leave_the_merged_aggregate_unchanged() -> None:
    merger = PartialMerger({}, lambda *a: None, TimeBuckets("1m"), 600_000)
    bucket = TimeBuckets("1m").bucket_of(T0)
    s1, s2, late = Stats.empty(), Stats.empty(), Stats.empty()
    for v in (1.0, 2.0):
        s1.add(v)
    s2.add(10.0)
    late.add(100.0)
    merger.apply(0, partial_record(bucket, "k", 0, s1))
    merger.apply(0, partial_record(bucket, "k", 1, s2))
    once = merger.apply(0, partial_record(bucket, "k", LATE_SLOT, late))
    twice = merger.apply(0, partial_record(bucket, "k", LATE_SLOT, late))
    again = merger.apply(0, partial_record(bucket, "k", 0, s1))
    assert once == twice == again
    assert (once["count"], once["sum"], once["min"], once["max"]) == (4, 113.0, 1.0, 100.0)


def test_a_worker_running_through_many_buckets_keeps_a_bounded_number_in_memory() -> None:
    h = Harness()
    most_open = 0
    for b in range(300):  # five hours of one-minute buckets
        for i in range(20):
            ts = T0 + b * 60_000 + i * 3_000
            h.clock.now = ts
            h.event(f"k{i % 7}", ts, 1.0, partition=i % 2)
        h.processor.tick()
        h.processor.persist(lambda: None)
        most_open = max(most_open, h.processor.open_buckets())
    entries = [k for k in h.data if not k.startswith("meta|")]
    assert most_open <= 2, "only the current bucket and the one in its grace period hold state"
    assert len(entries) <= 2 * 7 * 2
    assert h.processor.roller.open_bucket_count() <= 2, "the roller keeps state only for buckets not closed yet"


def test_a_key_too_long_to_sketch_is_dead_lettered_naming_the_field_and_the_tick_survives() -> None:
    h = Harness()
    long_key = "x" * 1025  # one byte past what sketches, notices and the directory carry
    (out,) = h.event(long_key, T0 + 1000, 1.0)
    assert (out.role, out.record["field"]) == ("dead_letters", "key")
    assert out.record["reason"].startswith("key too long")
    assert h.event("é" * 512, T0 + 1000, 1.0) == []  # 1,024 bytes of UTF-8: at the limit, fine
    h.processor.tick()  # the poison pill never reached the sketch: the summary builds
    c = h.processor.counts()
    assert (c.received, c.on_time, c.dead_lettered) == (2, 1, 1)


def test_a_late_event_with_a_null_content_type_header_keeps_its_record_and_the_default_type() -> None:
    h = Harness()
    h.clock.now = T0 + 3 * 60_000
    h.event("a", T0 + 3 * 60_000, 1.0, partition=0)
    h.event("a", T0 + 3 * 60_000, 1.0, partition=1)
    h.processor.tick()
    payload = JsonCodec("event").encode({"id": str(h.ids.next()), "id_kind": "uuid7", "ts_ms": T0 + 5000,
                                         "key": "late", "value": 2.0, "attributes": {}})
    headers = {"content-type": None, "streams-salt": b"-1"}
    (out,) = h.processor.handle(InMessage("events", 0, 99, b"late", payload, headers))  # type: ignore[arg-type]
    assert out.role == "late_events" and out.record["original"] == payload
    assert out.record["content_type"] == "application/json"
    AvroCodec("late_event").encode(out.record)


def test_partitions_read_are_reported_with_their_event_counts_in_the_summary() -> None:
    h = Harness()
    for i in range(30):
        h.event(f"k{i}", T0 + 1000, 1.0, partition=i % 3 and 1)
    summary = h.processor.tick().summary
    assert dict(summary.partition_counts) == {0: 10, 1: 20}


def test_an_event_time_past_the_time_arithmetic_is_dead_lettered_not_raised() -> None:
    h = Harness()
    roles = []
    for ts in (2**63 - 1, -(2**63), 2**62 + 5):  # valid Avro longs a bad clock or a hostile producer can send
        out = h.event("k", ts, 1.0)
        roles += [(o.role, o.record["field"]) for o in out]
    assert roles == [("dead_letters", "ts_ms")] * 3
    c = h.processor.counts()
    assert (c.received, c.dead_lettered) == (3, 3)


def test_a_batch_is_handled_exactly_as_its_records_one_at_a_time() -> None:
    rng = random.Random(11)
    ids = UUIDv7Generator()
    codec = JsonCodec("event")
    msgs = []
    for offset in range(600):
        partition = rng.randrange(2)
        ts = T0 + rng.randrange(-120_000, 90_000)  # some late once the watermark moves, some far behind
        kind = rng.randrange(20)
        payload = b"{broken" if kind == 0 else codec.encode({
            "id": "nope" if kind == 1 else str(ids.next()), "id_kind": "uuid7", "ts_ms": ts,
            "key": " " if kind == 2 else f"k{rng.randrange(7)}", "value": float(rng.randrange(100)), "attributes": {}})
        headers = {"content-type": b"application/json", "streams-salt": b"x" if kind == 3 else b"-1"}
        msgs.append(InMessage("events", partition, offset, b"k", payload, headers))
    one, batched = Harness(clock=Clock(T0 + 70_000)), Harness(clock=Clock(T0 + 70_000))
    singles = [out for msg in msgs for out in one.processor.handle(msg)]
    batch = [out for i in range(0, len(msgs), 97) for out in batched.processor.handle_batch(msgs[i:i + 97])]
    assert singles == batch and any(o.role == "late_events" for o in batch) and any(o.role == "dead_letters" for o in batch)
    assert one.processor.counts() == batched.processor.counts()
    one.processor.persist(lambda: None)
    batched.processor.persist(lambda: None)
    assert one.data == batched.data
    s1, s2 = (h.processor.sketch.summary((T0 + 70_000) / 1000, top=16) for h in (one, batched))
    assert s1 == s2


def test_a_second_copy_of_a_record_in_one_assignment_is_a_duplicate_not_a_second_event() -> None:
    """librdkafka can hand over records fetched before a rebalance that gave the partition back, then fetch them again."""
    h = Harness()
    h.clock.now = T0 + 3 * 60_000
    h.event("a", T0 + 3 * 60_000, 1.0, partition=0)
    h.event("a", T0 + 3 * 60_000, 1.0, partition=1)
    h.processor.tick()  # the first buckets close
    codec, ids = JsonCodec("event"), UUIDv7Generator()
    late = codec.encode({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": T0 + 5, "key": "late", "value": 1.0,
                         "attributes": {}})
    on_time = codec.encode({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": T0 + 3 * 60_000 + 1, "key": "b",
                            "value": 2.0, "attributes": {}})
    headers = {"content-type": b"application/json"}
    batch = [InMessage("events", 0, 10, b"k", late, headers), InMessage("events", 0, 11, b"k", on_time, headers)]
    first = h.processor.handle_batch(batch)
    again = h.processor.handle_batch(batch)  # the same offsets once more, same assignment
    assert [o.role for o in first] == ["late_events"] and again == []
    c = h.processor.counts()
    assert (c.received, c.late, c.duplicates) == (4, 1, 2)
