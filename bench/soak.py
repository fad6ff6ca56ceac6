"""Soak `tokspeed run` against `tokspeed sim` and print the client's memory over time. Asserts nothing.

    python bench/soak.py                          # 2 minutes, 64 streams, 64-token responses
    python bench/soak.py --duration 600 --streams 256 --tokens 256 --interval 10

Every --interval seconds it prints the client's resident memory (RSS, from the OS), how many
requests it has finished (lines in requests.jsonl) and the growth since the first sample;
at the end, a least-squares slope of RSS against finished requests: the memory each finished
request keeps. A client that forgets requests once they are on disk would show a slope near
zero; a slope that stays positive means memory grows with the length of the run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simproc import start_sim, stop

MB = 1024 * 1024


def start_client(url: str, out: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--concurrency", str(args.streams),
         "--duration", f"{args.duration}s", "--max-tokens", str(args.tokens), "--warmup", str(args.streams),
         "--out", str(out), "-q"],
        stdout=subprocess.DEVNULL,
    )


class LineCounter:
    """Counts lines appended to a file, reading only what is new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            self.offset += len(chunk)
            self.lines += chunk.count(b"\n")
        return self.lines


def sample(client: subprocess.Popen[bytes], counter: LineCounter, interval: float) -> list[tuple[float, int, int]]:
    """(seconds, finished requests, RSS bytes) every `interval` until the client exits."""
    proc = psutil.Process(client.pid)
    t0 = time.monotonic()
    samples: list[tuple[float, int, int]] = []
    print(f"{'time':>7} {'requests':>10} {'RSS MB':>8} {'growth MB':>10}")
    while client.poll() is None:
        try:
            rss = proc.memory_info().rss
        except psutil.NoSuchProcess:
            break
        samples.append((time.monotonic() - t0, counter.count(), rss))
        t, n, r = samples[-1]
        print(f"{t:>6.0f}s {n:>10,} {r / MB:>8.1f} {(r - samples[0][2]) / MB:>+10.1f}", flush=True)
        time.sleep(interval)
    return samples


def report(samples: list[tuple[float, int, int]]) -> None:
    steady = [s for s in samples if s[1] > 0][1:]  # from the second sample with requests done
    if len(steady) < 3:
        print("too few samples for a slope; run longer")
        return
    n = np.array([s[1] for s in steady], dtype=float)
    rss = np.array([s[2] for s in steady], dtype=float)
    slope, _ = np.polyfit(n, rss, 1)
    print(f"\nRSS grew {(rss[-1] - rss[0]) / MB:+.1f} MB over {int(n[-1] - n[0]):,} requests: "
          f"{slope / 1024:.2f} KiB per finished request (least squares)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per response")
    ap.add_argument("--ttft-ms", type=float, default=5.0)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; {args.streams} streams, "
          f"{args.tokens}-token responses, {args.duration:g} s")
    sim, url = start_sim("--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms))
    try:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "soak"
            client = start_client(url, out, args)
            try:
                samples = sample(client, LineCounter(out / "requests.jsonl"), args.interval)
            finally:
                if client.poll() is None:
                    client.send_signal(signal.SIGINT)
                client.wait(60)
            report(samples)
    finally:
        stop(sim)


if __name__ == "__main__":
    main()
