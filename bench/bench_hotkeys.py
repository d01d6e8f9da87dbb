#!/usr/bin/env python3
"""Hot-key detector cost: SlidingSketch against exact counting with collections.Counter.

    .venv/bin/python bench/bench_hotkeys.py [--quick]

Throughput: the same seeded Zipf(1.1) key stream (1M events, quick 300k) through
``Counter.update`` per batch, ``Counter[key] += 1`` per event, ``SlidingSketch.add``
per event and ``SlidingSketch.add_many`` per batch of 500 (a consumer poll), with
event times spread over a 10 s window so slices rotate. Rounds alternate between
sources (the machines are shared and drift); the table shows the best round and
the median.

Memory: a uniform stream (the sketch's worst case: nothing stands out) over 10^3,
10^5 and 10^7 distinct keys (quick: 10^6), at least 10^6 events (quick: 3x10^5),
each case in a fresh subprocess. Reported: items retained, tracemalloc peak (Python heap only, so
it misses the sketch's C++ tables), and peak RSS growth (everything, including the
C++ tables) with the time per event of that pass, key generation included.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streams.core.hotkeys.sketch import SlidingSketch

WINDOW_S = 10.0
BATCH = 500
CHUNK = 10_000
MULTIPLIER = 2_654_435_761  # odd, not a multiple of 5: a permutation of 0..10^k-1


def zipf_stream(events: int, universe: int = 1_000_000, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    cum = list(itertools.accumulate(r ** -1.1 for r in range(1, universe + 1)))
    keys = [f"user-{r}" for r in range(universe)]
    return rng.choices(keys, cum_weights=cum, k=events)


# --- throughput -------------------------------------------------------------------------


def counter_update(stream: list[str]) -> int:
    counts: Counter[str] = Counter()
    for start in range(0, len(stream), BATCH):
        counts.update(stream[start:start + BATCH])
    return len(counts)


def counter_loop(stream: list[str]) -> int:
    counts: Counter[str] = Counter()
    for key in stream:
        counts[key] += 1
    return len(counts)


def sketch_add(stream: list[str]) -> int:
    sketch = SlidingSketch(WINDOW_S)
    add, step = sketch.add, WINDOW_S / len(stream)
    for i, key in enumerate(stream):
        add(key, i * step)
    return sketch.retained_items


def sketch_add_many(stream: list[str]) -> int:
    sketch = SlidingSketch(WINDOW_S)
    add_many, n = sketch.add_many, len(stream)
    for start in range(0, n, BATCH):
        add_many(stream[start:start + BATCH], start / n * WINDOW_S)
    return sketch.retained_items


SOURCES: list[tuple[str, Callable[[list[str]], int]]] = [
    (f"`Counter.update(batch of {BATCH})`, exact (baseline)", counter_update),
    ("`Counter[key] += 1` per event, exact", counter_loop),
    ("**`SlidingSketch.add(key, now)`** per event", sketch_add),
    (f"**`SlidingSketch.add_many(batch of {BATCH}, now)`**", sketch_add_many),
]


def throughput(events: int, rounds: int) -> None:
    stream = zipf_stream(events)
    times: dict[str, list[float]] = {label: [] for label, _ in SOURCES}
    for _ in range(rounds):
        for label, run in SOURCES:
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                run(stream)
                times[label].append(time.perf_counter() - start)
            finally:
                gc.enable()
    baseline = events / min(times[SOURCES[0][0]])
    print(f"**Throughput**: {events:,} events, Zipf(1.1) over 10^6 keys ({len(set(stream)):,} distinct seen); "
          f"best and median of {rounds} rounds.\n")
    print("| detector | events/s (best) | events/s (median) | ns/event (best) | vs `Counter.update` |")
    print("|---|---:|---:|---:|---:|")
    for label, _ in SOURCES:
        best = events / min(times[label])
        median = events / statistics.median(times[label])
        print(f"| {label} | {best:,.0f} | {median:,.0f} | {1e9 / best:,.0f} | {best / baseline:.2f}x |")


# --- memory (one case per subprocess) ------------------------------------------------------


def uniform_chunks(events: int, distinct: int) -> Iterator[tuple[float, list[str]]]:
    for start in range(0, events, CHUNK):
        stop = min(events, start + CHUNK)
        yield start / events * WINDOW_S, [f"key-{i * MULTIPLIER % distinct}" for i in range(start, stop)]


def feed(kind: str, events: int, distinct: int) -> tuple[object, int]:
    if kind == "counter":
        counts: Counter[str] = Counter()
        for _, chunk in uniform_chunks(events, distinct):
            counts.update(chunk)
        return counts, len(counts)
    sketch = SlidingSketch(WINDOW_S)
    for now_s, chunk in uniform_chunks(events, distinct):
        sketch.add_many(chunk, now_s)
    return sketch, sketch.retained_items


def peak_rss() -> int:
    """Peak resident bytes of this process image (VmHWM; ru_maxrss would include the parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_case(kind: str, distinct: int, events: int) -> dict[str, float]:
    rss_before = peak_rss()
    start = time.perf_counter()
    kept, retained = feed(kind, events, distinct)
    took = time.perf_counter() - start
    rss_growth = peak_rss() - rss_before
    del kept
    gc.collect()
    tracemalloc.start()
    kept, _ = feed(kind, events, distinct)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"retained": retained, "peak": peak, "rss": rss_growth, "ns": took * 1e9 / events, "events": events}


def memory(distincts: list[int], min_events: int) -> None:
    print("\n**Memory**: uniform keys (every key equally likely), each case in a fresh process.\n")
    print("| distinct keys | events | detector | items retained | tracemalloc peak (Python heap) | "
          "peak RSS growth (all) | ns/event (incl. key generation) |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for distinct in distincts:
        for kind, label in (("counter", "`Counter` (exact)"), ("sketch", "**`SlidingSketch`**")):
            events = max(min_events, distinct)
            out = subprocess.run([sys.executable, __file__, "--memory-case", kind, str(distinct), str(events)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            print(f"| {distinct:,} | {r['events']:,} | {label} | {r['retained']:,} | {_mb(r['peak'])} | "
                  f"{_mb(r['rss'])} | {r['ns']:,.0f} |")
    probe = SlidingSketch(WINDOW_S)
    print(f"\n`SlidingSketch({WINDOW_S:g})` defaults: {probe.slices} slices, capacity {probe.capacity}; "
          f"at most {probe.max_retained_items:,} items whatever the key count.")


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seconds instead of about a minute")
    parser.add_argument("--memory-case", nargs=3, metavar=("KIND", "DISTINCT", "EVENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_case:
        kind, distinct, events = args.memory_case
        print(json.dumps(memory_case(kind, int(distinct), int(events))))
        return 0
    command = ".venv/bin/python bench/bench_hotkeys.py" + (" --quick" if args.quick else "")
    print(f"`{command}`  ")
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs.\n")
    throughput(300_000 if args.quick else 1_000_000, 3 if args.quick else 5)
    if args.quick:
        memory([10**3, 10**5, 10**6], min_events=300_000)
    else:
        memory([10**3, 10**5, 10**7], min_events=1_000_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
