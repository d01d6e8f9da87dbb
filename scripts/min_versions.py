#!/usr/bin/env python3
"""The lowest versions pyproject.toml allows, as a pip constraints file.

    python scripts/min_versions.py [EXTRA...]  > constraints.txt
    .venv-min/bin/python scripts/min_versions.py --check [EXTRA...]

Prints ``name==version`` for every dependency of the package and of the named
extras, each at the minimum its ``>=`` allows. ``--check`` prints the versions
installed beside this Python instead and exits 1 unless each is the minimum. ``scripts/setup.sh`` installs
``.venv-min`` with these constraints and ``make test`` runs the unit and broker
tests in it too, so a minimum that no longer works fails the build and gets
raised in pyproject.toml instead of staying a promise nobody tested. Their
dependencies' dependencies are left to pip (the newest each allows).

A dependency without a ``>=`` minimum is an error: every one must name the oldest
version it is known to work with.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``name[extras] >=version`` (other clauses after a comma are allowed and ignored here)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*(?:;.*)?$")
_MINIMUM = re.compile(r">=\s*([0-9][^,\s]*)")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def minimums(extras: tuple[str, ...] = (), pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """Canonical name -> the minimum version pyproject.toml declares, for the package and ``extras``.

    Raises ValueError for an unknown extra or a dependency with no ``>=`` minimum.
    """
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise ValueError(f"pyproject.toml has no extra {extra!r} (it has {', '.join(sorted(optional))})")
        requirements += optional[extra]
    found: dict[str, str] = {}
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        minimum = _MINIMUM.search(match.group(2)) if match else None
        if match is None or minimum is None:
            raise ValueError(f"pyproject.toml: {requirement!r} declares no minimum version (name>=version)")
        found[canonical(match.group(1))] = minimum.group(1)
    return found


def same_version(installed: str, minimum: str) -> bool:
    """``2.6.0`` is ``2.6``: release numbers compared with trailing zeros padded (PEP 440)."""
    def release(version: str) -> list[int]:
        parts = [int(part) for part in re.findall(r"\d+", version.split("+")[0])]
        while parts and parts[-1] == 0:
            parts.pop()
        return parts
    return release(installed) == release(minimum)


def check(pins: dict[str, str]) -> int:
    """Print each pinned dependency's installed version; 1 if any is missing or not its minimum."""
    wrong = 0
    for name, minimum in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        ok = same_version(installed, minimum)
        wrong += not ok
        print(f"  {name} {installed}" + ("" if ok else f"  <- not the minimum {minimum}"))
    return 1 if wrong else 0


def main(argv: list[str]) -> int:
    checking = "--check" in argv
    try:
        pins = minimums(tuple(arg for arg in argv if arg != "--check"))
    except ValueError as exc:
        print(f"min_versions: {exc}", file=sys.stderr)
        return 2
    if checking:
        print(f"Minimum versions installed for {sys.executable}:")
        return check(pins)
    print("# The minimum versions pyproject.toml allows (scripts/min_versions.py).")
    for name, version in pins.items():
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
