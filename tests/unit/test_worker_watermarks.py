"""The processor with its default settings: outlier-proof watermarks, per-partition lateness across a
handover, and event-ID dedup (issue 14, items 3, 4 and 5)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from streams.core.config import WorkerSettings
from streams.core.ids import UUIDv7Generator
from streams.core.serde import JsonCodec
from streams.worker.merge import PartialMerger
from streams.core.time.buckets import TimeBuckets
from streams.worker.processor import EventProcessor, FetchState, InMessage, Output, Stage1Store

T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)
SETTINGS = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="10s", retention="10m",
                          hot_window_s=1.0)
CODEC = JsonCodec("event")


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def payload(key: str, ts: int, value: float, event_id: str) -> bytes:
    return CODEC.encode({"id": event_id, "id_kind": "uuid7", "ts_ms": ts, "key": key, "value": value,
                         "attributes": {}})


def message(partition: int, offset: int, body: bytes, key: str) -> InMessage:
    return InMessage("events", partition, offset, key.encode(), body,
                     {"content-type": b"application/json", "streams-salt": b"-1"})


def worker(data: dict[str, Any], clock: Clock, partitions: list[int], name: str = "w") -> EventProcessor:
    processor = EventProcessor(SETTINGS, Stage1Store(data, lambda *a: None), instance=name, clock_ms=clock)
    processor.assign([("events", p) for p in partitions])
    return processor


def merged(outputs: list[Output]) -> dict[tuple[str, str], int]:
    merger = PartialMerger({}, lambda *a: None, TimeBuckets("1m"), 10**12)
    out = {}
    for o in outputs:
        if o.role == "partials":
            rec = merger.apply(0, o.record)
            out[(rec["bucket"], rec["key"])] = rec["count"]
    return out


def test_one_event_stamped_50_minutes_ahead_then_a_lull_does_not_make_the_following_events_late() -> None:
    clock = Clock(T0)
    p = worker({}, clock, [0])
    ids = UUIDv7Generator()
    offset = 0
    outputs: list[Output] = []
    for i in range(20):
        clock.now = T0 + i * 100
        outputs += p.handle(message(0, offset, payload("k", clock.now, 1.0, str(ids.next())), "k"))
        offset += 1
    outputs += p.handle(message(0, offset, payload("bad-clock", T0 + 50 * 60_000, 1.0, str(ids.next())), "bad-clock"))
    offset += 1
    clock.now += 40_000  # a lull longer than idle_timeout
    outputs += p.tick().outputs
    real = 0
    for i in range(1_180):
        clock.now += 50
        outputs += p.handle(message(0, offset, payload(f"r{i % 7}", clock.now - 300, 1.0, str(ids.next())), "r"))
        offset += 1
        real += 1
        if i % 100 == 0:
            outputs += p.tick().outputs
    assert [o for o in outputs if o.role in ("late_events", "dead_letters")] == []
    counts = p.counts()
    assert (counts.on_time, counts.late) == (20 + 1 + real, 0)  # the outlier waits, on time, in its bucket


def test_a_partition_taken_over_from_a_worker_that_was_behind_keeps_its_events_on_time_and_exact() -> None:
    """Worker A owns partitions 0 and 1 and is killed; B, well ahead on partition 2, takes partition 1 over."""
    clock = Clock(T0)
    ids = UUIDv7Generator()
    stream: dict[int, list[InMessage]] = {1: [], 2: []}
    oracle: Counter[tuple[str, str]] = Counter()
    buckets = TimeBuckets("1m")
    for i in range(3_000):  # three minutes on each partition
        ts = T0 + i * 60
        for partition in (1, 2):
            key = f"p{partition}k{i % 5}"
            stream[partition].append(message(partition, len(stream[partition]),
                                             payload(key, ts, 1.0, str(ids.next())), key))
            oracle[(buckets.bucket_of(ts).label, key)] += 1
    for partition in (1, 2):  # the stream goes on past the last bucket's close
        for j in range(2):
            key = f"end{partition}"
            ts = T0 + 3 * 60_000 + 10_000 + j
            stream[partition].append(message(partition, len(stream[partition]), payload(key, ts, 0.0, str(ids.next())), key))
            oracle[(buckets.bucket_of(ts).label, key)] += 1
    table_a: dict[str, Any] = {}
    a = worker(table_a, clock, [1], "a")
    outputs: list[Output] = []
    for msg in stream[1][:1_000]:  # A reaches 60 s into partition 1, checkpoints, dies before its commit
        clock.now = T0 + 60 * msg.offset
        outputs += a.handle(msg)
        if msg.offset % 200 == 0:
            outputs += a.tick().outputs
            a.persist(lambda: None)
    table_b: dict[str, Any] = {}
    b = worker(table_b, clock, [2], "b")
    for msg in stream[2][:2_500]:  # meanwhile B is 150 s into partition 2
        clock.now = T0 + 60 * msg.offset
        outputs += b.handle(msg)
        if msg.offset % 200 == 0:
            outputs += b.tick().outputs
            b.persist(lambda: None)
    # The rebalance: B gets partition 1 with A's changelog (the table faust restores) and
    # re-reads it from A's last committed offset, 600.
    table_b.update({k: v for k, v in table_a.items() if k.startswith("meta|events|1") or "|1|" in k})
    b.assign([("events", 1), ("events", 2)])
    rest = sorted(stream[1][600:] + stream[2][2_500:], key=lambda m: CODEC.decode(m.value)["ts_ms"])  # a fetch interleaves
    for msg in rest:
        clock.now = max(clock.now, T0 + 60 * msg.offset)
        outputs += b.handle(msg)
        if msg.offset % 200 == 0:
            outputs += b.tick().outputs
            b.persist(lambda: None)
    clock.now += 60_000
    for _ in range(2):
        outputs += b.tick().outputs
        b.persist(lambda: None)
    assert [o.record["reason"] for o in outputs if o.role == "late_events"] == []
    got = merged(outputs)
    assert {k: v for k, v in got.items() if not k[1].startswith("end")} == \
        {k: v for k, v in oracle.items() if not k[1].startswith("end")}


def test_an_event_sent_twice_with_one_id_is_counted_once_and_its_memory_goes_with_the_bucket() -> None:
    clock = Clock(T0)
    data: dict[str, Any] = {}
    p = worker(data, clock, [0])
    ids = UUIDv7Generator()
    outputs: list[Output] = []
    offset = 0
    sent: list[bytes] = []
    for i in range(100):
        clock.now = T0 + i * 100
        body = payload(f"k{i % 3}", clock.now, float(i), str(ids.next()))
        sent.append(body)
        outputs += p.handle(message(0, offset, body, f"k{i % 3}"))
        offset += 1
    for i in range(0, 100, 4):  # a producer retry or an application re-send: same ID, new offset
        outputs += p.handle(message(0, offset, sent[i], f"k{i % 3}"))
        offset += 1
    assert p.ids_held() == 100
    p.tick()
    p.persist(lambda: None)
    # A restarted worker over the same changelog still knows the IDs of the open bucket.
    clock2 = Clock(clock.now)
    p2 = worker(dict(data), clock2, [0])
    outputs += p2.handle(message(0, offset, sent[1], "k1"))
    offset += 1
    assert p2.counts().duplicates == 1 and p2.ids_held() == 100
    for j in range(2):  # past the bucket's close
        clock2.now = T0 + 70_000 + j
        outputs += p2.handle(message(0, offset, payload("end", clock2.now, 0.0, str(ids.next())), "end"))
        offset += 1
    outputs += p2.tick().outputs
    p2.persist(lambda: None)
    got = merged(outputs)
    label = TimeBuckets("1m").bucket_of(T0).label
    assert {k: got[(label, k)] for k in ("k0", "k1", "k2")} == {"k0": 34, "k1": 33, "k2": 33}
    assert p.counts().duplicates == 25
    assert p2.ids_held() == 2  # the closed bucket's IDs are gone; the open one holds its two
    assert not [k for k in p2.store.data if k.startswith(f"ids|{TimeBuckets('1m').bucket_of(T0).index}|")]


def test_dedup_can_be_turned_off() -> None:
    from dataclasses import replace

    clock = Clock(T0)
    p = EventProcessor(replace(SETTINGS, dedup_ids=False), Stage1Store({}, lambda *a: None), instance="x",
                       clock_ms=clock)
    body = payload("k", T0, 1.0, str(UUIDv7Generator().next()))
    p.handle(message(0, 0, body, "k"))
    p.handle(message(0, 1, body, "k"))
    assert p.counts().duplicates == 0 and p.ids_held() == 0


def test_a_partition_with_unread_records_or_no_word_from_its_broker_never_takes_the_others_progress() -> None:
    """Issue 14: a silent partition whose leader is down, or whose records are not read yet, is not quiet."""
    clock = Clock(T0)
    p = worker({}, clock, [0, 1])
    ids = UUIDv7Generator()
    outputs: list[Output] = []
    outputs += p.handle(message(1, 0, payload("slow", T0 + 1_000, 1.0, str(ids.next())), "slow"))
    offsets = 0
    fetch = {("events", 0): FetchState(0, T0, 0), ("events", 1): FetchState(5, T0, 1)}  # 1: offsets 1-4 unread
    for step in range(1, 200):  # 0 races three minutes ahead while 1's fetches fail (its leader is down)
        clock.now = T0 + step * 1_000
        outputs += p.handle(message(0, offsets, payload("fast", clock.now, 1.0, str(ids.next())), "fast"))
        offsets += 1
        fetch[("events", 0)] = FetchState(offsets, clock.now, offsets)
        assert set(p.behind(fetch, clock.now)) == {("events", 1)}
        outputs += p.tick(fetch).outputs
    assert any(o.role == "partials" for o in outputs)  # partition 0 closes its own buckets
    for offset in range(1, 5):  # the leader is back: 1's backlog arrives, old but on time
        outputs += p.handle(message(1, offset, payload("slow", T0 + 1_000 + offset, 1.0, str(ids.next())), "slow"))
    fetch[("events", 1)] = FetchState(5, clock.now, 5)
    assert p.behind(fetch, clock.now) == []
    assert [o for o in outputs if o.role in ("late_events", "dead_letters")] == []
    clock.now += 11_000  # caught up and quiet past the idle timeout: 1 now follows 0 and closes
    fetch = {s: f._replace(fetched_at_ms=clock.now) for s, f in fetch.items()}
    outputs += p.tick(fetch).outputs
    assert merged(outputs)[(TimeBuckets("1m").bucket_of(T0).label, "slow")] == 5


def test_without_a_fresh_fetch_response_or_a_known_high_watermark_a_source_counts_as_behind() -> None:
    clock = Clock(T0 + 60_000)
    p = worker({}, clock, [0, 1, 2, 3])
    fetch = {("events", 0): FetchState(None, None, None),  # never fetched
             ("events", 1): FetchState(10, T0, 10),  # last answer a minute ago (idle_timeout 10 s)
             ("events", 2): FetchState(10, T0 + 59_000, 7)}  # position 7 of 10, nothing handled yet
    assert sorted(p.behind(fetch, clock.now)) == [("events", 0), ("events", 1), ("events", 2), ("events", 3)]
    fetch[("events", 2)] = FetchState(10, T0 + 59_000, 10)
    assert sorted(p.behind(fetch, clock.now)) == [("events", 0), ("events", 1), ("events", 3)]


def test_entries_a_recovery_writes_between_two_flushes_are_still_found_and_emitted() -> None:
    """faust restores a reassigned partition's changelog into the table while the processor runs:
    the processor's own next flush must not hide those entries from its index."""
    clock = Clock(T0)
    data_a: dict[str, Any] = {}
    a = worker(data_a, clock, [1])
    ids = UUIDv7Generator()
    for offset in range(10):
        a.handle(message(1, offset, payload("moved", T0 + offset, 1.0, str(ids.next())), "moved"))
    a.persist(lambda: None)
    data_b: dict[str, Any] = {}
    b = worker(data_b, clock, [0])
    b.handle(message(0, 0, payload("stay", T0, 1.0, str(ids.next())), "stay"))
    b.tick()
    b.assign([("events", 0), ("events", 1)])
    b.handle(message(0, 1, payload("stay", T0 + 1, 1.0, str(ids.next())), "stay"))
    data_b.update({k: v for k, v in data_a.items() if "|1|" in k or k.endswith("|1")})  # the recovery, meanwhile
    b.persist(lambda: None)  # b's own flush and checkpoint
    outputs: list[Output] = []
    clock.now = T0 + 70_000
    for partition in (0, 1):
        for i in range(2):
            outputs += b.handle(message(partition, 100 + i, payload("sentinel", clock.now + i, 0.0, str(ids.next())),
                                        "sentinel"))
    outputs += b.tick().outputs
    label = TimeBuckets("1m").bucket_of(T0).label
    assert (merged(outputs).get((label, "moved")), merged(outputs).get((label, "stay"))) == (10, 2)


