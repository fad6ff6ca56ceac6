"""docs/api.md runs as written: its Python blocks, in order, in one namespace, against `tokspeed sim`.

The page's target (http://127.0.0.1:8000/v1) becomes the simulator's URL; the runs go to a
temporary directory. Each block's output is kept, so a failure shows how far the session got.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import SimServer

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "api.md"
PAGE_URL = "http://127.0.0.1:8000/v1"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def test_the_api_page_runs_as_written(start_sim: Callable[..., SimServer], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "--ttft-ms 20 --itl-ms 2" in text  # the simulator the page starts is the one started here
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "2")
    blocks = python_blocks(text)
    assert len(blocks) >= 4 and all(PAGE_URL in b for b in blocks[:1])
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    out = io.StringIO()
    for i, block in enumerate(blocks):
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(block.replace(PAGE_URL, sim.url), f"docs/api.md block {i + 1}", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"block {i + 1} failed after printing:\n{out.getvalue()}") from exc
    printed = out.getvalue()
    assert "40 requests" in printed and "TTFT p50" in printed and "ITL ≥" in printed
    assert (tmp_path / "runs" / "c4" / "run.json").exists() and (tmp_path / "runs" / "c8" / "requests.jsonl").exists()
    assert namespace["again"].summary.requests.completed == 40  # type: ignore[attr-defined]

