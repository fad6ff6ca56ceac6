"""The CLI as a user meets it: exit codes, errors with hints, Ctrl-C, secrets, `report`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from harness import SimServer, free_port, load_json, records, run_cli


def test_no_target_benchmarks_the_embedded_default(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    p = run_cli("run", "--out", str(tmp_path / "r"), "--requests", "3", "--max-tokens", "4", "--plain", timeout=180)
    assert p.returncode == 0, p.stderr
    assert "random weights" in p.stdout and "--target" in p.stdout  # says what was measured, and how to measure yours
    result = load_json(tmp_path / "r" / "run.json")
    assert result["target"]["kind"] == "embedded"
    assert result["benchmarks"][0]["summary"]["output_tokens"]["mean"] == 4


def test_unreachable_target_fails_fast_with_a_hint(tmp_path: Path) -> None:
    p = run_cli("run", "--target", f"http://127.0.0.1:{free_port()}/v1", "--out", str(tmp_path / "r"), timeout=30)
    assert p.returncode == 2  # nothing listens there: the --target is wrong (issue 22; was 1)
    assert "cannot reach" in p.stderr and "Hint:" in p.stderr
    result = load_json(tmp_path / "r" / "run.json")
    assert result["status"] == "failed" and "cannot reach" in result["error"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--concurrency", "2", "--rate", "3"], "cannot be combined"),
        (["--slo", "speed>=3"], "SLO"),
        (["--extra-body", "{bad"], "--extra-body"),
        (["--dataset", "/nonexistent/prompts.json"], "prompts.json"),
        (["--target", "localhost:8000"], "not an http"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    base = ["run", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r")]
    p = run_cli(*base, *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr + p.stdout


def test_existing_results_are_not_overwritten_silently(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0")
    args = ["run", "--target", sim.url, "--out", str(tmp_path / "r"), "--requests", "3", "--max-tokens", "2", "-q"]
    assert run_cli(*args).returncode == 0
    p = run_cli(*args)
    assert p.returncode == 2 and "--overwrite" in p.stderr
    assert run_cli(*args, "--overwrite").returncode == 0
    assert len(records(tmp_path / "r")) == 4  # 1 warm-up + 3, not 8


def test_slo_breach_exits_3_and_goodput_counts_good_requests(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "30", "--itl-ms", "1")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--requests", "5", "--max-tokens", "4",
                "--slo", "ttft_p99_ms<=10", "--slo", "e2e_ms<=1000", "--plain")
    assert p.returncode == 3, p.stderr
    assert "SLO FAIL  ttft_p99_ms<=10" in p.stdout
    s = load_json(tmp_path / "r" / "run.json")["benchmarks"][0]["summary"]
    assert s["goodput"]["fraction"] == 0.0 and s["goodput"]["slos"] == ["ttft_ms<=10", "e2e_ms<=1000"]


def test_api_key_never_reaches_results(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0")
    secret = "sk-test-DO-NOT-LEAK-1234567890"
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--requests", "2", "--max-tokens", "2",
                "--header", f"X-Api-Key: {secret}", "--plain", env={"OPENAI_API_KEY": secret})
    assert p.returncode == 0, p.stderr
    assert secret not in p.stdout + p.stderr
    for f in (tmp_path / "r").iterdir():
        assert secret not in f.read_text(), f.name
    cfg = load_json(tmp_path / "r" / "run.json")["config"]
    assert cfg["api_key_set"] is True and cfg["headers"]["X-Api-Key"] == "***"


def test_ctrl_c_keeps_every_finished_request(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", sim.url, "--out", str(out), "--concurrency", "4",
         "--requests", "10000", "--max-tokens", "20", "--plain"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (out / "requests.jsonl").exists() and len(records(out)) >= 12:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Interrupted" in stdout
    result = load_json(out / "run.json")
    recs = records(out)
    assert result["status"] == "interrupted"
    assert any(r["status"] == "incomplete" for r in recs)  # the in-flight ones, marked, not lost
    s = result["benchmarks"][0]["summary"]
    measured = [r for r in recs if not r["warmup"]]
    assert s["requests"]["completed"] == sum(r["status"] == "ok" for r in measured) >= 8
    assert s["requests"]["total"] == len(measured)


def test_report_rerenders_and_rebuilds_without_run_json(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "r"
    assert run_cli("run", "--target", sim.url, "--out", str(out), "--requests", "6", "--max-tokens", "4", "-q").returncode == 0
    original = load_json(out / "run.json")["benchmarks"][0]["summary"]
    p = run_cli("report", str(out))
    assert p.returncode == 0 and "TTFT" in p.stdout and "Throughput" in p.stdout
    (out / "run.json").unlink()
    p = run_cli("report", str(out), "--json")
    assert p.returncode == 0, p.stderr
    rebuilt = orjson.loads(p.stdout)[0]["summary"]
    assert rebuilt["ttft_ms"] == original["ttft_ms"]
    assert rebuilt["throughput"] == original["throughput"]
    assert run_cli("report", str(tmp_path / "missing")).returncode == 1


def test_scenario_file_runs(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1")
    scenario = tmp_path / "bench.yaml"
    scenario.write_text(f"target: {sim.url}\nconcurrency: 2\nrequests: 6\noutput_tokens: 5\nwarmup: 0\napi: completions\n")
    p = run_cli("run", "--scenario", str(scenario), "--out", str(tmp_path / "r"), "-q")
    assert p.returncode == 0, p.stderr
    result = load_json(tmp_path / "r" / "run.json")
    assert result["config"]["api"] == "completions"
    assert result["benchmarks"][0]["summary"]["output_tokens"]["mean"] == 5
    assert result["benchmarks"][0]["profile"] == {"kind": "concurrency", "concurrency": 2}



def test_scenario_engine_options_reach_the_engine_check_like_the_flags(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1")
    scenario = tmp_path / "bench.yaml"
    scenario.write_text(f"target: {sim.url}\nrequests: 2\nengine:\n  max_num_seqs: 4\n")
    p = run_cli("run", "--scenario", str(scenario), "--out", str(tmp_path / "r"), "-q")
    assert p.returncode == 2 and "--max-num-seqs applies only to in-process engines" in p.stderr
    scenario.write_text(f"target: {sim.url}\nrequests: 2\nengine:\n  max_seqs: 4\n")
    p = run_cli("run", "--scenario", str(scenario), "--out", str(tmp_path / "r2"), "-q")
    assert p.returncode == 2 and "unknown option 'max_seqs'" in p.stderr and "max_num_seqs" in p.stderr
