"""The package works installed: built as a wheel, installed into a fresh virtualenv, used from elsewhere.

The wheel is built from exactly what the ``Dockerfile`` copies into its image (its
``COPY`` lines, replayed into a temporary folder), so the image and this test take the
same route: pyproject, README, ``streams/`` and ``schemas/`` and ``pip install .``.
One virtualenv per module, outside the checkout; every command runs from a folder
that is not the checkout, with no ``PYTHONPATH`` or ``STREAMS_*`` variable leaking in,
so nothing can be imported from the working tree by accident.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from worker_harness import consume_all

from streams.core.serde import AvroCodec

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 600  # pip's cache and /opt/wheels make it ~25 s here; PyPI on a cold cache
RUN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Dockerfile:
    """What the image does that matters to packaging: its work dir, its copies and its RUN commands."""

    workdir: str
    copies: list[tuple[list[str], str]]  # (sources in the build context, destination)
    runs: list[str]

    @classmethod
    def parse(cls, path: Path) -> Dockerfile:
        """Read ``WORKDIR``, ``COPY`` and ``RUN`` instructions (continuation lines joined, flags skipped)."""
        text = path.read_text().replace("\\\n", " ")
        workdir, copies, runs = "/", [], []
        for line in text.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            op, args = words[0].upper(), [w for w in words[1:] if not w.startswith("--")]
            if op == "WORKDIR":
                workdir = os.path.join(workdir, args[0])
            elif op == "COPY":
                copies.append((args[:-1], args[-1]))
            elif op == "RUN":
                runs.append(" ".join(words[1:]))
        return cls(workdir, copies, runs)

    def copied_sources(self) -> set[str]:
        """Every build-context path the image copies, normalised (``./streams`` is ``streams``)."""
        return {os.path.normpath(src) for sources, _ in self.copies for src in sources}

    def replay_copies(self, context: Path, image_root: Path) -> Path:
        """Do the ``COPY`` lines from ``context`` into ``image_root``; return the work dir inside it.

        Docker's rules: a folder's contents go into the destination; a file goes into it
        when it ends with ``/`` or several sources share it, else it becomes the destination.
        """
        for sources, dest in self.copies:
            target = image_root / os.path.join(self.workdir, dest).lstrip("/")
            for src in sources:
                origin = context / src
                if origin.is_dir():
                    shutil.copytree(origin, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    into = target / origin.name if dest.endswith("/") or len(sources) > 1 else target
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, into)
        return image_root / self.workdir.lstrip("/")


@dataclass(frozen=True)
class Installed:
    """The fresh virtualenv with the wheel installed, and a working folder outside the checkout."""

    wheel: Path
    venv: Path
    cwd: Path
    env: dict[str, str]

    def run(self, args: list[str], timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run ``args`` from the outside folder with the clean environment."""
        return subprocess.run(args, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout)

    @property
    def python(self) -> str:
        """The virtualenv's interpreter."""
        return str(self.venv / "bin" / "python")


def _clean_env(venv_bin: Path | None = None) -> dict[str, str]:
    """os.environ without anything that could point an import at the checkout (or at our .venv)."""
    leaky = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "KAFKA_BOOTSTRAP"}
    env = {k: v for k, v in os.environ.items() if k not in leaky and not k.startswith("STREAMS_")}
    ours = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours]
    env["PATH"] = os.pathsep.join(([str(venv_bin)] if venv_bin else []) + path)
    return env


def _check(result: subprocess.CompletedProcess[str], what: str) -> None:
    """Fail with the command's output unless it exited 0."""
    assert result.returncode == 0, f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build the wheel from the Dockerfile's build context and install it into a fresh virtualenv."""
    base = tmp_path_factory.mktemp("installed-wheel")
    assert not base.resolve().is_relative_to(ROOT), f"the temporary folder {base} is inside the checkout"
    source = Dockerfile.parse(DOCKERFILE).replay_copies(ROOT, base / "image")
    dist = base / "dist"
    _check(subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
                          cwd=base, env=_clean_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S),
           "pip wheel")
    wheels = sorted(dist.glob("streams_partitioner-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, found {wheels}"
    venv = base / "venv"
    _check(subprocess.run([sys.executable, "-m", "venv", str(venv)], cwd=base, env=_clean_env(),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S), "python -m venv")
    env = _clean_env(venv / "bin")
    _check(subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           str(wheels[0])], cwd=base, env=env, capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S), "pip install of the wheel")
    cwd = base / "elsewhere"
    cwd.mkdir()
    return Installed(wheels[0], venv, cwd, env)


