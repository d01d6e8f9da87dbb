"""A seeded corpus of 3,600 records, a third of them hostile, through the worker's processing core.

Issue 14: whatever a record holds (corrupt bytes, wrong types, missing fields, empty or huge keys,
non-finite values, malformed IDs, missing or bad headers, tombstones, clocks far off, copies of one
event sent again with other values) it ends up in exactly one place, and conservation holds:
in = processed + dead-lettered + late. The on-time, first-seen events give the exact aggregate.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import orjson

from streams.core.aggregate import Stats
from streams.core.config import WorkerSettings
from streams.core.ids import UUIDv7Generator
from streams.core.time.buckets import TimeBuckets
from streams.worker.merge import PartialMerger
from streams.worker.processor import EventProcessor, InMessage, Output, Stage1Store

T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000)
SETTINGS = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="10s", retention="10m",
                          hot_window_s=1.0)
BUCKETS = TimeBuckets("1m", grace="5s")
HEADERS = {"content-type": b"application/json", "streams-salt": b"-1"}


def event(key: Any, ts: Any, value: Any, event_id: Any) -> dict[str, Any]:
    return {"id": event_id, "id_kind": "uuid7", "ts_ms": ts, "key": key, "value": value, "attributes": {}}


def hostile(rng: random.Random, good: dict[str, Any]) -> tuple[bytes | None, dict[str, bytes], str]:
    """One hostile record derived from a good event: (value, headers, the kind of harm)."""
    body = orjson.dumps(good)
    kind = rng.choice(["flip", "truncate", "garbage", "wrong type", "missing field", "empty key", "huge key",
                       "nan", "bad id", "bad salt", "no salt", "tombstone", "future", "before epoch",
                       "unknown content type"])
    headers = dict(HEADERS)
    if kind == "flip":
        raw = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw), headers, kind
    if kind == "truncate":
        return body[: rng.randrange(len(body))], headers, kind
    if kind == "garbage":
        return rng.randbytes(rng.randint(0, 64)), headers, kind
    if kind == "wrong type":
        field, choices = rng.choice([("id", [[1], {"a": 1}, True, 7]), ("ts_ms", [[1], {"a": 1}, True, "x", 1.5]),
                                     ("key", [[1], {"a": 1}, True, 7]), ("value", [[1], {"a": 1}, True, "x"])])
        return orjson.dumps({**good, field: rng.choice(choices)}), headers, kind
    if kind == "missing field":
        missing = rng.choice(["id", "ts_ms", "key"])  # value may be null or absent (a count-only event)
        return orjson.dumps({k: v for k, v in good.items() if k != missing}), headers, kind
    if kind == "empty key":
        return orjson.dumps({**good, "key": rng.choice(["", "   "])}), headers, kind
    if kind == "huge key":
        return orjson.dumps({**good, "key": "k" * 5_000}), headers, kind
    if kind == "nan":
        return body.replace(b'"value":', b'"value":1e999,"v":', 1), headers, kind  # 1e999 decodes to inf
    if kind == "bad id":
        return orjson.dumps({**good, "id": rng.choice(["not-a-uuid", "0" * 36, "", "zzzzzzzz-zzzz"])}), headers, kind
    if kind == "bad salt":
        headers["streams-salt"] = rng.choice([b"x", b"", b"99999999999999999999", b"\xff"])
        return body, headers, kind
    if kind == "no salt":
        del headers["streams-salt"]
        return body, headers, kind
    if kind == "tombstone":
        return None, headers, kind
    if kind == "future":
        return orjson.dumps({**good, "ts_ms": good["ts_ms"] + 10 * 86_400_000}), headers, kind
    if kind == "before epoch":
        return orjson.dumps({**good, "ts_ms": -5}), headers, kind
    headers["content-type"] = b"application/x-unknown"  # falls back to the configured codec: still decodes
    return body, headers, kind


def test_a_hostile_corpus_conserves_every_record_and_leaves_the_good_events_exact() -> None:
    rng = random.Random(20261203)
    ids = UUIDv7Generator()
    clock = [T0]
    processor = EventProcessor(SETTINGS, Stage1Store({}, lambda *a: None), instance="fuzz", clock_ms=lambda: clock[0])
    processor.assign([("events", p) for p in range(4)])
    offsets = Counter[int]()
    oracle: dict[tuple[str, str], Stats] = {}
    originals: list[tuple[dict[str, Any], int]] = []  # good events folded, with their partition
    outputs: list[Output] = []
    kinds = Counter[str]()
    records = 0
    late_copies = 0
    late_kinds = Counter[str]()
    passed = Counter[str]()
    for i in range(3_600):
        clock[0] = T0 + i * 50  # three minutes of wall clock; events stamped near it
        good = event(f"k{rng.randrange(40)}", clock[0] - rng.randrange(500), float(rng.randrange(-100, 100)),
                     str(ids.next()))
        roll = rng.random()
        if roll < 0.3:
            value, headers, kind = hostile(rng, good)
        elif roll < 0.4 and originals:
            # The same event again (a producer's resend reaches the partition its key and time route to):
            # it must count once. The same ID with another value is another event (an ID collision,
            # issue 26): it counts, as a new event of its own.
            original, copy_partition = rng.choice(originals)
            if rng.random() < 0.5:
                kind, good = "copy", dict(original)
            else:
                kind = "collision"
                good = {**original, "value": original["value"] + 1000.0 * (i + 1)}  # never one seen before
            value, headers = orjson.dumps(good), dict(HEADERS)
        else:
            kind = "good"
            value, headers = orjson.dumps(good), dict(HEADERS)
        kinds[kind] += 1
        partition = copy_partition if kind in ("copy", "collision") else rng.randrange(4)
        out = processor.handle(InMessage("events", partition, offsets[partition], good["key"].encode(), value,
                                         headers))
        offsets[partition] += 1
        records += 1
        assert len(out) <= 1, (kind, out)  # at most one place besides the state
        if not out and kind not in ("good", "copy", "collision"):
            passed[kind] += 1
        if kind in ("copy", "collision") and out:
            assert out[0].role == "late_events"  # a copy after its bucket closed: late, for replay to dedup
            late_copies += 1
            late_kinds[kind] += 1
        if kind not in ("copy",) and not out:  # folded: a good event, or a harmless or lucky hostile one
            folded = good if kind == "good" else orjson.loads(value)  # type: ignore[arg-type]
            originals.append((folded, partition))
            oracle.setdefault((BUCKETS.bucket_of(folded["ts_ms"]).label, folded["key"]),
                              Stats.empty()).add(folded["value"])
        for o in out:
            assert o.role in ("late_events", "dead_letters"), (kind, o.role)
            if o.role == "dead_letters":
                assert o.record["reason"], kind
                assert o.record["source_offset"] == offsets[partition] - 1
                assert o.record["original"] == value  # nothing is lost: the bytes travel with the reason
        outputs += out
        if i % 200 == 0:
            outputs += processor.tick().outputs
    clock[0] += 600_000
    for partition in range(4):  # past every bucket's close, on every partition
        for j in range(2):
            processor.handle(InMessage("events", partition, offsets[partition], b"end",
                                       orjson.dumps(event("end", clock[0] - 1_000 + j, 0.0, str(ids.next()))),
                                       dict(HEADERS)))
            offsets[partition] += 1
            records += 1
    outputs += processor.tick().outputs

    counts = processor.counts()
    dead = [o for o in outputs if o.role == "dead_letters"]
    late = [o for o in outputs if o.role == "late_events"]
    assert counts.received == records
    assert counts.received == counts.on_time + counts.late + counts.too_old + counts.dead_lettered
    assert (len(dead), len(late)) == (counts.dead_lettered, counts.late + counts.too_old)
    assert counts.duplicates == kinds["copy"] - late_kinds["copy"]  # a copy in an open bucket folds nothing
    assert counts.collisions == kinds["collision"] - late_kinds["collision"]  # each counted, as a new event
    assert counts.late + counts.too_old == late_copies  # fresh events are on time: only old copies are late
    # Harmless by design: an unknown content type falls back to the configured codec, and a missing
    # streams-salt header means "not split" (-1), as from a producer that is not ours.
    harmless = kinds["unknown content type"] + kinds["no salt"]
    assert set(passed) <= {"unknown content type", "no salt", "flip"}, passed
    # Every hostile kind but the unknown content type (which falls back to the configured codec) is refused;
    # a flipped byte may leave a record valid, so those count as at most refused.
    assert counts.dead_lettered <= kinds.total() - kinds["good"] - kinds["copy"] - kinds["collision"] - harmless
    assert passed["flip"] < kinds["flip"] // 4
    assert counts.dead_lettered >= kinds.total() - kinds["good"] - kinds["copy"] - kinds["collision"] - harmless - kinds["flip"]
    fields = Counter(o.record["field"] for o in dead)
    assert {"id", "key", "value", "ts_ms", "streams-salt", "payload"} <= set(fields), fields
    assert None not in fields, "every dead letter names the field (or 'payload') that made it one"

    merger = PartialMerger({}, lambda *a: None, BUCKETS, 10**12)
    got: dict[tuple[str, str], dict[str, Any]] = {}
    for o in outputs:
        if o.role == "partials":
            rec = merger.apply(0, o.record)
            got[(rec["bucket"], rec["key"])] = rec
    got.pop(next((s for s in got if s[1] == "end"), ("", "")), None)
    got = {s: r for s, r in got.items() if s[1] != "end"}
    assert set(got) >= set(oracle)
    for slot, stats in oracle.items():
        assert (got[slot]["count"], got[slot]["sum"]) == (stats.count, stats.sum), slot
