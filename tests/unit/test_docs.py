"""The docs site builds in strict mode, and the README stays short with links that resolve.

``mkdocs build --strict`` fails on a broken link or anchor, a page missing from the
nav, a bad API reference (mkdocstrings) or a settings field without a meaning in the
generated settings reference (``scripts/docs_reference.py``). The build takes a few
seconds.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import docs_reference  # scripts/, on sys.path from conftest

from streams.core.config import env_var, flag, setting_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_in_strict_mode(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)})
    assert built.returncode == 0, built.stderr[-4000:]
    for page in ("reliability", "reference/settings", "reference/cli", "reference/api", "concepts/ids"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_the_settings_reference_names_every_setting_its_variable_and_flag() -> None:
    page = docs_reference.settings_page()
    for cls in docs_reference.SECTIONS:
        for f in dataclasses.fields(cls):
            name = setting_name(cls, f.name)
            assert f"**{name}**" in page and f"`{env_var(name)}`" in page, name
    assert f"`{flag('bucket_width')}`<br>" in page


def test_the_cli_reference_holds_every_subcommands_help() -> None:
    page = docs_reference.cli_page()
    for command in ("streams produce", "streams worker", "streams topics grow", "streams replay late"):
        assert f"## `{command}`" in page
    assert "usage: streams worker" in page


def test_every_file_the_docs_and_the_readme_name_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for path in re.findall(r"\b(?:tests|streams|bench|scripts)/[\w/.-]+\.py\b", page.read_text()):
            assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}, which does not exist"


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
