"""Schedule truth: does an open-loop run send its requests when it said it would? Prints figures; asserts nothing.

    python bench/schedule.py                  # constant 20 and 200 req/s, Poisson 20 req/s, 400 arrivals each
    python bench/schedule.py --requests 1000 --skip-pacer

Part 1, the pacer alone (in-process, no HTTP, on uvloop): a constant-rate schedule
waited for with a plain `asyncio.sleep(due - now)` (what the executor did before)
and with `sleep_until` (what it does now). Lateness is wake-up − due; CPU is the
process's CPU time over the schedule, as a share of one core.

Part 2, end to end: `tokspeed run --rate R` against `tokspeed sim --ttft-ms 0
--itl-ms 0 --log FILE` (8-token responses, 20 warm-up requests). The run's records
and the simulator's log share one monotonic clock, so each request is seen three
times: scheduled (by the client's plan), sent (bytes handed to the socket) and
received (by the server). For each: the rate ((n − 1) / (last − first)) and the
coefficient of variation of the gaps between consecutive requests; then the
schedule lag (sent − scheduled) and the client's CPU time (from the OS, whole
process, minus a one-request run's start-up cost). On a 2-core machine the client
and the simulator share the cores, so the figures are upper bounds on the jitter.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simproc import pin, start_sim, stop

NS = 1_000_000_000
MS = 1_000_000


# -- part 1: the pacer alone ---------------------------------------------------------------------


async def _plain_sleep(due_ns: int) -> None:
    delay = due_ns - time.perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / NS)


async def _pace(rate: float, n: int, wait: Callable[[int], Awaitable[None]]) -> tuple[np.ndarray, float, float]:
    """Wait for n constant-rate arrivals; returns (lateness ns, CPU s, wall s)."""
    late = np.empty(n, dtype=np.int64)
    cpu0, start = time.process_time(), time.perf_counter_ns()
    for i in range(n):
        due = start + round(i * NS / rate)
        await wait(due)
        late[i] = time.perf_counter_ns() - due
    return late, time.process_time() - cpu0, (time.perf_counter_ns() - start) / NS


def pacer(rates: list[float], n: int) -> None:
    import uvloop

    from tokspeed.runner.pacing import sleep_until

    print(f"Pacer alone: constant arrivals, {n} per rate, uvloop, no HTTP")
    print(f"{'rate':>6} {'wait':<18} {'late p50':>9} {'p99':>8} {'max':>8} {'early':>6} {'gap CV':>7} {'CPU':>6}")
    for rate in rates:
        for name, wait in (("asyncio.sleep", _plain_sleep), ("sleep_until", sleep_until)):
            late, cpu, wall = uvloop.run(_pace(rate, n, wait))
            gaps = np.diff(late) + NS / rate
            ms = late / MS
            print(f"{rate:>6g} {name:<18} {np.median(ms):>7.3f}ms {np.percentile(ms, 99):>6.3f}ms {ms.max():>6.3f}ms "
                  f"{int((late < 0).sum()):>6} {gaps.std() / gaps.mean():>7.4f} {cpu / wall:>6.1%}")


# -- part 2: end to end against the simulator ----------------------------------------------------


def run_client(url: str, out: Path, *args: str, cpus: set[int] | None = None) -> float:
    """Run `tokspeed run` (pinned to `cpus` if given); returns the client's CPU seconds (user + system)."""
    proc = pin(subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--max-tokens", "8", "--out", str(out), "-q", *args],
        stdout=subprocess.DEVNULL,
    ), cpus)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tokspeed run {' '.join(args)} failed")
    return usage.ru_utime + usage.ru_stime


def rate_and_cv(times_ns: list[int]) -> tuple[float, float]:
    """(n − 1) / (last − first) in req/s, and the CV of the gaps between consecutive times."""
    gaps = np.diff(np.sort(np.asarray(times_ns, dtype=np.int64))).astype(float)
    return NS / gaps.mean(), gaps.std() / gaps.mean()


