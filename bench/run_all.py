#!/usr/bin/env python3
"""Run every benchmark in bench/ one after another (``make bench``; ``--quick`` for a short run).

Each benchmark measures its own baseline in the same run and prints ratios, because
the machines are shared and absolute times drift.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["bench_ids.py", "bench_routing.py", "bench_balance.py", "bench_hotkeys.py", "bench_producer.py", "bench_worker.py"]


def main() -> int:
    """Run each benchmark that exists; return non-zero if any failed."""
    status = 0
    for name in ORDER:
        path = HERE / name
        if not path.exists():
            continue
        print(f"\n## {name}\n", flush=True)
        status |= subprocess.call([sys.executable, str(path), *sys.argv[1:]])
    return status


if __name__ == "__main__":
    sys.exit(main())
