"""How tokspeed behaves when it is big: start-up time, many streams, memory as a run grows. Prints figures.

    python bench/scale.py                     # all three parts
    python bench/scale.py --streams 4096      # the many-streams part at another size

Part 1, start-up: from spawning `tokspeed run` to the simulator receiving its first
request (the 1-token probe), read from the simulator's log on the shared monotonic clock.
Part 2, many streams: `--streams` concurrent requests held open against a simulator with
a long inter-token latency; peak RSS of the client (from the OS) and whether all completed.
Part 3, memory as a run grows: peak RSS of the client (load and end-of-point summary) for
one-point runs of 1×, 4× and 16× as many requests, the summary's `approximate` distributions
(those past the exact buffer), and the slope of peak RSS against requests: a point's records go
to disk as they finish and come back as a stream for the summary, so the slope should be ~0.

    python bench/scale.py --parts growth --requests 2000   # 2,000 / 8,000 / 32,000 requests
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simproc import start_sim, stop


def run(url: str, out: Path, *args: str) -> tuple[float, int]:
    """`tokspeed run`; returns (wall seconds, peak RSS in MiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--out", str(out), "-q", *args],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tokspeed run {' '.join(args)} failed")
    return time.perf_counter() - t0, usage.ru_maxrss // 1024


def startup(tmp: Path) -> None:
    log = tmp / "startup.jsonl"
    sim, url = start_sim("--log", str(log))
    times = []
    try:
        for i in range(3):
            t0 = time.perf_counter_ns()
            run(url, tmp / f"s{i}", "--requests", "1", "--warmup", "0", "--max-tokens", "4")
            time.sleep(0.2)
            received = [orjson.loads(line)["received_ns"] for line in log.read_bytes().splitlines()]
            times.append((min(t for t in received if t > t0) - t0) / 1e6)
    finally:
        stop(sim)
    print(f"Start-up: spawn -> first request at the server: {', '.join(f'{t:.0f}' for t in times)} ms")


def many_streams(tmp: Path, streams: int) -> None:
    sim, url = start_sim("--ttft-ms", "500", "--itl-ms", "1000")
    try:
        wall, rss = run(url, tmp / "many", "--concurrency", str(streams), "--requests", str(streams),
                        "--warmup", "0", "--max-tokens", "4")
    finally:
        stop(sim)
    s = orjson.loads((tmp / "many" / "run.json").read_bytes())["benchmarks"][0]["summary"]
    print(f"Many streams: {streams} concurrent, {s['requests']['completed']} completed, "
          f"{s['requests']['errored']} errored, peak RSS {rss} MiB, wall {wall:.1f} s, "
          f"TTFT p50 {s['ttft_ms']['p50']:.0f} ms (simulator: 500 ms)")


def growth(tmp: Path, base: int) -> None:
    sim, url = start_sim("--ttft-ms", "0", "--itl-ms", "0")
    sizes, peaks = [], []
    try:
        print("Memory as a run grows (64 streams, 256-token responses):")
        for factor in (1, 4, 16):
            out = tmp / f"g{factor}"
            wall, rss = run(url, out, "--concurrency", "64", "--requests", str(base * factor),
                            "--max-tokens", "256", "--warmup", "64")
            summary = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]["summary"]
            approx = ", ".join(summary.get("approximate") or []) or "none"
            print(f"  {base * factor:>7} requests: peak RSS {rss:>5} MiB, wall {wall:.1f} s, approximate: {approx}")
            sizes.append(base * factor)
            peaks.append(rss)
    finally:
        stop(sim)
    slope = (peaks[-1] - peaks[0]) * 1024 * 1024 / (sizes[-1] - sizes[0])
    print(f"  peak RSS grew {slope:,.0f} bytes per request from the smallest run to the largest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=4096)
    ap.add_argument("--requests", type=int, default=1000, help="the smallest run of part 3")
    ap.add_argument("--parts", nargs="+", choices=("startup", "streams", "growth"), default=["startup", "streams", "growth"])
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "startup" in args.parts:
            startup(tmp)
        if "streams" in args.parts:
            many_streams(tmp, args.streams)
        if "growth" in args.parts:
            growth(tmp, args.requests)


if __name__ == "__main__":
    main()
