"""`tokspeed run --profile` against the simulator's /start_profile and /stop_profile (`--profile-endpoints`).

The simulator logs each call with its own clock (perf_counter_ns, shared with the client on one
machine), so the calls are checked against the requests it served and the run's own records.
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

from harness import SimServer, load_json, run_cli


def log_lines(sim: SimServer) -> list[dict[str, Any]]:
    return sorted((json.loads(x) for x in sim.log.read_text().splitlines()), key=lambda e: e["received_ns"])


def calls(lines: list[dict[str, Any]], api: str) -> list[dict[str, Any]]:
    return [e for e in lines if e["api"] == api]


def client_perf_ns(out: Path) -> tuple[list[int], list[int]]:
    """The measured requests' send and end stamps, back on the shared monotonic clock."""
    offset = load_json(out / "run.json")["epoch_offset_ns"]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r["warmup"]]
    return [r["sent_ns"] - offset for r in measured], [r["end_ns"] - offset for r in measured]


def test_profile_starts_after_the_warmup_and_stops_after_the_last_measured_request(
        start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--profile-endpoints")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "2", "--warmup", "4",
                "--requests", "20", "--max-tokens", "8", "--plain", "--profile")
    assert p.returncode == 0, p.stderr
    lines = log_lines(sim)
    (start,), (stop,) = calls(lines, "start_profile"), calls(lines, "stop_profile")
    served = [e for e in lines if e["api"] == "chat"]
    before = [e for e in served if e["received_ns"] < start["received_ns"]]
    after = [e for e in served if e["received_ns"] > start["end_ns"]]
    assert len(after) == 20 and len(before) == len(served) - 20 >= 4  # the warm-up (and the probe) came first
    assert max(e["end_ns"] for e in before) < start["received_ns"]  # ... and was over
    assert stop["received_ns"] > max(e["end_ns"] for e in served)  # stopped after the last request was served

    sent, ended = client_perf_ns(out)
    assert len(sent) == 20
    assert start["end_ns"] < min(sent)  # the profile was running when the first measured request went
    assert max(ended) < stop["received_ns"]  # ... and stopped once the last one had ended at the client

    profile = load_json(out / "run.json")["benchmarks"][0]["server_profile"]
    assert profile["status"] == "profiled" and profile["url"] == sim.url.removesuffix("/v1")
    assert (profile["start_http_status"], profile["stop_http_status"]) == (200, 200)
    assert profile["started_at"] < profile["stopped_at"]
    assert "/start_profile: Start profiling." in profile["message"] and "/stop_profile: Stop profiling." in profile["message"]
    assert profile["trace_dir"] is None  # the simulator names none, and neither does this environment
    assert "Server profile" in p.stdout and "did not say where it wrote its trace" in p.stdout
    report = run_cli("report", str(out))  # re-rendered from run.json alone
    assert report.returncode == 0 and "Server profile" in report.stdout


def test_a_server_without_the_endpoints_is_refused_before_any_request(
        start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--requests", "4", "--plain", "--profile")
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "has no profiler endpoints" in errors[0] and "HTTP 404" in errors[0]
    assert "--profiler-config" in p.stderr and "Traceback" not in p.stderr
    assert not sim.log.exists() or log_lines(sim) == []  # nothing was sent
    assert not (out / "run.json").exists()


def test_a_held_warmup_is_outside_the_profile(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--profile-endpoints")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "2", "--warmup", "1s",
                "--requests", "10", "--max-tokens", "8", "--plain", "--profile")
    assert p.returncode == 0, p.stderr
    lines = log_lines(sim)
    (start,), (stop,) = calls(lines, "start_profile"), calls(lines, "stop_profile")
    offset = load_json(out / "run.json")["epoch_offset_ns"]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    lead = [r["sent_ns"] - offset for r in records if r["warmup"] and r["sent_ns"]]
    sent, ended = client_perf_ns(out)
    assert lead and max(lead) < start["received_ns"] + 5_000_000  # no warm-up request sent once it ran (timer slack)
    assert min(lead) + 0.9e9 < start["received_ns"]  # the 1 s lead was over first
    assert max(ended) < stop["received_ns"]
    assert load_json(out / "run.json")["benchmarks"][0]["server_profile"]["status"] == "profiled"


def test_ctrl_c_still_stops_the_profile(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "5", "--profile-endpoints")
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", sim.url, "--out", str(out), "--concurrency", "2",
         "--duration", "60s", "--max-tokens", "20", "--plain", "--profile"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (sim.log.exists() and calls(log_lines(sim), "start_profile")):
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    lines = log_lines(sim)
    assert len(calls(lines, "start_profile")) == 1 and len(calls(lines, "stop_profile")) == 1
    assert calls(lines, "stop_profile")[0]["http_status"] == 200
    assert load_json(out / "run.json")["benchmarks"][0]["server_profile"]["status"] == "profiled"


def test_a_sweep_over_targets_is_refused_when_any_lacks_the_endpoints(
        start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    with_them, without = start_sim("--profile-endpoints"), start_sim()
    p = run_cli("run", "--target", with_them.url, "--target", without.url, "--out", str(tmp_path / "r"),
                "--requests", "2", "--plain", "--profile")
    assert p.returncode == 2 and without.url.removesuffix("/v1") in p.stderr, p.stdout + p.stderr
    assert not (tmp_path / "r").exists()
