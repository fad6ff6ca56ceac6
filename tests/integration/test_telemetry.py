"""`tokspeed run` with telemetry, end to end: a fake pynvml on PYTHONPATH, the simulator's /metrics.

The fake NVML (tests/fakes/pynvml.py) reports fixed figures and an energy counter of
power × time, so the summaries in run.json can be checked against what it returns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import SimServer, load_json, run_cli

FAKES = str(Path(__file__).parents[1] / "fakes")
GPUS = {
    "driver": "550.54.15",
    "cuda": 12040,
    "gpus": [
        {"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 30000, "utilization_pct": 50,
         "power_w": 300, "sm_clock_mhz": 1980, "temperature_c": 45},
        {"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 1000, "utilization_pct": 0,
         "power_w": 70, "sm_clock_mhz": 345, "temperature_c": None},
    ],
}


def fake_env(config: dict[str, Any]) -> dict[str, str]:
    path = os.pathsep.join([FAKES, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "TOKSPEED_FAKE_NVML": json.dumps(config)}


def telemetry_lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "telemetry.jsonl").read_text().splitlines()]


def stats_equal(s: dict[str, Any], value: float) -> bool:
    return s["samples"] > 0 and s["mean"] == s["max"] == s["min"] == s["p99"] == value


def test_gpu_client_and_server_telemetry_match_their_sources(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "5", "--max-concurrency", "2")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "8", "--requests", "48",
                "--max-tokens", "16", "--telemetry-interval", "100ms", "--plain", env=fake_env(GPUS))
    assert p.returncode == 0, p.stderr

    lines = telemetry_lines(out)
    kinds = [x["kind"] for x in lines]
    assert kinds[0] == "start" and kinds[-1] == "stop"
    assert [x["event"] for x in lines if x["kind"] == "window"] == ["begin", "end"]
    gpu_lines = [x for x in lines if x["kind"] == "gpu"]
    assert {x["gpu"] for x in gpu_lines} == {0, 1}
    first = next(x for x in gpu_lines if x["gpu"] == 0)
    assert (first["utilization_pct"], first["memory_used_mib"], first["power_w"], first["sm_clock_mhz"]) == (50, 30000, 300, 1980)
    assert all(x["temperature_c"] is None for x in gpu_lines if x["gpu"] == 1)
    assert any(x["kind"] == "server" and x["ok"] and x["waiting"] > 0 for x in lines)
    assert any(x["kind"] == "client" for x in lines)

    result = load_json(out / "run.json")
    bench = result["benchmarks"][0]
    t = bench["telemetry"]
    g0, g1 = t["gpus"]
    assert stats_equal(g0["utilization_pct"], 50) and stats_equal(g0["power_w"], 300)
    assert stats_equal(g0["memory_used_mib"], 30000) and g0["memory_total_mib"] == 81920
    assert stats_equal(g1["power_w"], 70) and g1["temperature_c"]["samples"] == 0
    assert "GPU 1: temperature not supported by NVML; left out" in t["notes"]
    assert g0["energy_j"] == pytest.approx(300 * t["window_s"], abs=0.5)  # the counter rises at 300 W
    assert g1["energy_j"] == pytest.approx(70 * t["window_s"], abs=0.5)
    output_tokens = bench["summary"]["tokens"]["output_total"]
    assert output_tokens == 48 * 16
    assert t["energy_per_output_token_j"] == pytest.approx((g0["energy_j"] + g1["energy_j"]) / output_tokens, rel=1e-12)
    assert t["energy_j"] == pytest.approx(370 * t["window_s"], abs=1.0)  # 300 W + 70 W
    assert t["output_tokens_per_j"] == pytest.approx(output_tokens / (g0["energy_j"] + g1["energy_j"]), rel=1e-12)

    server = t["server"]
    assert server["engine"] == "tokspeed-sim" and server["url"] == sim.url.removesuffix("/v1") + "/metrics"
    assert server["scrapes"] > 0 and server["errors"] == 0
    assert server["running"]["max"] == 2  # --max-concurrency 2 on the server ...
    assert server["waiting"]["max"] > 0  # ... with 8 streams: the rest queue
    assert server["metrics"]["tokspeed_sim:generation_tokens_total"] > 0

    client = t["client"]
    assert client["cpu_seconds"] > 0 and client["process_cpu_pct"]["samples"] > 0
    assert client["cpu_ms_per_request"] == pytest.approx(client["cpu_seconds"] * 1000 / bench["summary"]["requests"]["total"])

    run = result["telemetry"]
    assert run["window_s"] >= t["window_s"] and run["energy_per_output_token_j"] == pytest.approx(t["energy_per_output_token_j"])
    env = result["environment"]
    assert env["gpu"]["driver"] == "550.54.15" and env["gpu"]["cuda"] == "12.4" and len(env["gpu"]["devices"]) == 2
    assert env["server"]["version"].startswith("tokspeed-sim") and env["server"]["models"][0]["id"] == "tokspeed-sim"

    assert "J per output token" in p.stdout and "output tokens per J" in p.stdout and "Server (tokspeed-sim" in p.stdout
    report = run_cli("report", str(out))
    assert report.returncode == 0 and "J per output token" in report.stdout


def test_no_gpu_is_one_note_and_no_telemetry_is_nothing(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1")
    base = ("run", "--target", sim.url, "--requests", "4", "--max-tokens", "4", "--plain")
    p = run_cli(*base, "--out", str(tmp_path / "a"), "--server-metrics", "off", env=fake_env({"init_error": 12}))
    assert p.returncode == 0, p.stderr
    t = load_json(tmp_path / "a" / "run.json")["benchmarks"][0]["telemetry"]
    assert t["gpus"] == [] and t["server"] is None and t["client"]["cpu_seconds"] > 0
    assert [t.get(k) for k in ("energy_j", "energy_per_output_token_j", "output_tokens_per_j")] == [None] * 3  # not 0
    assert len(t["notes"]) == 1 and t["notes"][0].startswith("no GPU telemetry: NVML unavailable")
    assert "note: no GPU telemetry" in p.stdout

    p = run_cli(*base, "--out", str(tmp_path / "b"), "--no-telemetry")
    assert p.returncode == 0, p.stderr
    result = load_json(tmp_path / "b" / "run.json")
    assert result["telemetry"] is None and result["benchmarks"][0]["telemetry"] is None
    assert not (tmp_path / "b" / "telemetry.jsonl").exists()


def test_ctrl_c_leaves_the_telemetry_on_disk(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", sim.url, "--out", str(out), "--concurrency", "4",
         "--duration", "60s", "--max-tokens", "20", "--plain", "--telemetry-interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **fake_env(GPUS)},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        path = out / "telemetry.jsonl"
        # 5 periodic scrapes (of 2 GPUs' samples each) beyond the one at the window's opening
        if path.exists() and sum(1 for x in path.read_text().splitlines() if '"kind":"server"' in x) >= 6:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    lines = telemetry_lines(out)
    assert lines[-1]["kind"] == "stop" and sum(x["kind"] == "gpu" for x in lines) >= 10
    result = load_json(out / "run.json")
    assert result["status"] == "interrupted"
    assert result["benchmarks"][0]["telemetry"]["gpus"][0]["power_w"]["mean"] == 300
    assert result["telemetry"]["server"]["scrapes"] >= 5


def test_spec_decode_figures_are_the_simulators_drafts_of_the_measured_requests(
        start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--spec-decode-tokens", "3", "--spec-decode-acceptance", "0.6",
                    "--seed", "11")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "4", "--warmup", "4",
                "--requests", "40", "--max-tokens", "32", "--telemetry-interval", "100ms", "--plain")
    assert p.returncode == 0, p.stderr
    entries = sorted(sim.entries().values(), key=lambda e: e["received_ns"])
    assert len(entries) >= 44
    measured = entries[-40:]  # the probe and the 4 warm-up requests were answered before the window opened
    assert all(e["completion_tokens"] == 32 for e in measured)
    drafts = sum(e["spec_drafts"] for e in measured)
    accepted = sum(e["spec_accepted"] for e in measured)
    per_pos = [sum(e["spec_accepted_per_pos"][i] for e in measured) for i in range(3)]
    assert 40 * 8 <= drafts <= 40 * 31  # 31 tokens after the prefill's, 1 to 4 per step

    sd = load_json(out / "run.json")["benchmarks"][0]["telemetry"]["server"]["spec_decode"]
    assert (sd["drafts"], sd["draft_tokens"], sd["accepted_tokens"]) == (drafts, 3 * drafts, accepted)
    assert sd["acceptance_rate"] == pytest.approx(accepted / (3 * drafts), rel=1e-12)
    assert sd["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=1e-12)
    assert sd["per_position_acceptance_rate"] == pytest.approx([n / drafts for n in per_pos], rel=1e-12)
    assert 0.2 < sd["acceptance_rate"] < 0.55  # (0.6 + 0.36 + 0.216) / 3 = 0.392 expected
    assert f"Speculative decoding  acceptance {accepted / (3 * drafts) * 100:.1f}%" in p.stdout
