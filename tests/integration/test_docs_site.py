"""The docs site builds with mkdocs in strict mode: a broken link, a missing anchor or a page left out
of the nav fails the build (mkdocs.yml's `validation`), and so this test."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _mkdocs() -> list[str]:
    if importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("material") is not None:
        return [sys.executable, "-m", "mkdocs"]
    found = shutil.which("mkdocs")
    if found is None:
        pytest.skip("mkdocs-material is not installed: pip install -e '.[docs]' (bash .ci/run installs it)")
    return [found]


def test_the_docs_site_builds_strictly_with_every_link_resolved(tmp_path: Path) -> None:
    done = subprocess.run([*_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "cli" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The check can fail: the same config over a copy of docs/ with one bad anchor."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n[gone](targets.md#no-such-heading)\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = subprocess.run([*_mkdocs(), "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0 and "no-such-heading" in done.stdout + done.stderr
