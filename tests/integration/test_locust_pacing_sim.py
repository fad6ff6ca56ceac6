"""`tokspeed locust --rate R`: the paced users' starts are spread over each user's interval (review of d5e6b3b).

run.json calls a paced Locust run's arrivals "constant". With every user's first request at its
spawn instant, the U users (spawned within U / spawn-rate seconds) send in one burst per
interval U/R instead: measured before the fix, 8 users at 32/s spawned at 100/s put all 92
requests into 2 of 10 phase bins of the 250 ms cycle, scheduled_gap_cv 1.93 (Poisson is 1);
after it, 0.61.
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
    # 8 users on the golden-ratio grid: gap CV 0.60 by construction (0 would be perfectly even, 1 Poisson)
    assert bench["summary"]["schedule"]["scheduled_gap_cv"] < 0.8
