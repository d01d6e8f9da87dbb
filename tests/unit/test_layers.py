"""The layers are folders and the arrows point down: import-linter's contracts, run for real.

The contracts live in ``pyproject.toml`` ([tool.importlinter]). The second test
proves they have teeth: a copy of the package whose core imports confluent_kafka
must fail them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(cwd / "pyproject.toml"), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_every_layer_contract_is_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_a_core_module_importing_confluent_kafka_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "streams", tmp_path / "streams", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    buckets = tmp_path / "streams" / "core" / "time" / "buckets.py"
    buckets.write_text(buckets.read_text() + "\nimport confluent_kafka  # a layer violation\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "The core imports no Kafka client" in result.stdout
    assert "BROKEN" in result.stdout


def test_a_core_module_importing_the_worker_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "streams", tmp_path / "streams", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    serde = tmp_path / "streams" / "core" / "serde.py"
    serde.write_text(serde.read_text() + "\nimport streams.worker.merge  # an arrow pointing up\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "Layers: cli -> worker -> kafka -> core BROKEN" in result.stdout
