"""Load a local HTML file in headless Chromium (Debian's `chromium`) and collect what a person would see.

`load(page, tmp)` runs `chromium --headless --dump-dom` with logging to stderr,
and returns the DOM after the page's scripts ran and every console message the
page produced (Chromium logs them as `INFO:CONSOLE` lines, errors included).
Tests call `require_chromium()` first: it skips, saying how to install it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
)  # fmt: skip
_CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught")


@dataclass
class Page:
    dom: str
    console: list[str]


def require_chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed: `apt-get install -y chromium` (bash .ci/run installs it as root)")
    return path


def load(page: Path, tmp: Path, screenshot: Path | None = None) -> Page:
    chromium = require_chromium()
    profile = tmp / f"chromium-profile-{page.stem}"
    action = [f"--screenshot={screenshot}", "--window-size=1400,2400"] if screenshot else ["--dump-dom"]
    proc = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *action, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Page(dom=proc.stdout, console=[line for line in proc.stderr.splitlines() if _CONSOLE.search(line)])
