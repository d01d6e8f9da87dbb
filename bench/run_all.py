#!/usr/bin/env python3
"""Run every benchmark in bench/ one after another (``make bench``; ``--quick`` for a short run).

    .venv/bin/python bench/run_all.py [--quick] [--memory]

Each benchmark measures its own baseline in the same run and prints ratios, because
the machines are shared and absolute times drift. ``--memory`` adds bench_memory.py
(the worker's RSS on a live stream: ten minutes, or one with ``--quick``), which is
left out by default for its length.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["bench_ids.py", "bench_leases.py", "bench_routing.py", "bench_balance.py", "bench_hotkeys.py", "bench_producer.py", "bench_stage1.py",
         "bench_worker.py"]
MEMORY = "bench_memory.py"


def main() -> int:
    """Run each benchmark that exists; return non-zero if any failed."""
    args = [arg for arg in sys.argv[1:] if arg != "--memory"]
    order = ORDER + ([MEMORY] if "--memory" in sys.argv[1:] else [])
    status = 0
    for name in order:
        path = HERE / name
        if not path.exists():
            continue
        print(f"\n## {name}\n", flush=True)
        status |= subprocess.call([sys.executable, str(path), *args])
    return status


if __name__ == "__main__":
    sys.exit(main())
