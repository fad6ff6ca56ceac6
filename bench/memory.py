"""Peak memory of `tokspeed run` as a load point grows. Prints figures; asserts nothing.

    python bench/memory.py                        # 1,000 / 4,000 / 16,000 requests of 256 tokens
    python bench/memory.py --requests 2000 8000 32000 64000 --tokens 256

Each run is one load point against a zero-delay `tokspeed sim` (the client's busiest case).
The figure is the client process's peak resident memory (ru_maxrss from the OS, whole run:
the load and the end-of-point summary, which streams the point's records back from
requests.jsonl into bounded samples). A client that kept the point's records for its summary
would show a peak growing by kilobytes per request; the last line prints that slope, from a
least-squares fit of peak RSS against requests.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simproc import start_sim, stop


def peak_rss_mb(url: str, out: Path, requests: int, tokens: int, streams: int) -> tuple[float, float, list[str]]:
    """(peak RSS in MB, wall seconds, the summary's approximate distributions) of one `tokspeed run`."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--concurrency", str(streams),
         "--requests", str(requests), "--max-tokens", str(tokens), "--warmup", str(streams),
         "--no-telemetry", "--out", str(out), "-q"],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tokspeed run failed at {requests} requests")
    summary = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]["summary"]
    return usage.ru_maxrss / 1024, time.perf_counter() - began, summary.get("approximate", [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[1_000, 4_000, 16_000])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--streams", type=int, default=64)
    args = ap.parse_args()
    print(f"Peak client memory, one load point of N requests × {args.tokens} tokens, {args.streams} streams")
    print(f"{'requests':>9} {'peak RSS MB':>12} {'wall s':>7}  approximate distributions")
    sizes, peaks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_sim("--ttft-ms", "0", "--itl-ms", "0")
        try:
            for n in args.requests:
                mb, wall, approx = peak_rss_mb(url, Path(tmp) / f"run{n}", n, args.tokens, args.streams)
                sizes.append(n)
                peaks.append(mb)
                print(f"{n:>9,} {mb:>12.1f} {wall:>7.1f}  {', '.join(approx) or '-'}", flush=True)
        finally:
            stop(proc)
    if len(sizes) > 1:
        slope = np.polyfit(np.array(sizes, float), np.array(peaks), 1)[0] * 1024 * 1024
        print(f"slope: {slope:,.0f} bytes of peak RSS per request")


if __name__ == "__main__":
    main()
