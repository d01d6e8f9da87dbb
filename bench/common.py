"""What the broker-facing benchmarks share: a broker for the run, and stopping a worker for sure."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))


def broker(stack: ExitStack) -> str:
    """``$KAFKA_BOOTSTRAP``, or a local broker started now and stopped with ``stack``."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    from kafka_local import LocalKafka

    return str(stack.enter_context(LocalKafka()).bootstrap)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s: no worker outlives a benchmark."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
