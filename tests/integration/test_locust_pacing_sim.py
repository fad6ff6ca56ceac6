"""`tokspeed locust --rate R`: the run's schedule is the constant rate run.json calls it (review of d5e6b3b; issue #27).

run.json calls a paced Locust run's arrivals "constant". With every user's first request at its
spawn instant, the U users (spawned within U / spawn-rate seconds) send in one burst per
interval U/R instead: measured before the first fix, 8 users at 32/s spawned at 100/s put all 92
requests into 2 of 10 phase bins of the 250 ms cycle, scheduled_gap_cv 1.93 (Poisson is 1);
after it (golden-ratio phases per user), 0.61, and the server saw gap CV 0.80. Now one schedule
for the run, split over the workers: its scheduled gaps are all 1/R (CV 0 to rounding).
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness import SimServer, load_json, records
from test_locust import ITL_MS, TTFT_MS, procs, start_fleet  # noqa: F401 - procs is a fixture

pytestmark = pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="needs tokspeed[locust]")


def test_paced_users_are_spread_over_the_interval_not_sent_in_bursts(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]  # noqa: F811
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, _ = start_fleet(procs, sim, out, "3s", "--rate", "32")  # 8 users, 0.25 s each, spawned in 80 ms
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    bench = load_json(out / "run.json")["benchmarks"][0]
    assert bench["profile"]["arrival"] == "constant"
    assert bench["summary"]["throughput"]["requests_per_s"] == pytest.approx(32.0, rel=0.15)
    sched = np.sort([r["scheduled_ns"] for r in records(out) if not r.get("warmup")]) / 1e6
    phases = np.histogram((sched - sched[0]) % 250.0, bins=4, range=(0, 250))[0]
    assert phases.min() > 0, phases  # every quarter of the cycle gets requests (the burst filled one)
    # one arrival every 31.25 ms over both workers: gap CV 0 (the golden-ratio phases gave 0.60; 1 is Poisson)
    assert bench["summary"]["schedule"]["scheduled_gap_cv"] < 0.01
    assert np.allclose(np.diff(sched), 1000 / 32, atol=0.001)
