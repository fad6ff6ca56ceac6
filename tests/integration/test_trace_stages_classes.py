"""Trace replay, stages and ramps, mixed classes against the simulator (records and sim log share CLOCK_MONOTONIC).

What is asserted, and why these bounds (a shared 2-core machine runs client and server):
* trace: every request is *scheduled* at its trace time ÷ speed to the microsecond (exact
  arithmetic); it is *sent* no earlier than that and, the schedule lag, at a median under
  2 ms, p95 under 5 ms and never 50 ms late; the server receives the prompt and output lengths
  of its trace row exactly. A wrong speed or window would be off by hundreds of ms.
* stages: constant arrivals give exact counts per stage (rate × duration), every request is
  scheduled inside its own stage's window, and each stage's summary counts exactly its requests.
* classes: the simulator's fixed timings make every chat request meet E2E ≤ 150 ms and every
  batch request miss it, so per-class goodput is exactly 100% and 0%, and together 15 of 21.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness import SimServer, load_json, pairs, records, run_cli

MS = 1_000_000


def run(sim: SimServer, out: Path, *args: str) -> dict[str, Any]:
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", "--no-telemetry", "--api", "completions", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return dict(load_json(out / "run.json")["benchmarks"][0])


def mooncake_trace(path: Path, n: int = 50, seed: int = 5) -> list[dict[str, Any]]:
    """n rows with irregular gaps (exponential, mean 60 ms of trace time, some simultaneous)."""
    rng = np.random.default_rng(seed)
    gaps = np.round(rng.exponential(60, n - 1)).astype(int)
    gaps[::7] = 0  # simultaneous arrivals, as in real traces
    times = np.concatenate(([0], np.cumsum(gaps)))
    rows = [
        {"timestamp": int(t), "input_length": int(rng.integers(8, 200)), "output_length": int(rng.integers(1, 6)),
         "hash_ids": [0, int(i) + 1]}
        for i, t in enumerate(times)
    ]  # fmt: skip
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return rows


def test_trace_replay_keeps_its_timing_and_lengths(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1")
    rows = mooncake_trace(tmp_path / "trace.jsonl")
    bench = run(sim, tmp_path / "r", "--trace", str(tmp_path / "trace.jsonl"), "--trace-speed", "2")
    ps = sorted(pairs(tmp_path / "r", sim), key=lambda p: p.client["index"])
    assert [p.client["index"] for p in ps] == list(range(50))
    scheduled = np.asarray([p.c("scheduled_ns") for p in ps])
    want = np.asarray([r["timestamp"] for r in rows]) * MS / 2  # trace ms ÷ speed 2
    assert np.abs((scheduled - scheduled[0]) - want).max() < 1_000  # to the microsecond
    lag_ms = (np.asarray([p.c("sent_ns") for p in ps]) - scheduled) / MS
    # nothing early (a floor); how late is judged beside how late this machine fired the simulator's own
    # timers in the same run (under -n 4 at load 12 the send median reached 11.4 ms, with the simulator's
    # timers as late). The tail gets twice the simulator's p95: the client's process does more per request,
    # so at load 7-9 its p95 ran to 1.3-2.4x the simulator's. A pacer that drifts or waits for answers is
    # late by whole responses and fails this (a slow first build is test_executor's, in isolation)
    timer_ms = np.concatenate([p.sim_late_ns for p in ps]) / MS
    assert lag_ms.min() >= 0
    assert np.median(lag_ms) < 2 + np.median(timer_ms), (lag_ms, timer_ms)
    assert np.percentile(lag_ms, 90) < 5 + 2 * np.percentile(timer_ms, 95), (lag_ms, timer_ms)
    assert lag_ms.max() < 50 + 2 * timer_ms.max(), (lag_ms, timer_ms)
    received_ms = (np.asarray([p.sim["received_ns"] for p in ps]) - scheduled) / MS
    assert np.median(received_ms) < 5 + np.median(timer_ms)
    assert [p.sim["prompt_tokens"] for p in ps] == [r["input_length"] for r in rows]
    assert [p.sim["completion_tokens"] for p in ps] == [r["output_length"] for r in rows]

    s = bench["summary"]
    assert bench["profile"]["kind"] == "trace" and bench["profile"]["trace_format"] == "mooncake"
    assert s["lateness_ms"]["count"] == 50 and s["lateness_ms"]["p50"] == pytest.approx(np.median(lag_ms), rel=1e-6)
    assert s["schedule"]["offered_requests_per_s"] == pytest.approx(49 / (want[-1] / 1e9), rel=1e-6)
    report = run_cli("report", str(tmp_path / "r"))
    assert "Send lateness" in report.stdout and "trace" in report.stdout


def test_trace_window_cuts_and_rebases(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "0", "--itl-ms", "0")
    rows = mooncake_trace(tmp_path / "trace.jsonl")
    bench = run(sim, tmp_path / "r", "--trace", str(tmp_path / "trace.jsonl"), "--trace-window", "1s:2s",
                "--trace-speed", "0.5")  # fmt: skip
    kept = [r for r in rows if 1000 <= r["timestamp"] < 2000]
    recs = sorted(records(tmp_path / "r"), key=lambda r: r["index"])
    assert len(recs) == len(kept) == bench["summary"]["requests"]["completed"] and len(kept) > 5
    offset = load_json(tmp_path / "r" / "run.json")["epoch_offset_ns"]
    ps = pairs(tmp_path / "r", sim)
    start = min(p.sim["received_ns"] for p in ps)  # the phase start is not in the files: compare gaps instead
    sched = np.asarray([r["scheduled_ns"] - offset for r in recs])
    want = (np.asarray([r["timestamp"] for r in kept]) - 1000) * MS * 2  # from the window's start, ÷ 0.5
    assert np.abs(np.diff(sched) - np.diff(want)).max() < 1_000
    assert start - sched[0] >= 0  # nothing reached the server before its time
    assert [r["max_tokens"] for r in recs] == [r["output_length"] for r in kept]


def test_stages_are_exact_windows_with_their_own_summaries(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0")
    bench = run(sim, tmp_path / "r", "--stages", "warm:rate=20:1s,spike:rate=50:0.6s,cool-down:rate=20:0.5s",
                "--arrival", "constant", "--max-tokens", "2")  # fmt: skip
    recs = [r for r in records(tmp_path / "r") if not r["warmup"]]
    first = min(r["scheduled_ns"] for r in recs)
    windows = {"warm": (0, 1.0), "spike": (1.0, 1.6), "cool-down": (1.6, 2.1)}
    counts = {name: 0 for name in windows}
    for r in recs:
        lo, hi = windows[r["stage"]]
        t = (r["scheduled_ns"] - first) / 1e9
        assert lo - 1e-9 <= t < hi, (r["stage"], t)
        counts[r["stage"]] += 1
    assert counts == {"warm": 20, "spike": 30, "cool-down": 10}  # rate × duration, constant arrivals
    stages = bench["stages"]
    assert list(stages) == ["warm", "spike", "cool-down"]
    for name, n in counts.items():
        s = stages[name]["summary"]
        assert s["requests"]["total"] == s["requests"]["completed"] == n
        assert s["schedule"]["offered_requests_per_s"] == pytest.approx(stages[name]["profile"]["rate"], rel=1e-6)
        assert s["lateness_ms"]["count"] == n
    assert bench["summary"]["requests"]["completed"] == 60
    assert len(pairs(tmp_path / "r", sim)) == 60  # each one reached the server


def test_stepped_ramp(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "0", "--itl-ms", "0")
    bench = run(sim, tmp_path / "r", "--ramp", "rate=10..30:1s:steps=2", "--arrival", "constant", "--max-tokens", "1")
    got = {k: g["summary"]["requests"]["completed"] for k, g in bench["stages"].items()}
    assert got == {"step 1/2": 5, "step 2/2": 15}  # 10/s and 30/s for 0.5 s each


def test_classes_goodput_per_class(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    scenario = tmp_path / "mix.yaml"
    scenario.write_text(
        "duration: 1.5s\n"
        "classes:\n"
        "  - {name: chat, rate: 10, arrival: constant, input_tokens: 16, output_tokens: 4, slo: ['e2e_ms<=150', 'ttft_ms<=100']}\n"
        "  - {name: batch, rate: 4, arrival: constant, input_tokens: 64, output_tokens: 30, slo: ['e2e_ms<=150']}\n"
    )  # chat E2E ≈ 20 + 3 × 10 = 50 ms (passes); batch ≈ 20 + 29 × 10 = 310 ms (fails)
    bench = run(sim, tmp_path / "r", "--scenario", str(scenario))
    ps = pairs(tmp_path / "r", sim)
    by_class: dict[str, list[Any]] = {"chat": [], "batch": []}
    for p in ps:
        by_class[p.client["workload_class"]].append(p)
    assert {k: len(v) for k, v in by_class.items()} == {"chat": 15, "batch": 6}
    assert {p.sim["completion_tokens"] for p in by_class["chat"]} == {4}
    assert {p.sim["completion_tokens"] for p in by_class["batch"]} == {30}
    # the server's own timings put every chat request under 150 ms and every batch one over
    assert max(p.sim["end_ns"] - p.sim["received_ns"] for p in by_class["chat"]) < 150 * MS
    assert min(p.sim["end_ns"] - p.sim["received_ns"] for p in by_class["batch"]) > 150 * MS
    chat, batch = bench["classes"]["chat"]["summary"], bench["classes"]["batch"]["summary"]
    assert chat["goodput"]["good"] == 15 and chat["goodput"]["fraction"] == 1.0
    assert chat["goodput"]["slos"] == ["e2e_ms<=150", "ttft_ms<=100"]
    assert batch["goodput"]["good"] == 0 and batch["goodput"]["fraction"] == 0.0
    assert batch["schedule"]["offered_requests_per_s"] == pytest.approx(4, rel=1e-6)
    together = bench["classes_goodput"]
    assert together["good"] == 15 and together["fraction"] == pytest.approx(15 / 21)
    assert together["requests_per_s"] == pytest.approx(15 / bench["summary"]["window_s"], rel=1e-9)
    assert bench["summary"]["requests"]["completed"] == 21
    report = run_cli("report", str(tmp_path / "r"))
    assert "Classes" in report.stdout and "Goodput, all classes" in report.stdout


def test_concurrency_stages_change_the_closed_loop_width(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """Widths 2, 5, 1 for 0.8 s each; each request takes ~40 ms at the server (3 tokens, 20 ms apart)."""
    sim = start_sim("--ttft-ms", "0", "--itl-ms", "20")
    bench = run(sim, tmp_path / "r", "--stages", "a:concurrency=2:0.8s,b:concurrency=5:0.8s,c:concurrency=1:0.8s",
                "--max-tokens", "3")  # fmt: skip
    ps = pairs(tmp_path / "r", sim)
    first = min(p.c("scheduled_ns") for p in ps)
    windows = {"a": (0.0, 0.8, 2), "b": (0.8, 1.6, 5), "c": (1.6, 2.4, 1)}
    spans = [(p.sim["received_ns"], p.sim["end_ns"]) for p in ps]
    rank = {name: i for i, name in enumerate(windows)}
    # the boundary's drain ends when the server has answered every request of the stages before (on a loaded
    # machine that can be well past a fixed 0.1 s: CI once held 5 at t = lo + 0.1 s of the width-1 stage)
    drained = {name: max((p.sim["end_ns"] for p in ps if rank[p.client["stage"]] < i), default=0)
               for name, i in rank.items()}
    checked = dict.fromkeys(windows, 0)
    for p in ps:
        stage = p.client["stage"]
        lo, hi, width = windows[stage]
        t = (p.c("scheduled_ns") - first) / 1e9  # the first start is a hair after the loop's: 2 ms slack
        assert lo - 0.002 <= t < hi, (stage, t)
        at = p.sim["received_ns"]
        if at >= drained[stage]:  # past the boundary's drain: the server never holds more than the width
            assert sum(1 for r, e in spans if r <= at < e) <= width, (stage, t)
            checked[stage] += 1
    totals = Counter(p.client["stage"] for p in ps)
    assert all(checked[name] >= totals[name] / 2 for name in windows), (checked, totals)
    e2e = np.median([e - r for r, e in spans]) / 1e9
    for name, (lo, hi, width) in windows.items():
        s = bench["stages"][name]["summary"]
        expected = width * (hi - lo) / e2e  # a closed loop: width × duration / latency
        assert 0.6 * expected < s["requests"]["completed"] < 1.2 * expected, (name, s["requests"], expected)
        assert s["schedule"] is None  # a closed loop has no arrival schedule
    busiest = max(sum(1 for r, e in spans if r <= at < e) for at, _ in spans)
    assert busiest == 5