# The probe runs in the fresh venv (-I: no cwd, no user site, no PYTHON* variables on sys.path).
PROBE = r'''
import importlib.resources, json, sys, sysconfig
import streams, streams.app, streams.kafka.clients
from streams import Router, RoutingMap, RoutingProducer, TimeBuckets
bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=3, topic=topic)])
with RoutingProducer(router, {"bootstrap.servers": bootstrap}, serializer="avro") as producer:
    sent = [(f"installed-{i}", producer.send(f"installed-{i}", float(i)).partition) for i in range(count)]
stats = producer.stats()
print(json.dumps({
    "purelib": sysconfig.get_paths()["purelib"],
    "modules": {m: sys.modules[m].__file__ for m in ("streams", "streams.app", "streams.worker.app",
                                                       "streams.kafka.clients")},
    "schemas": str(importlib.resources.files("streams.schemas")),
    "sent": sent, "delivered": stats.delivered, "failed": stats.failed,
}))
'''


def test_the_wheel_contains_every_avsc_and_every_module_of_the_checkout(installed: Installed) -> None:
    """Nothing is left out of the wheel: pyproject lists the packages by hand, so a new one could be."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    schemas = sorted(p.name for p in (ROOT / "schemas").glob("*.avsc"))
    assert schemas, "no schemas/*.avsc in the checkout"
    missing = [s for s in schemas if f"streams/schemas/{s}" not in names]
    assert not missing, f"schemas missing from the wheel: {missing}"
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "streams").rglob("*.py") if "__pycache__" not in p.parts)
    missing = [m for m in modules if m not in names]
    assert not missing, f"modules missing from the wheel (add their package to pyproject's packages): {missing}"


def test_the_installed_package_imports_from_the_venv_and_sends_to_the_broker(
        installed: Installed, kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """Imported from the fresh venv's site-packages; 25 Avro events reach the session's broker."""
    topic = make_topic("installed", partitions=3)
    result = installed.run([installed.python, "-I", "-c", PROBE, kafka_bootstrap, topic, "25"])
    _check(result, "the probe in the fresh venv")
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    purelib = Path(probe["purelib"]).resolve()
    assert purelib.is_relative_to(installed.venv.resolve())
    for module, file in probe["modules"].items():
        where = Path(file).resolve()
        assert where.is_relative_to(purelib), f"{module} was imported from {where}, not the fresh venv"
        assert not where.is_relative_to(ROOT), f"{module} was imported from the checkout"
    assert Path(probe["schemas"]).resolve().is_relative_to(purelib)

    assert (probe["delivered"], probe["failed"]) == (25, 0)
    got = consume_all(kafka_bootstrap, topic, 25)
    codec = AvroCodec("event")
    arrived = sorted((codec.decode(m.value())["key"], m.partition()) for m in got)
    assert arrived == sorted(tuple(s) for s in probe["sent"]), "the records on the topic are not the ones sent"


def test_the_installed_streams_command_runs(installed: Installed) -> None:
    """The console script is installed and lists every command."""
    result = installed.run([str(installed.venv / "bin" / "streams"), "--help"])
    _check(result, "streams --help")
    assert result.stdout.startswith("usage: streams")
    for command in ("produce", "worker", "monitor", "simulate", "inspect-id", "topics", "replay"):
        assert command in result.stdout


def test_the_installed_faust_app_loads(installed: Installed) -> None:
    """``faust -A streams.app --help`` imports the app (a wrong -A fails), without reaching a broker."""
    result = installed.run([str(installed.venv / "bin" / "faust"), "-A", "streams.app", "--help"])
    _check(result, "faust -A streams.app --help")
    assert "Usage: faust" in result.stdout
    assert "worker" in result.stdout and "Start worker instance" in result.stdout


def test_the_dockerfile_builds_the_package_the_same_way() -> None:
    """The image copies what the wheel needs (read from pyproject) and installs it with ``pip install .``."""
    docker = Dockerfile.parse(DOCKERFILE)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"], "streams",
              *project["tool"]["setuptools"].get("package-dir", {}).values()}
    assert {"pyproject.toml", "README.md", "streams", "schemas"} <= needed
    missing = needed - docker.copied_sources()
    assert not missing, f"the Dockerfile does not copy {sorted(missing)}"
    assert any(run.split()[:2] == ["pip", "install"] and run.split()[-1] == "." for run in docker.runs), docker.runs