def measured(out: Path, log: Path) -> tuple[dict[str, list[int]], dict[str, Any]]:
    """Scheduled, sent and received times of the measured requests (monotonic ns), and the summary."""
    run = orjson.loads((out / "run.json").read_bytes())
    offset = run["epoch_offset_ns"]
    truth = {d["id"]: d for d in map(orjson.loads, log.read_bytes().splitlines())}
    times: dict[str, list[int]] = {"scheduled": [], "sent": [], "received": []}
    for line in (out / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r["warmup"] or r["status"] != "ok":
            continue
        times["scheduled"].append(r["scheduled_ns"] - offset)
        times["sent"].append(r["sent_ns"] - offset)
        times["received"].append(truth[r["response_id"]]["received_ns"])
    return times, run["benchmarks"][0]["summary"]


def end_to_end(tmp: Path, cases: list[tuple[float, str]], n: int, repeat: int, pin: bool) -> None:
    log = tmp / "sim.jsonl"
    client_cpus, sim_cpus = ({0}, {(os.cpu_count() or 2) - 1}) if pin else (None, None)
    proc, url = start_sim("--ttft-ms", "0", "--itl-ms", "0", "--log", str(log), cpus=sim_cpus)
    try:
        if pin:
            print(f"\npinned: client on CPU {min(client_cpus or {0})}, simulator on CPU {min(sim_cpus or {0})}")
        startup = run_client(url, tmp / "startup", "--rate", "1000", "--requests", "1", "--warmup", "0", cpus=client_cpus)
        print(f"\nEnd to end: tokspeed run vs tokspeed sim (zero delays), {n} measured arrivals per case; "
              f"client start-up CPU {startup:.2f} s (subtracted)")
        print(f"{'case':<16} {'where':<10} {'rate/s':>9} {'vs target':>9} {'gap CV':>7}")
        for rate, arrival in cases:
            out = tmp / f"{arrival}-{rate:g}"
            t0 = time.perf_counter()
            cpu = run_client(url, out, "--rate", f"{rate:g}", "--arrival", arrival, "--requests", str(n),
                             "--warmup", "20", "--seed", "1", cpus=client_cpus)
            wall = time.perf_counter() - t0
            times, summary = measured(out, log)
            label = f"{arrival} {rate:g}/s"
            for where in ("scheduled", "sent", "received"):
                achieved, cv = rate_and_cv(times[where])
                print(f"{label:<16} {where:<10} {achieved:>9.3f} {achieved / rate - 1:>+9.2%} {cv:>7.4f}")
                label = ""
            lag = (np.asarray(times["sent"]) - np.asarray(times["scheduled"])) / MS
            to_server = (np.asarray(times["received"]) - np.asarray(times["sent"])) / MS
            span = (max(times["scheduled"]) - min(times["scheduled"])) / NS
            net = cpu - startup
            print(f"{'':<16} lag (sent − scheduled) p50 {np.median(lag):.3f} ms, p99 {np.percentile(lag, 99):.3f} ms, "
                  f"max {lag.max():.3f} ms, min {lag.min():.3f} ms; sent → received p50 {np.median(to_server):.3f} ms")
            print(f"{'':<16} client CPU {cpu:.2f} s in {wall:.1f} s wall; net of start-up {net:.2f} s "
                  f"= {net / (n + 20) * 1000:.2f} ms/request, {net / span:.1%} of a core over the {span:.1f} s schedule")
            sched = summary.get("schedule")
            if sched:
                print(f"{'':<16} run.json: offered {sched['offered_requests_per_s']:.3f}/s, sent "
                      f"{sched['sent_requests_per_s']:.3f}/s, ttft_from_scheduled p99 "
                      f"{summary['ttft_from_scheduled_ms']['p99']:.3f} ms")
        if repeat:
            repeated(url, tmp, log, n, repeat, client_cpus)
    finally:
        stop(proc)


def repeated(url: str, tmp: Path, log: Path, n: int, repeat: int, cpus: set[int] | None) -> None:
    """Constant 200 req/s `repeat` times: each run's sent-gap CV and lag max, and how many kept CV ≤ 0.02."""
    cvs = []
    for i in range(repeat):
        out = tmp / f"repeat-{i}"
        run_client(url, out, "--rate", "200", "--arrival", "constant", "--requests", str(n), "--warmup", "20", cpus=cpus)
        times, _ = measured(out, log)
        _, cv = rate_and_cv(times["sent"])
        lag_max = (np.asarray(times["sent"]) - np.asarray(times["scheduled"])).max() / MS
        cvs.append(cv)
        print(f"  constant 200/s run {i + 1}: sent gap CV {cv:.4f}, lag max {lag_max:.3f} ms", flush=True)
    print(f"  sent gap CV ≤ 0.02 in {sum(cv <= 0.02 for cv in cvs)} of {repeat} runs (median {np.median(cvs):.4f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="measured arrivals per case")
    ap.add_argument("--skip-pacer", action="store_true", help="only the end-to-end part")
    ap.add_argument("--repeat", type=int, default=0, help="then constant 200 req/s this many more times")
    ap.add_argument("--pin", action="store_true", help="client on the first CPU, simulator on the last (sched_setaffinity)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    if not args.skip_pacer:
        pacer([20.0, 200.0], args.requests)
    with tempfile.TemporaryDirectory() as d:
        end_to_end(Path(d), [(20.0, "constant"), (200.0, "constant"), (20.0, "poisson")], args.requests, args.repeat, args.pin)


if __name__ == "__main__":
    main()
