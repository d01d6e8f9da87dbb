#!/usr/bin/env python3
"""What a Snowflake worker-ID lease costs a producer at start (issue 26).

    .venv/bin/python bench/bench_leases.py [--producers 20]

On one broker (``$KAFKA_BOOTSTRAP`` or a local one started here), a fresh leases
topic: the first :meth:`WorkerIdLease.acquire` (which creates the topic), then
``--producers`` more one after the other, each holding its lease while the next
acquires (so each reads the holds of all before it). Prints the first acquire and
the median and maximum of the others, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench.common import broker  # noqa: E402
from streams.kafka.leases import WorkerIdLease  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=20)
    args = parser.parse_args()
    with ExitStack() as stack:
        config = {"bootstrap.servers": broker(stack)}
        topic = f"bench-leases-{uuid.uuid4().hex[:8]}"
        took_ms, leases = [], []
        try:
            for _ in range(args.producers + 1):
                lease = WorkerIdLease(config, topic=topic)
                began = time.perf_counter()
                lease.acquire()
                took_ms.append((time.perf_counter() - began) * 1000)
                leases.append(lease)
        finally:
            for lease in leases:
                lease.close()
        rest = took_ms[1:]
        print(f"`python bench/bench_leases.py --producers {args.producers}`: first acquire (creates the topic) "
              f"{took_ms[0]:.0f} ms; the next {len(rest)}: median {statistics.median(rest):.0f} ms, "
              f"max {max(rest):.0f} ms")


if __name__ == "__main__":
    main()