def test_a_worker_taking_a_partition_over_resumes_at_the_offset_after_its_owners_checkpoint() -> None:
    """What the offset guard expects first after a rebalance: not faust's commit, the stage-1 checkpoint."""
    clock, ids, data = Clock(T0), UUIDv7Generator(), {}
    a = worker(data, clock, [0, 1], name="a")
    for offset in range(7):
        a.handle(message(0, offset, payload("k", T0 + offset, 1.0, str(ids.next())), "k"))
    a.persist(lambda: None)
    b = worker(data, clock, [0, 1], name="b")  # the changelog as the new owner recovers it
    b.store.mark_stale()
    assert b.resume_offset(("events", 0)) == 7
    assert b.resume_offset(("events", 1)) == 0  # never checkpointed: never acknowledged, read from the start


def test_stage_2_records_its_partials_offsets_and_reads_them_back_after_a_recovery() -> None:
    writes: list[tuple[int, str, Any]] = []
    data: dict[str, Any] = {}
    merger = PartialMerger(data, lambda *w: writes.append(w), TimeBuckets("1m"), 600_000)
    assert merger.resume_offset(3) == 0  # nothing ever acknowledged
    merger.checkpoint({3: 41, 5: 9})
    assert (3, "@offset|3", 41) in writes and (5, "@offset|5", 9) in writes  # to the changelog, per partition
    recovered = PartialMerger(dict(data), lambda *w: None, TimeBuckets("1m"), 600_000)
    assert (recovered.resume_offset(3), recovered.resume_offset(5)) == (42, 10)
    assert recovered.expire(T0 + 10**9) == 0 and recovered.resume_offset(3) == 42  # not a bucket entry


