"""The versions the docs say were tested are the ones pyproject.toml declares and the tests run on.

docs/getting-started.md ("Versions tested") has one row per dependency: the newest
version every test ran on and the minimum the unit and broker tests ran on again
(``make test``: ``.venv`` then ``.venv-min``). The README names some of them.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import confluent_kafka
import kafka_local  # scripts/, on sys.path from conftest
from min_versions import canonical, minimums, same_version

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `([\w.-]+)` \| ([0-9][\w.]*)(?: \(librdkafka ([\w.]+)\))? \| ([0-9][\w.]*)"
                  r"(?: \(librdkafka ([\w.]+)\))? \|$")


class Documented:
    """One row of the table: package name, newest and minimum tested (and librdkafka's with confluent-kafka)."""

    def __init__(self, match: re.Match[str]) -> None:
        self.name = canonical(match.group(1))
        self.newest, self.newest_librdkafka = match.group(2), match.group(3)
        self.minimum, self.minimum_librdkafka = match.group(4), match.group(5)


def section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of that level."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def documented() -> dict[str, Documented]:
    page = section((ROOT / "docs" / "getting-started.md").read_text(), "Versions tested")
    rows = [Documented(m) for m in (_ROW.match(line) for line in page.splitlines()) if m]
    return {row.name: row for row in rows}


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def test_the_docs_name_every_dependency_with_pyprojects_minimum() -> None:
    rows, declared = documented(), minimums()
    assert sorted(rows) == sorted(declared), "the Versions tested table lists the package's dependencies"
    for name, minimum in declared.items():
        assert same_version(rows[name].minimum, minimum), f"{name}: docs say {rows[name].minimum}, pyproject {minimum}"
        assert release(rows[name].newest) >= release(rows[name].minimum), name


def test_the_tests_run_on_the_newest_versions_the_docs_name_or_on_exactly_the_minimums() -> None:
    rows = documented()
    installed = {name: metadata.version(name) for name in rows}
    librdkafka = confluent_kafka.libversion()[0]
    if all(same_version(installed[name], row.minimum) for name, row in rows.items()):  # .venv-min
        assert release(librdkafka) == release(rows["confluent-kafka"].minimum_librdkafka)
        return
    for name, row in rows.items():
        # Not older than the docs claim: a peer holding a version back (Quix Streams once
        # held confluent-kafka at 2.12 here) fails this.
        assert release(installed[name]) >= release(row.newest), \
            f"{name} {installed[name]} here, docs: {row.newest} (scripts/setup.sh brings .venv up to date)"
    assert release(librdkafka) >= release(rows["confluent-kafka"].newest_librdkafka)


def test_the_docs_and_the_readme_name_the_broker_the_tests_start() -> None:
    page = section((ROOT / "docs" / "getting-started.md").read_text(), "Versions tested")
    assert f"Apache Kafka **{kafka_local.KAFKA_VERSION}**" in page
    assert f"Apache Kafka {kafka_local.KAFKA_VERSION}" in (ROOT / "README.md").read_text()


def test_the_readmes_versions_are_the_docs() -> None:
    line = next(line for line in (ROOT / "README.md").read_text().split("\n\n") if line.startswith("**Versions tested"))
    newest, _, minimum = line.partition("minimum")
    rows = documented()
    named = 0
    for part, column in ((newest, "newest"), (minimum, "minimum")):
        for name, version in re.findall(r"\b([a-z][\w-]*) (\d+\.\d+\.\d+)\b", part):
            if canonical(name) in rows:
                assert version == getattr(rows[canonical(name)], column), f"README {column}: {name} {version}"
                named += 1
        librdkafka = re.search(r"librdkafka\s+(\d+\.\d+\.\d+)", part)
        assert librdkafka and librdkafka.group(1) == getattr(rows["confluent-kafka"], f"{column}_librdkafka")
    assert named >= 8
