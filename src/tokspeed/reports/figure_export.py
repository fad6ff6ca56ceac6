"""Every chart of an HTML report as a PNG or SVG file, for slides: drawn offline by headless Chromium.

Why this way: the report already carries plotly.js and its figures, and plotly.js renders a
figure to PNG or SVG itself (`Plotly.toImage`). So the page is opened in the system's headless
Chromium with `#export=png|svg`; its script draws every chart, renders each to an image and puts
them in the DOM (`<pre id="tokspeed-exports">`), which `--dump-dom` hands back. No network, no
new dependency. kaleido (plotly.py's exporter) would add a package and, from its 1.0 on, drive
a Chrome of its own anyway — one it downloads unless told where one is — to do the same thing.

Without a Chromium (`TOKSPEED_CHROMIUM`, else `chromium`, `chromium-browser`, `google-chrome` on
PATH) it raises a ConfigError that says what to install; the HTML report itself never needs one.
"""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

import orjson

from tokspeed.errors import ConfigError

FORMATS = ("png", "svg")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars", "--mute-audio")
_EXPORTS = re.compile(r'<pre id="tokspeed-exports">(.*?)</pre>', re.DOTALL)
TIMEOUT_S = 120


def find_chromium() -> str | None:
    """The browser to draw with: $TOKSPEED_CHROMIUM, else the first of BROWSERS on PATH."""
    given = os.environ.get("TOKSPEED_CHROMIUM")
    if given:
        return given if Path(given).exists() or shutil.which(given) else None
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def require_chromium() -> str:
    """The browser, or a ConfigError (exit 2) saying how to get one — checked before any work is done."""
    path = find_chromium()
    if path is None:
        raise ConfigError(
            "exporting charts as PNG/SVG needs a headless Chromium, and none was found",
            hint="install one (apt-get install chromium, or any Chrome) or point TOKSPEED_CHROMIUM at it; "
            "--html writes the same charts, interactive, without one",
        )
    return path


def export_figures(page: str, out_dir: Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write every chart of the HTML `page` (a report or comparison) into `out_dir`, one file per format.

    Files are numbered in page order and named after the chart's title (`03-ttft-ms.png`).
    """
    chromium = require_chromium()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="tokspeed-figures-") as tmp:
        source = Path(tmp) / "report.html"
        source.write_text(page, encoding="utf-8")
        for fmt in formats:
            for n, image in enumerate(_render(chromium, source, fmt, Path(tmp) / f"profile-{fmt}"), start=1):
                path = out_dir / f"{n:02d}-{_slug(image.get('title') or image['id'])}.{fmt}"
                path.write_bytes(_decode(image["url"]))
                written.append(path)
    return written


def _render(chromium: str, source: Path, fmt: str, profile: Path) -> list[dict[str, str]]:
    url = source.resolve().as_uri() + f"#export={fmt}"
    try:
        proc = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=60000", "--dump-dom", url],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"headless Chromium ({chromium}) could not render the charts: {exc}",
                          hint="check that it starts: chromium --headless --dump-dom about:blank") from exc
    found = _EXPORTS.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"headless Chromium ({chromium}) returned no {fmt.upper()} images (exit {proc.returncode}: {tail[0]})",
                          hint="the HTML report (--html) shows the same charts")
    images = orjson.loads(html.unescape(found.group(1)))
    return [i for i in images if isinstance(i, dict) and i.get("url")]


def _decode(url: str) -> bytes:
    """A data: URL's bytes (base64 PNG, or plotly's percent-encoded SVG)."""
    head, _, body = url.partition(",")
    if head.endswith(";base64"):
        return base64.b64decode(body)
    return unquote(body).encode("utf-8")


def _slug(title: str) -> str:
    text = re.sub(r"<[^>]+>", " ", title).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:60] or "chart"