def test_stage_2_refuses_a_partial_of_a_bucket_past_retention_rather_than_merge_it_alone() -> None:
    merger = PartialMerger({}, lambda *w: None, TimeBuckets("1m"), 600_000)
    old, fresh = {"bucket_start_ms": T0}, {"bucket_start_ms": T0 + 60_000}
    now = T0 + 60_000 + 600_000 + 1  # the first bucket ended 10 min + 1 ms ago
    assert merger.expired(old, now) and not merger.expired(fresh, now)


def test_distinct_events_sharing_an_id_are_all_counted_as_collisions_and_a_resend_once() -> None:
    """Issue 26: two producers with one Snowflake worker ID mint the same IDs; only identical resends fold once."""
    clock = Clock(T0)
    p = worker({}, clock, [0])
    outputs: list[Output] = []
    offset = 0
    for i in range(40):  # two producers, same IDs, different events
        clock.now = T0 + i * 100
        shared_id = str(1_000_000 + i)
        for producer in ("a", "b"):
            outputs += p.handle(message(0, offset, payload(f"{producer}{i % 2}", clock.now, 1.0, shared_id),
                                        f"{producer}{i % 2}"))
            offset += 1
    resend = payload("a0", T0, 1.0, str(1_000_000))  # the very first event, sent again
    outputs += p.handle(message(0, offset, resend, "a0"))
    offset += 1
    counts = p.counts()
    assert (counts.received, counts.on_time, counts.duplicates, counts.collisions) == (81, 81, 1, 40)
    for j in range(2):  # past the bucket's close
        clock.now = T0 + 70_000 + j
        outputs += p.handle(message(0, offset + j, payload("end", clock.now, 0.0, str(UUIDv7Generator().next())),
                                    "end"))
    outputs += p.tick().outputs
    got = merged(outputs)
    label = TimeBuckets("1m").bucket_of(T0).label
    assert {k: got[(label, k)] for k in ("a0", "a1", "b0", "b1")} == {"a0": 20, "a1": 20, "b0": 20, "b1": 20}


def test_a_worker_that_did_not_listen_for_a_minute_judges_no_partition_idle_for_it() -> None:
    """Issue 26: a loop blocked while the broker was down looked like a quiet stream, and its backlog came late."""
    clock = Clock(T0)
    p = worker({}, clock, [0, 1])
    ids = UUIDv7Generator()
    outputs: list[Output] = []
    for offset in range(3):
        outputs += p.handle(message(0, offset, payload("a", T0 + offset, 1.0, str(ids.next())), "a"))
        outputs += p.handle(message(1, offset, payload("b", T0 + offset, 1.0, str(ids.next())), "b"))
    clock.now = T0 + 70_000  # the loop waited out an outage: no call for 70 s
    p.listening_resumed()
    for offset in range(3, 6):  # partition 0's backlog arrives first, partition 1's a moment later
        outputs += p.handle(message(0, offset, payload("a", T0 + 68_000 + offset, 1.0, str(ids.next())), "a"))
    outputs += p.tick().outputs
    for offset in range(3, 6):
        outputs += p.handle(message(1, offset, payload("b", T0 + 2_000 + offset, 1.0, str(ids.next())), "b"))
    assert [o for o in outputs if o.role == "late_events"] == []
