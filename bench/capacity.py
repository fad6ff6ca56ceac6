"""Capacity truth: the searched answer vs the steady-state queue's, and what the search cost. Prints; asserts nothing.

    python bench/capacity.py                       # three queue shapes, Poisson and constant arrivals
    python bench/capacity.py --probe-duration 10s  # longer probes: closer answers, slower searches

For each shape (K slots, FIFO, fixed nominal service time on `tokspeed sim --max-concurrency K`)
and SLO, `tokspeed capacity` runs with its defaults except the probe length; the truth is a
simulation of the same K-slot queue replaying the service times the simulator really took in that
run (its log, in order, from the probes near the answer) and the client's legs, bisected for the
rate at which the SLO's percentile holds at steady state (tests/integration/queue_truth.py).
Printed: the searched req/s, the truth, their ratio, the truth on each half of the requests (apart:
the machine's load changed during the search), the server's ceiling K / mean service, the search's
probes, requests and wall time, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import queue_truth  # noqa: E402
from simproc import start_sim, stop  # noqa: E402

# (slots, ttft ms, itl ms, tokens, arrival, slo, metric, percentile, limit ms)
SHAPES = [
    (4, 4, 1, 17, "poisson", "ttft_p90_ms<=34", "ttft", 90, 34),
    (4, 4, 1, 17, "poisson", "ttft_p99_ms<=60", "ttft", 99, 60),
    (4, 4, 1, 17, "constant", "ttft_p99_ms<=30", "ttft", 99, 30),
    (8, 10, 2, 21, "poisson", "e2e_p90_ms<=80", "e2e", 90, 80),
    (2, 20, 2, 16, "constant", "e2e_p99_ms<=100", "e2e", 99, 100),
]


def one(shape: tuple, probe: str, warm: str, tmp: Path) -> dict:
    slots, ttft, itl, tokens, arrival, slo, metric, pct, limit = shape
    log = tmp / f"sim-{time.monotonic_ns()}.jsonl"
    proc, url = start_sim("--ttft-ms", str(ttft), "--itl-ms", str(itl), "--max-concurrency", str(slots), "--log", str(log))
    out = tmp / f"cap-{time.monotonic_ns()}"
    try:
        began = time.monotonic()
        subprocess.run([sys.executable, "-m", "tokspeed", "capacity", "--target", url, "--dataset", "synthetic",
                        "--input-tokens", "16", "--max-tokens", str(tokens), "--arrival", arrival, "--slo", slo,
                        "--probe-duration", probe, "--probe-warmup", warm, "--no-telemetry", "--quiet",
                        "--out", str(out)], capture_output=True, check=False)
        wall = time.monotonic() - began
    finally:
        stop(proc)
    result = json.loads((out / "run.json").read_text())
    cap = result["capacity"]
    entries = {json.loads(line)["id"]: json.loads(line) for line in log.read_text().splitlines()}
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    truth, service = queue_truth.truth(slots, entries, records, result, arrival, metric, pct, limit / 1000)
    halves = queue_truth.steadiness(slots, service, arrival, metric, pct, limit / 1000)
    return {"shape": f"{slots} slots × {ttft}+{tokens - 1}×{itl} ms, {arrival}, {slo}", "found": cap["requests_per_s"],
            "truth": truth, "halves": halves, "ceiling": service.max_rate(slots), "probes": len(cap["probes"]),
            "requests": cap["requests_spent"], "wall_s": wall, "stopped": cap["stopped_by"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe-duration", default="10s")
    ap.add_argument("--probe-warmup", default="3s")
    args = ap.parse_args()
    print(f"probes: {args.probe_warmup} held, then a {args.probe_duration} window")
    print(f"{'shape':58} {'found':>8} {'truth':>8} {'ratio':>6} {'halves':>13} {'ceiling':>8} {'probes':>6} "
          f"{'requests':>8} {'wall s':>7}  load")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            before = os.getloadavg()[0]
            r = one(shape, args.probe_duration, args.probe_warmup, Path(tmp))
            found = r["found"] or float("nan")
            halves = f"{r['halves'][0]:.1f}/{r['halves'][1]:.1f}"
            print(f"{r['shape']:58} {found:8.2f} {r['truth']:8.2f} {found / r['truth']:6.3f} {halves:>13} "
                  f"{r['ceiling']:8.2f} {r['probes']:6d} {r['requests']:8,d} {r['wall_s']:7.0f}  "
                  f"{before:.1f}→{os.getloadavg()[0]:.1f} ({r['stopped']})", flush=True)


if __name__ == "__main__":
    main()
