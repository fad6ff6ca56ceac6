"""The report's pictures in headless Chromium: every chart drew its data (read from the DOM), and the export writes images."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from browser import load, require_chromium
from harness import SimServer, run_cli

_CHART = re.compile(r'<div id="(fig-\d+)"[^>]*?data-traces="(\d+)" data-points="(\d+)" data-marks="(\d+)" data-title="([^"]*)"')


def _charts(dom: str) -> list[tuple[str, tuple[int, int, int]]]:
    """(title, (traces, points, SVG marks)) of every chart the page drew, in page order."""
    return [(m.group(5), (int(m.group(2)), int(m.group(3)), int(m.group(4)))) for m in _CHART.finditer(dom)]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pictures")
    sim = SimServer(tmp, "--ttft-ms", "30", "--itl-ms", "4", "--max-concurrency", "4", "--fault", "http_503=0.05", "--seed", "5")
    try:
        out = tmp / "sweep"
        p = run_cli("sweep", "--target", sim.url, "--concurrency", "1,2,4,8", "-n", "40", "--max-tokens", "16",
                    "--slo", "ttft_p99_ms<=150", "--no-telemetry", "--quiet", "--out", str(out), timeout=300)
        assert p.returncode in (0, 3), p.stderr
        return out
    finally:
        sim.stop()


def test_every_chart_of_a_sweep_report_draws_its_data(sweep_dir: Path, tmp_path: Path) -> None:
    require_chromium()
    page = tmp_path / "report.html"
    assert run_cli("report", str(sweep_dir), "--html", str(page)).returncode == 0
    shown = load(page, tmp_path)
    assert not [c for c in shown.console if "Error" in c or "Uncaught" in c], shown.console
    charts = _charts(shown.dom)
    assert 'data-charts-drawn="' in shown.dom and len(charts) >= 10
    for title, (traces, points, marks) in charts:
        assert traces >= 1 and points >= 1 and marks >= 1, (title, traces, points, marks)
    for wanted in ("TTFT vs concurrency", "ITL vs concurrency", "E2E latency vs concurrency", "Per-user decode speed", "Over time"):
        assert any(t.startswith(wanted) for t, _ in charts), (wanted, charts)
    # latency vs concurrency: p99 and p50 over the 4 points; the Pareto plot: 4 points, its frontier, the capacity star
    ttft = next(v for t, v in charts if t.startswith("TTFT vs concurrency"))
    assert ttft[1] == 8
    pareto = next(v for t, v in charts if t.startswith("Per-user decode speed"))
    assert pareto[0] == 3 and pareto[1] >= 4 + 1 + 1
    over_time = [v for t, v in charts if t.startswith("Over time")]
    assert len(over_time) == 4 and all(v[0] >= 6 for v in over_time)  # tok/s, TTFT ×2, ITL ×2, in flight (+ errors)
    # the diagnosis table fits the page: no cell forced wider than its column
    assert 'table class="findings"' in shown.dom and "table-layout: fixed" in shown.dom


def test_figures_export_writes_png_and_svg(sweep_dir: Path, tmp_path: Path) -> None:
    require_chromium()
    out = tmp_path / "figs"
    p = run_cli("report", str(sweep_dir), "--figures", str(out), "--figure-format", "both", timeout=300)
    assert p.returncode == 0, p.stderr
    pngs, svgs = sorted(out.glob("*.png")), sorted(out.glob("*.svg"))
    assert len(pngs) == len(svgs) >= 10
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000 for f in pngs)
    assert all(b"<svg" in f.read_bytes()[:400] for f in svgs)


def test_without_a_browser_the_export_says_what_to_install(sweep_dir: Path, tmp_path: Path) -> None:
    p = run_cli("report", str(sweep_dir), "--figures", str(tmp_path / "f"), env={"TOKSPEED_CHROMIUM": str(tmp_path / "none")})
    assert p.returncode == 2
    assert "headless Chromium" in p.stderr and "TOKSPEED_CHROMIUM" in p.stderr


def test_compare_charts_carry_the_verdict(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    require_chromium()
    fast, slow = start_sim("--ttft-ms", "20", "--itl-ms", "2"), start_sim("--ttft-ms", "60", "--itl-ms", "2")
    for name, sim in (("a", fast), ("b", slow)):
        p = run_cli("run", "--target", sim.url, "-n", "60", "--concurrency", "2", "--max-tokens", "8", "--no-telemetry",
                    "--quiet", "--out", str(tmp_path / name))
        assert p.returncode == 0, p.stderr
    page = tmp_path / "compare.html"
    assert run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--html", str(page)).returncode == 0
    shown = load(page, tmp_path)
    charts = _charts(shown.dom)
    assert any(t.startswith("TTFT CDF") for t, _ in charts) and all(v[1] >= 1 for _, v in charts)
    assert "b: p50 " in shown.dom and "worse" in shown.dom  # the verdict, written on the TTFT chart
