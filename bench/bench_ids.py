#!/usr/bin/env python3
"""ID generation speed: our UUIDv7 and Snowflake against stdlib uuid4 and other UUIDv7 libraries.

    .venv/bin/python bench/bench_ids.py [--quick]

Every rate is measured in this run, rounds alternating between sources (the
machines are shared and drift), GC off inside a round as in :mod:`timeit`; the
table shows the best round and the median. Goals: ``uuid7()`` at least as fast as
``uuid.uuid4()`` and at least twice as fast as ``uuid6.uuid7()``.

The last section shows that a Snowflake batch is limited by the layout (4,096 IDs
per millisecond per worker), not by the CPU.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

try:
    import uuid6  # the bench extra: make bench installs it
except ImportError:
    sys.exit("bench_ids.py compares with uuid6: pip install -e '.[bench]' (make bench does)")
import uuid_utils  # noqa: E402
import uuid_utils.compat  # noqa: E402

from streams.core.ids import TWITTER_LAYOUT, Snowflake, UUIDv7Generator, uuid7

BATCH = 1000


@dataclass
class Case:
    label: str
    draw: Callable[[], object]
    ids_per_call: int = 1
    returns: str = "uuid.UUID"
    calls: int = 0
    rounds_ns: list[int] = field(default_factory=list)

    def rates(self) -> list[float]:
        return [self.calls * self.ids_per_call * 1e9 / ns for ns in self.rounds_ns]


class FakeClock:
    """Milliseconds that stand still until the generator waits; waiting is free."""

    def __init__(self) -> None:
        self.ms = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.ms += max(1, round(seconds * 1000))


def one_round(draw: Callable[[], object], calls: int) -> int:
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in repeat(None, calls):
            draw()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def calibrate(case: Case, target_s: float) -> None:
    probe = max(1, 2000 // case.ids_per_call)
    one_round(case.draw, probe)  # warm up
    per_call_ns = one_round(case.draw, probe) / probe
    case.calls = max(1, int(target_s * 1e9 / per_call_ns))


def cases() -> list[Case]:
    fake = FakeClock()
    return [
        Case("stdlib `uuid.uuid4()` (baseline)", uuid.uuid4),
        Case("`uuid6.uuid7()`", uuid6.uuid7),
        Case("`uuid_utils.uuid7()` (Rust)", uuid_utils.uuid7, returns="uuid_utils.UUID"),
        Case("`uuid_utils.compat.uuid7()` (Rust)", uuid_utils.compat.uuid7),
        Case("**ours** `uuid7()`", uuid7),
        Case("**ours** `UUIDv7Generator().next_int()`", UUIDv7Generator().next_int, returns="int"),
        Case(
            f"**ours** `UUIDv7Generator().next_batch({BATCH})`, per ID",
            lambda g=UUIDv7Generator(): g.next_batch(BATCH),
            BATCH,
        ),
        Case(
            f"**ours** `UUIDv7Generator().next_int_batch({BATCH})`, per ID",
            lambda g=UUIDv7Generator(): g.next_int_batch(BATCH),
            BATCH,
            returns="int",
        ),
        Case("**ours** `Snowflake(w).next()`", Snowflake(1).next, returns="int"),
        Case(
            f"**ours** `Snowflake(w).next_batch({BATCH})`, per ID, real clock",
            lambda g=Snowflake(2): g.next_batch(BATCH),
            BATCH,
            returns="int",
        ),
        Case(
            f"**ours** `Snowflake(w).next_batch({BATCH})`, per ID, CPU only (fake clock)",
            lambda g=Snowflake(3, clock=fake, sleep=fake.sleep): g.next_batch(BATCH),
            BATCH,
            returns="int",
        ),
    ]


def snowflake_cap(n: int) -> tuple[int, int, float, float, float]:
    """Draw n Snowflakes in one batch with the real clock.

    Returns (distinct ms, wall ms spanned first..last ID, share of ms whose sequence
    reached 4095, seconds taken, CPU-only rate with a fake clock in IDs/s).
    """
    generator = Snowflake(4)
    start = time.perf_counter()
    values = generator.next_batch(n)
    took = time.perf_counter() - start
    shift, top = TWITTER_LAYOUT.timestamp_shift, TWITTER_LAYOUT.max_sequence
    last_sequence: dict[int, int] = {}
    for value in values:
        last_sequence[value >> shift] = value & top
    distinct = len(last_sequence)
    spanned = max(last_sequence) - min(last_sequence) + 1
    exhausted = sum(1 for seq in last_sequence.values() if seq == top) / distinct

    fake = FakeClock()
    cpu_bound = Snowflake(5, clock=fake, sleep=fake.sleep)
    cpu_ns = min(_timed_ns(lambda: cpu_bound.next_batch(n)) for _ in range(5))
    return distinct, spanned, exhausted, took, n * 1e9 / cpu_ns


def _timed_ns(action: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    action()
    return time.perf_counter_ns() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds instead of ~30")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per source (default 7, quick 3)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    target_s = 0.02 if args.quick else 0.12

    table = cases()
    for case in table:
        calibrate(case, target_s)
    for _ in range(rounds):  # alternate sources inside each round
        for case in table:
            case.rounds_ns.append(one_round(case.draw, case.calls))

    baseline = max(table[0].rates())
    uuid6_best = max(table[1].rates())
    command = ".venv/bin/python bench/bench_ids.py" + (" --quick" if args.quick else "")
    print(f"`{command}`  ")
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"best and median of {rounds} rounds, ~{target_s * 1000:.0f} ms each.\n"
    )
    print("| ID source | returns | IDs/s (best) | IDs/s (median) | vs `uuid.uuid4` |")
    print("|---|---|---:|---:|---:|")
    for case in table:
        rates = case.rates()
        best = max(rates)
        print(
            f"| {case.label} | {case.returns} | {best:,.0f} | {statistics.median(rates):,.0f} | "
            f"{best / baseline:.2f}x |"
        )
    ours = max(table[4].rates())
    print(
        f"\n`uuid7()` is {ours / baseline:.2f}x `uuid.uuid4()` (goal >= 1) and "
        f"{ours / uuid6_best:.2f}x `uuid6.uuid7()` (goal >= 2)."
    )

    n = 40_960
    distinct, spanned, exhausted, took, cpu_rate = snowflake_cap(n)
    print(f"\n**Snowflake cap** (Twitter layout: 4,096 IDs per ms per worker), `Snowflake(w).next_batch({n:,})`:\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| distinct milliseconds used (real clock) | {distinct} (minimum possible: {n // 4096}) |")
    print(f"| wall milliseconds from first to last ID | {spanned} |")
    print(f"| milliseconds whose sequence ran out (reached 4095) | {exhausted:.0%} |")
    print(f"| time taken, real clock | {took * 1000:.1f} ms = {n / took:,.0f} IDs/s |")
    print(f"| CPU-bound rate, fake clock that moves only when the generator waits | {cpu_rate:,.0f} IDs/s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
