"""Benchmark tokspeed's own client against `tokspeed sim` on loopback. Prints figures; asserts nothing.

    python bench/client.py                 # 64 and 512 streams, 256-token responses
    python bench/client.py --streams 64 --requests 2000 --tokens 128
    python bench/client.py --streams 256 --workers 1 2 --skip-truth   # --workers N client processes

Part 1, capacity: the simulator answers with zero delays, so both processes
run flat out; the figures are requests/s and streamed tokens/s the pair
sustains, and the client's CPU time per request (from the OS, whole process:
start-up included, and with `--workers` its worker processes). On a 2-core machine the client and the simulator share
the cores, so these are lower bounds on what the client alone can do.

Part 2, timing truth at 64 streams: the simulator (TTFT 50 ms, ITL 5 ms) logs
when it actually received each request and wrote each chunk; the client's
TTFT/ITL are compared with that log, request by request.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

URL = re.compile(rb"listening on (http://\S+/v1)")


def start_sim(log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "sim", "--port", "0", "--log", str(log), *args],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    m = URL.search(proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("simulator did not start")
    return proc, m.group(1).decode()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def run_client(url: str, out: Path, streams: int, requests: int, tokens: int, workers: str = "1") -> tuple[float, float]:
    """Run `tokspeed run`; returns (wall seconds, client CPU seconds: its worker processes included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--concurrency", str(streams),
         "--requests", str(requests), "--max-tokens", str(tokens), "--warmup", str(streams),
         "--workers", workers, "--out", str(out), "-q"],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tokspeed run failed at {streams} streams")
    return wall, usage.ru_utime + usage.ru_stime


def capacity(tmp: Path, streams_list: list[int], requests: int, tokens: int, workers_list: list[str]) -> None:
    print(f"Capacity: zero-delay simulator, {tokens}-token streamed responses, {requests} measured requests")
    print(f"{'streams':>8} {'workers':>8} {'req/s':>9} {'tok/s':>11} {'client CPU':>11} {'CPU/request':>12} {'wall':>7}")
    for streams in streams_list:
        for workers in workers_list:
            proc, url = start_sim(tmp / f"cap-{streams}-{workers}.jsonl", "--ttft-ms", "0", "--itl-ms", "0")
            try:
                out = tmp / f"cap-{streams}-{workers}"
                wall, cpu = run_client(url, out, streams, requests, tokens, workers)
            finally:
                stop(proc)
            s = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]["summary"]
            total = requests + streams + 1  # measured + warm-up + probe
            print(f"{streams:>8} {workers:>8} {s['throughput']['requests_per_s']:>9.0f} "
                  f"{s['throughput']['output_tokens_per_s']:>11.0f} {cpu:>10.1f}s {cpu / total * 1000:>9.2f} ms {wall:>6.1f}s")


def timing_truth(tmp: Path, streams: int, requests: int) -> None:
    log = tmp / "truth.jsonl"
    proc, url = start_sim(log, "--ttft-ms", "50", "--itl-ms", "5")
    try:
        out = tmp / "truth"
        run_client(url, out, streams, requests, 64)
    finally:
        stop(proc)
    truth = {d["id"]: d for d in map(orjson.loads, log.read_bytes().splitlines())}
    offset = orjson.loads((out / "run.json").read_bytes())["epoch_offset_ns"]
    ttft_err, itl_err, send_gap = [], [], []
    for line in (out / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r["warmup"] or r["status"] != "ok":
            continue
        t = truth[r["response_id"]]
        sent = r["sent_ns"] - offset
        ttft_err.append(((r["first_token_ns"] - offset - sent) - (t["first_token_ns"] - t["received_ns"])) / 1e6)
        send_gap.append((t["received_ns"] - sent) / 1e6)
        client_gaps = np.diff(r["chunk_offsets_ns"])
        itl_err.extend((client_gaps - np.diff(t["chunk_ns"])) / 1e6)
    te, ie = np.asarray(ttft_err), np.abs(np.asarray(itl_err))
    print(f"\nTiming truth at {streams} streams (simulator TTFT 50 ms, ITL 5 ms), {len(te)} requests vs the simulator's log")
    print(f"  TTFT error: mean {te.mean():+.3f} ms, p99 {np.percentile(te, 99):+.3f} ms, max {te.max():+.3f} ms")
    print(f"  send side (client sent -> server received): mean {np.mean(send_gap):.3f} ms")
    print(f"  |ITL error| per gap: mean {ie.mean():.3f} ms, p99 {np.percentile(ie, 99):.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--workers", nargs="+", default=["1"], help="--workers values to measure (N or auto)")
    ap.add_argument("--skip-truth", action="store_true", help="only the capacity part")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        capacity(tmp, args.streams, args.requests, args.tokens, args.workers)
        if not args.skip_truth:
            timing_truth(tmp, 64, 640)


if __name__ == "__main__":
    main()
