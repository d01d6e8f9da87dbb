"""The README's first example, run exactly as written against a broker that starts with no topics.

The blocks marked ``<!-- readme-example: shell -->`` and ``<!-- readme-example: python -->``
are taken from README.md; the only change is the broker's address (the README says
127.0.0.1:9092, this test's broker listens elsewhere): the shell lines get it from
``STREAMS_BOOTSTRAP_SERVERS``, the Python block by replacing the address.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from worker_harness import consume_all

from streams.core.routing.hashing import canonical_key, kafka_partition

ROOT = Path(__file__).resolve().parents[2]
README_ADDRESS = "127.0.0.1:9092"


def readme_block(kind: str) -> str:
    """The fenced code block that follows ``<!-- readme-example: KIND -->`` in README.md."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- readme-example: {kind} -->\n```\w*\n(.*?)```", text, re.S)
    assert found, f"README.md has no block marked readme-example: {kind}"
    return found.group(1)


def user_env(bootstrap: str) -> dict[str, str]:
    """A user's shell: the installed ``streams`` on PATH, no STREAMS_* settings but the broker's address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_") and k != "KAFKA_BOOTSTRAP"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["STREAMS_BOOTSTRAP_SERVERS"] = bootstrap
    return env


def test_the_readme_example_works_on_a_cluster_with_no_topics(fresh_kafka: Any, tmp_path: Path) -> None:
    bootstrap = fresh_kafka.bootstrap
    assert not [t for t in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics
                if not t.startswith("__")], "the broker must start with no topics"
    shell, python = readme_block("shell"), readme_block("python")
    assert README_ADDRESS in python

    ran = subprocess.run(["bash", "-euo", "pipefail", "-c", shell], capture_output=True, text=True, timeout=180,
                         env=user_env(bootstrap), cwd=tmp_path)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert "streams.events" in ran.stdout and "delivered" in ran.stdout
    assert "following  streams.hot-keys, streams.routing-maps" in ran.stdout  # the fleet's, by default

    code = python.replace(README_ADDRESS, bootstrap)
    sent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=user_env(bootstrap), cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    partition, label, salt = sent.stdout.split()
    assert int(partition) == kafka_partition(canonical_key("tenant-42"), 12) and salt == "-1"  # -1: not split
    assert re.fullmatch(r"\d{8}T\d{4}Z", label), label

    events = consume_all(bootstrap, "streams.events", 1001)
    assert len(events) == 1001
    assert Counter(m.key() == b"tenant-42" for m in events)[True] == 1
    assert next(m.partition() for m in events if m.key() == b"tenant-42") == int(partition)
