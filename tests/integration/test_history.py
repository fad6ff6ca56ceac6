"""The results history end to end: the real CLI against the simulator registers every run, sweep and
capacity search (secrets masked), a catalogue deleted and re-imported holds the same rows, an
unwritable catalogue costs a warning and never the exit code, and `history check` exits 3 on a
real slowdown of the simulator and 0 before it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harness import SimServer, run_cli

FAST = ("--max-tokens", "4", "--plain")


def catalogue_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    from tokspeed.history.location import location_of
    from tokspeed.history.store import Catalogue

    with Catalogue.open(location_of(str(path))) as c:
        return c.dump()


def ok(p: Any) -> None:
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_runs_sweeps_and_capacity_register_and_an_import_rebuilds_the_same_rows(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    cat = tmp_path / "cat.sqlite"
    env = {"TOKSPEED_CATALOG": str(cat)}
    runs = tmp_path / "runs"
    secret_url = sim.url.replace("http://", "http://bench:pw-hunter2-xyz@")
    ok(run_cli("run", "--target", secret_url, "-n", "6", "--out", str(runs / "a"), "--tag", "branch=main",
               "--tag", "gpu=h100", "--deployment-commit", "0badc0de", *FAST, env=env))
    ok(run_cli("run", "--target", sim.url, "--api-key", "sk-live-0123456789abcdef", "-n", "6", "--concurrency", "2",
               "--out", str(runs / "b"), *FAST, env=env))
    ok(run_cli("sweep", "--target", sim.url, "--concurrency", "1,2", "-n", "4", "--out", str(runs / "nested" / "c"),
               "--catalog", str(cat), *FAST))
    p = run_cli("capacity", "--target", sim.url, "--slo", "ttft_p99_ms<=500", "--requests", "5", "--start", "4",
                "--max-rate", "4", "--probe-duration", "1s", "--probe-warmup", "0", "--out", str(runs / "d"), *FAST,
                env=env, timeout=180)
    ok(p)
    assert f"Catalogued in {cat}" in p.stdout

    rows = catalogue_rows(cat)
    by_dir = {Path(r["directory"]).name: r for r in rows["runs"]}
    assert {k: r["command"] for k, r in by_dir.items()} == {"a": "run", "b": "run", "c": "sweep", "d": "capacity"}
    a = by_dir["a"]
    assert a["target"] in (sim.url, sim.url.replace("http://", "http://bench:***@")) and a["deployment_commit"] == "0badc0de"
    assert a["model"] == "tokspeed-sim" and a["server_version"] and a["ttft_p50_ms"] > 0
    assert {(t["key"], t["value"]) for t in rows["run_tags"] if t["run_id"] == a["id"]} == {("branch", "main"), ("gpu", "h100")}
    assert by_dir["c"]["point_count"] == 2 and by_dir["d"]["capacity_requests_per_s"] > 0
    raw = cat.read_bytes()
    assert b"hunter2" not in raw and b"sk-live" not in raw

    cat.unlink()  # the results directories are the source of truth
    p = run_cli("history", "import", str(runs), env=env)
    ok(p)
    assert "Imported 4 runs" in p.stdout
    assert catalogue_rows(cat) == rows


def test_an_unwritable_catalogue_is_a_warning_and_the_exit_code_is_the_runs(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "30", "--itl-ms", "1")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = str(blocker / "cat.sqlite")
    p = run_cli("run", "--target", sim.url, "-n", "3", "--out", str(tmp_path / "a"), "--catalog", bad, *FAST)
    assert p.returncode == 0 and "Warning: results history" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("run", "--target", sim.url, "-n", "3", "--out", str(tmp_path / "b"), "--slo", "ttft_p99_ms<=1", *FAST,
                env={"TOKSPEED_CATALOG": bad})
    assert p.returncode == 3 and "Warning: results history" in p.stderr  # the SLO's verdict stands
    p = run_cli("run", "--target", sim.url, "-n", "3", "--out", str(tmp_path / "c"), *FAST,
                env={"TOKSPEED_CATALOG": "postgresql://nobody:pw@127.0.0.1:1/none"})
    assert p.returncode == 0 and "Warning: results history" in p.stderr and ":pw@" not in p.stderr


def test_the_default_catalogue_is_in_the_data_dir_and_no_catalog_writes_none(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    env = {"TOKSPEED_CATALOG": "", "XDG_DATA_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    ok(run_cli("run", "--target", sim.url, "-n", "2", "--out", str(tmp_path / "a"), "--no-catalog", *FAST, env=env))
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()
    ok(run_cli("run", "--target", sim.url, "-n", "2", "--out", str(tmp_path / "b"), *FAST, env=env))
    assert (tmp_path / "xdg" / "tokspeed" / "catalog.sqlite").is_file()


def control(sim_url: str, **timing: float) -> None:
    req = urllib.request.Request(sim_url.removesuffix("/v1") + "/sim/control", data=json.dumps(timing).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def test_check_passes_a_steady_service_and_fails_a_slowdown(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--control", "--ttft-ms", "40", "--itl-ms", "1")
    env = {"TOKSPEED_CATALOG": str(tmp_path / "cat.sqlite")}

    def bench(name: str) -> Path:
        out = tmp_path / "runs" / name
        ok(run_cli("run", "--target", sim.url, "-n", "8", "--out", str(out), "--tag", "branch=main", *FAST, env=env))
        return out

    # 6 runs: the newest has 5 before it, so one that a loaded machine made an outlier (left out of the
    # history) still leaves the 4 it needs (with 5 runs, one such outlier made it "too little history")
    for i in range(6):
        latest = bench(f"r{i}")
    # a steady service passes (--min-change guards against a loaded machine's drift; the slowdown below is 3x)
    p = run_cli("history", "check", "ttft_p50_ms", "--run", str(latest), "--min-change", "50%", "--min-history", "4",
                env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "No regression: 1 check" in p.stdout

    control(sim.url, ttft_ms=120)
    slow = bench("slow")
    p = run_cli("history", "check", "ttft_p50_ms", "output_tokens_per_s", "--min-change", "50%", "--json", env=env)
    assert p.returncode == 3, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["run"]["directory"] == str(slow) and report["failed"]
    ttft = next(c for c in report["checks"] if c["metric"] == "ttft_p50_ms")
    assert ttft["verdict"] == "regression" and 4 <= ttft["n"] <= 6 and ttft["change"] > 1.0
    p = run_cli("history", "check", "ttft_p50_ms", "--min-change", "50%", env=env)
    assert p.returncode == 3 and "REGRESSION ttft_p50_ms at synchronous" in p.stdout

    # too little history is not a failure unless asked; an unknown metric is a usage error
    p = run_cli("history", "check", "ttft_p50_ms", "--tag", "branch=none", env=env)
    assert p.returncode == 1 and "no catalogued run" in p.stderr
    p = run_cli("history", "check", "ttft_p50_ms", "--run", str(slow), "--min-history", "10", env=env)
    assert p.returncode == 0 and "Not judged" in p.stdout
    p = run_cli("history", "check", "ttft_p50_ms", "--run", str(slow), "--min-history", "10", "--require-history", env=env)
    assert p.returncode == 3
    p = run_cli("history", "check", "ttft_p59_ms", env=env)
    assert p.returncode == 2 and "unknown metric" in p.stderr

    # list and trend, in the console and as HTML
    p = run_cli("history", "list", "--tag", "branch=main", "--json", env=env)
    ok(p)
    assert len(json.loads(p.stdout)) == 7
    html = tmp_path / "trend.html"
    p = run_cli("history", "trend", "ttft_p50_ms", "e2e_p50_ms", "--html", str(html), env=env)
    ok(p)
    assert "ttft_p50_ms" in p.stdout and "7 runs" in p.stdout
    page = html.read_text()
    assert "Plotly.newPlot" in page and page.count('"type":"scatter"') == 2
    figures = orjson.loads(page.split('id="tokspeed-figures">', 1)[1].split("</script>", 1)[0])
    (line,) = next(iter(figures.values()))["data"][:1]
    assert len(line["y"]) == 7 and line["y"][-1] > 2 * line["y"][0]
