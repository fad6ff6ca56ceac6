"""Holding 1,000 concurrent streams on loopback with zero client-side errors, from a low open-file limit.

Both processes start with a soft RLIMIT_NOFILE of 256, far below 1,000 sockets: the CLI must
raise its own limit (and the simulator its own). Responses are short (8 tokens after a 2 s
TTFT), so every stream is open at once and the test stays within seconds.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness import SimServer, load_json, records

STREAMS = 1000
LOW_SOFT_LIMIT = 256


def lower_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_SOFT_LIMIT, hard))


def max_overlap(intervals: list[tuple[int, int]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] < STREAMS + 200, reason="hard fd limit too low")
def test_thousand_concurrent_streams_without_errors(tmp_path: Path) -> None:
    sim = SimServer(tmp_path, "--ttft-ms", "2000", "--itl-ms", "20", preexec_fn=lower_fd_limit)
    try:
        out = tmp_path / "r"
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        p = subprocess.run(
            [sys.executable, "-m", "tokspeed", "run", "--target", sim.url, "--concurrency", str(STREAMS),
             "--requests", str(STREAMS), "--warmup", "0", "--max-tokens", "8", "--out", str(out), "--plain"],
            capture_output=True, text=True, timeout=120, env=env, preexec_fn=lower_fd_limit,
        )
        truth = [e for e in sim.entries().values() if e["start_ns"] is not None]
    finally:
        sim.stop()
    assert p.returncode == 0, p.stdout + p.stderr
    s = load_json(out / "run.json")["benchmarks"][0]["summary"]
    assert s["requests"] == {"completed": STREAMS, "errored": 0, "incomplete": 0, "cancelled": 0, "total": STREAMS}
    recs = records(out)
    assert max_overlap([(r["sent_ns"], r["end_ns"]) for r in recs]) == STREAMS  # the client held them all
    assert max_overlap([(e["received_ns"], e["end_ns"]) for e in truth]) >= STREAMS  # and the server saw them
    assert all(e["status"] == "ok" for e in truth)
