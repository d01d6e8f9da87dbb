"""docker-compose.yml stays valid and matches the broker the scripts start."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def test_docker_compose_file_validates_without_an_engine() -> None:
    exe = shutil.which("docker-compose")
    assert exe is not None, "docker-compose (Debian package) is missing: run scripts/setup.sh"
    result = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_docker_compose_runs_the_same_kafka_version_as_the_local_broker_script() -> None:
    from kafka_local import KAFKA_VERSION

    text = (ROOT / "docker-compose.yml").read_text()
    assert f"image: apache/kafka:{KAFKA_VERSION}\n" in text
    assert {"kafka:", "worker:", "producer:"} <= {line.strip() for line in text.splitlines()}
