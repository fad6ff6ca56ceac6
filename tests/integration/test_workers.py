"""`tokspeed run --workers N` against the simulator: the same records and timings as one process,
and a clean end however the run ends (Ctrl-C, a worker killed mid-run), with no process left behind.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

from harness import (
    SimServer,
    load_json,
    pairs,
    records,
    run_cli,
    start_run,
    wait_for_records,
)
from test_accuracy import ITL_MS, TOKENS, TTFT_MS, assert_matches_truth

SECRET = "sk-workers-SENTINEL-77"


def workers_of(proc: subprocess.Popen[str], n: int, timeout_s: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [c for c in psutil.Process(proc.pid).children() if "client_worker" in " ".join(c.cmdline())]
        if len(found) == n:
            return found
        time.sleep(0.05)
    raise AssertionError(f"expected {n} client worker processes")


def assert_gone(procs: list[psutil.Process]) -> None:
    """No orphan: each worker has exited (and was reaped by tokspeed: not even a zombie is left)."""
    _, alive = psutil.wait_procs(procs, timeout=10)
    assert alive == [], [p.pid for p in alive]


def each_once(out: Path) -> list[dict]:
    recs = records(out)
    keys = Counter((r["iteration"], r["index"]) for r in recs)
    assert all(v == 1 for v in keys.values()), [k for k, v in keys.items() if v > 1]
    return recs


def test_two_workers_give_every_record_once_with_true_timings(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    requests = 256
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", "--workers", "2", "--concurrency", "64",
                "--requests", str(requests), "--max-tokens", str(TOKENS))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 client worker processes, up to 32 connections each (--workers 2)" in " ".join(p.stdout.split())
    result = load_json(out / "run.json")
    assert result["config"]["client_workers"] == 2 and result["target"]["extra"]["client_workers"] == 2
    recs = each_once(out)
    measured = sorted(r["index"] for r in recs if not r["warmup"])
    assert measured == list(range(requests)) and len(recs) == requests + 64
    assert all(r["status"] == "ok" and r["output_tokens"] == TOKENS and r["max_tokens"] == TOKENS
               and r["output_tokens_source"] == "usage" and r["input_tokens_source"] == "usage"
               and len(r["chunk_offsets_ns"]) == TOKENS and r["finish_reason"] == "length" for r in recs)
    assert sum(r["output_text"] is not None for r in recs if not r["warmup"]) == 3  # the samples, as in one process
    assert result["samples"]
    truth, ids = sim.entries(), [r["response_id"] for r in recs]
    assert len(set(ids)) == len(ids) and set(ids) <= set(truth)  # each record is one request the server saw
    assert len(truth) == len(recs) + 3  # and the server saw nothing else but 3 probes (this process's, 2 workers')

    # the same accuracy checks, and tolerances, as one process at 64 streams (test_accuracy.py)
    assert_matches_truth(result["benchmarks"][0]["summary"], pairs(out, sim), requests)


def test_ctrl_c_keeps_every_finished_record_and_leaves_no_worker(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10", "--api-key", SECRET)
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--workers", "2", "--concurrency", "8",
                     "--requests", "100000", "--max-tokens", "20", "--plain", "--api-key", SECRET)
    workers = workers_of(proc, 2)
    for w in workers:  # the key reached them over the pipe: not in argv, not in the environment
        assert SECRET not in " ".join(w.cmdline()) and SECRET not in str(w.environ())
    wait_for_records(out, 30, proc, timeout_s=60)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Interrupted" in stdout and SECRET not in stdout + stderr
    assert_gone(workers)
    result = load_json(out / "run.json")
    assert result["status"] == "interrupted"
    recs = each_once(out)
    assert {r["status"] for r in recs} == {"ok", "incomplete"}  # the in-flight ones, marked, not lost
    assert all(r["sent_ns"] and r["end_ns"] for r in recs if r["status"] == "incomplete")
    measured = [r for r in recs if not r["warmup"]]
    s = result["benchmarks"][0]["summary"]
    assert s["requests"]["completed"] == sum(r["status"] == "ok" for r in measured) >= 14
    assert s["requests"]["total"] == len(measured)
    assert SECRET not in (out / "requests.jsonl").read_text() + (out / "run.json").read_text()


def test_a_killed_worker_stops_the_run_with_a_clear_message_and_loses_nothing(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--workers", "2", "--concurrency", "8",
                     "--requests", "100000", "--max-tokens", "20", "--plain")
    workers = workers_of(proc, 2)
    wait_for_records(out, 30, proc, timeout_s=60)
    before = len(records(out))
    workers[0].kill()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1, stdout + stderr
    assert "Error: client worker" in stderr and "exited (killed by SIGKILL): the run stopped" in stderr
    assert_gone(workers)
    result = load_json(out / "run.json")
    assert result["status"] == "failed" and "killed by SIGKILL" in result["error"]
    recs = each_once(out)
    assert len(recs) >= before and all(r["status"] == "ok" for r in recs[:before])
    lost = [r for r in recs if r["status"] == "error"]
    assert lost and all(r["error_kind"] == "other" and "while this request was in flight" in r["error"] for r in lost)
    assert len(lost) <= 4  # at most the dead worker's share of the 8 streams
    assert {r["status"] for r in recs} <= {"ok", "error", "incomplete"}
    assert result["benchmarks"][0]["summary"]["requests"]["completed"] >= 14


def test_auto_says_what_it_chose_and_in_process_targets_refuse_workers(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "a"), "--plain", "--workers", "auto",
                "--concurrency", "4", "--requests", "8", "--max-tokens", "4")
    assert p.returncode == 0, p.stderr
    assert "Client processes: 1 (--workers auto: 4 streams" in p.stdout
    assert load_json(tmp_path / "a" / "run.json")["config"]["client_workers"] == "auto"
    p = run_cli("run", "--target", "embedded:tiny", "--workers", "2", "--out", str(tmp_path / "e"))
    assert p.returncode == 2 and "--workers 2 needs an HTTP target" in p.stderr
    assert not (tmp_path / "e").exists()
