#!/usr/bin/env python3
"""Stage 1's per-event cost without Kafka: EventProcessor.handle_batch against decode + count.

    .venv/bin/python bench/bench_stage1.py [--quick]

The same records (JSON events with the producer's headers, 200 keys, four source
partitions, event times over ten one-minute buckets, every event on time) go through:

* **decode + count** (the baseline, as the bench's faust agent): ``orjson.loads`` of
  each payload and a count per key;
* **handle_batch**: stage 1 in full, batches of 1,000 as the worker's loop hands them
  over: decode and validate against the Avro schema, classify the ID, watermark and
  bucket roller, sketch, dedup by event ID, fold into stage-1 state.

Rounds alternate between the two (the machine is shared), each on a fresh processor;
the fastest round of each is printed, with the ratio. Nothing is sent anywhere: this
is the Python cost per event that the worker's throughput is made of.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import orjson

from streams.core.config import WorkerSettings
from streams.core.ids import UUIDv7Generator
from streams.core.serde import JsonCodec
from streams.worker.processor import EventProcessor, InMessage, Stage1Store

KEYS = 200
PARTITIONS = 4
BATCH = 1000
WIDTH_MS = 60_000


def records(n: int, now_ms: int) -> list[InMessage]:
    """``n`` events over ten one-minute buckets ending a minute ago, with the producer's five headers."""
    ids, codec = UUIDv7Generator(), JsonCodec("event")
    t0 = (now_ms - 11 * WIDTH_MS) // WIDTH_MS * WIDTH_MS
    out = []
    for i in range(n):
        payload = codec.encode({"id": str(ids.next()), "id_kind": "uuid7", "ts_ms": t0 + i * 10 * WIDTH_MS // n,
                                "key": f"key-{i % KEYS}", "value": float(i % 100), "attributes": {}})
        headers = {"streams-id-kind": b"uuid7", "streams-bucket": b"20261205T1200Z", "streams-map-version": b"1",
                   "streams-salt": b"-1", "content-type": b"application/json"}
        out.append(InMessage("events", i % PARTITIONS, i // PARTITIONS, b"k", payload, headers))
    return out


def decode_and_count(msgs: list[InMessage]) -> float:
    counts: Counter[str] = Counter()
    loads = orjson.loads
    start = time.perf_counter()
    for msg in msgs:
        counts[loads(msg.value)["key"]] += 1
    return time.perf_counter() - start


def stage1(msgs: list[InMessage], now_ms: int) -> float:
    settings = WorkerSettings(bucket_width="1m", grace="5s", retention="2h")
    processor = EventProcessor(settings, Stage1Store({}, lambda *a: None), instance="bench", clock_ms=lambda: now_ms)
    processor.assign(("events", p) for p in range(PARTITIONS))
    start = time.perf_counter()
    for i in range(0, len(msgs), BATCH):
        processor.handle_batch(msgs[i:i + BATCH])
    elapsed = time.perf_counter() - start
    counts = processor.counts()
    if counts.on_time != len(msgs):
        raise SystemExit(f"expected every event on time, got {counts}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, rounds = (20_000, 3) if args.quick else (100_000, 5)
    now_ms = int(time.time() * 1000)
    msgs = records(n, now_ms)
    base, ours = [], []
    for _ in range(rounds):
        base.append(decode_and_count(msgs))
        ours.append(stage1(msgs, now_ms))
    b, o = min(base) / n * 1e6, min(ours) / n * 1e6
    print(f"`python bench/bench_stage1.py{' --quick' if args.quick else ''}` — {n:,} events, {KEYS} keys, "
          f"{PARTITIONS} partitions, batches of {BATCH:,}; fastest of {rounds} alternating rounds\n")
    print("| path | µs per event | events/s | ratio to decode + count |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| decode + count (orjson.loads, Counter) | {b:.2f} | {1e6 / b:,.0f} | 1.00 |")
    print(f"| EventProcessor.handle_batch (stage 1 in full) | {o:.2f} | {1e6 / o:,.0f} | {o / b:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
