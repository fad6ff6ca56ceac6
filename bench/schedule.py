"""Schedule truth: does an open-loop run send its requests when it said it would? Prints figures; asserts nothing.

    python bench/schedule.py                  # constant 20 and 200 req/s, Poisson 20 req/s, 400 arrivals each
    python bench/schedule.py --requests 1000 --skip-pacer
    python bench/schedule.py --skip-pacer --skip-end-to-end --vs vllm   # only side by side with vLLM's and a 60-line client

Part 1, the pacer alone (in-process, no HTTP, on uvloop): a constant-rate schedule
waited for with a plain `asyncio.sleep(due - now)` (what the executor did before)
and with `sleep_until` (what it does now). Lateness is wake-up − due; CPU is the
process's CPU time over the schedule, as a share of one core.

Part 2, end to end: `tokspeed run --rate R` against `tokspeed sim --ttft-ms 0
--itl-ms 0 --kernel-stamps --log FILE` (8-token responses, 20 warm-up requests; the simulator logs each
arrival as the kernel's receive time, so its own loop's delays are not in the server-side figures). The run's records
and the simulator's log share one monotonic clock, so each request is seen three
times: scheduled (by the client's plan), sent (bytes handed to the socket) and
received (by the server). For each: the rate ((n − 1) / (last − first)) and the
coefficient of variation of the gaps between consecutive requests; then the
schedule lag (sent − scheduled) and the client's CPU time (from the OS, whole
process, minus a one-request run's start-up cost). On a 2-core machine the client
and the simulator share the cores, so the figures are upper bounds on the jitter.

Part 3, side by side (constant 20 and 200 req/s, one simulator): tokspeed with its defaults
(telemetry and the progress display on), a 60-line aiohttp client this script writes itself
(plain `asyncio.sleep` to each due time, the usual hand-written load script) and, with
`--vs vllm`, vLLM's `bench serve --burstiness inf` (its constant-interval mode). Only what the
server saw is compared, so every client is judged alike: the rate and the CV of the gaps between
the last N arrivals of each client's run (its warm-up and start-up requests left out), and each
arrival's lateness against the best constant grid at the asked rate (arrival − (first + i / rate),
shifted so that the earliest is 0: a client whose sends drift or stall shows it there).

Part 4, `--attribute K`: what shares the event loop with the pacer, and its part in the send jitter.
First each candidate's cost per call, in this process: encoding a request body (orjson, done after
the due time, in the request's task), writing a finished record (serialise, append, flush), one
client telemetry sample (psutil) and one render of the live view (rich; its refresh thread holds the
GIL while it renders, 4 times a second). Then constant 200 req/s, K runs of each of four
configurations taken in turn, the client in a pseudo-terminal so the live view draws as it does for a
person: defaults (live view and telemetry, the simulator's /metrics scraped every 0.25 s), `-q` (no
live view), `--no-telemetry`, and both off. Each configuration's figures are medians over its runs:
the server's gap CV and lateness p99 (as in part 3) and the client's own lag p99 (sent − scheduled).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import export_tokenizer, find_vllm, vllm_version
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


def run_client(url: str, out: Path, *args: str, cpus: set[int] | None = None, quiet: bool = True) -> float:
    """Run `tokspeed run` (pinned to `cpus` if given); returns the client's CPU seconds (user + system)."""
    proc = pin(subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--max-tokens", "8", "--out", str(out),
         *(["-q"] if quiet else []), *args],
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
    proc, url = start_sim("--ttft-ms", "0", "--itl-ms", "0", "--kernel-stamps", "--log", str(log), cpus=sim_cpus)
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


# -- part 3: side by side with other clients ----------------------------------------------------

REFERENCE = """\
# The usual hand-written open-loop load script: aiohttp, asyncio.sleep to each due time.
import asyncio
import sys
import time

import aiohttp


async def one(session, url, model):
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}
    async with session.post(url + "/chat/completions", json=body) as response:
        async for _ in response.content:
            pass


async def main(url, rate, n):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async with session.get(url + "/models") as response:
            model = (await response.json())["data"][0]["id"]
        tasks = []
        start = time.perf_counter()
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, url, model)))
        await asyncio.gather(*tasks)


asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
"""


def log_length(log: Path) -> int:
    return log.read_bytes().count(b"\n") if log.exists() else 0


def arrivals_since(log: Path, start_line: int, n: int) -> np.ndarray:
    """The last `n` receive times (monotonic ns) the simulator logged after line `start_line`."""
    lines = log.read_bytes().splitlines()[start_line:]
    received = np.sort(np.array([orjson.loads(line)["received_ns"] for line in lines], dtype=np.int64))
    if len(received) < n:
        raise SystemExit(f"the simulator logged {len(received)} requests of this client, not {n}")
    return received[-n:]


def grid_lateness_ms(received: np.ndarray, rate: float) -> np.ndarray:
    """Each arrival against the constant grid first + i / rate, shifted so that the earliest is on time."""
    offsets = received - (received[0] + np.round(np.arange(len(received)) * NS / rate)).astype(np.int64)
    return (offsets - offsets.min()) / MS


def run_reference(url: str, script: Path, rate: float, n: int) -> None:
    subprocess.run([sys.executable, str(script), url, f"{rate:g}", str(n)], check=True, stdout=subprocess.DEVNULL)


def run_vllm_paced(python: str, url: str, model: str, tokenizer: Path, rate: float, out: Path, *, n: int, warmup: int) -> None:
    from peers import _RUNNER

    out.mkdir(parents=True, exist_ok=True)
    base = url.removesuffix("/v1")
    subprocess.run(
        [python, "-c", _RUNNER, "--backend", "openai-chat", "--base-url", base, "--endpoint", "/v1/chat/completions",
         "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "32",
         "--random-output-len", "8", "--ignore-eos", "--num-prompts", str(n), "--request-rate", f"{rate:g}",
         "--burstiness", "inf", "--num-warmups", str(warmup), "--disable-tqdm", "--save-result", "--result-dir",
         str(out), "--result-filename", "vllm.json"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def side_by_side(tmp: Path, rates: list[float], n: int, vllm: str | None, repeat: int) -> None:
    log = tmp / "sim-peers.jsonl"
    proc, url = start_sim("--ttft-ms", "0", "--itl-ms", "0", "--kernel-stamps", "--log", str(log))
    script = tmp / "reference.py"
    script.write_text(REFERENCE)
    warmup = 20
    runs = iter(range(1_000_000))
    try:
        with urllib.request.urlopen(f"{url}/models") as response:
            model = orjson.loads(response.read())["data"][0]["id"]
        tokenizer = export_tokenizer(tmp / "tokenizer") if vllm else None
        peer = f", vLLM {vllm_version(vllm)} bench serve --burstiness inf" if vllm else ""
        print(f"\nSide by side on one simulator (zero delays): tokspeed with its defaults (telemetry, progress display), "
              f"a 60-line aiohttp client{peer}; the server's last {n} arrivals of each run, {repeat} runs each "
              f"(clients in turn), then each figure's median over the runs")
        print(f"{'rate':>6} {'client':<24} {'rate/s':>9} {'gap CV':>7} {'late p50':>9} {'p99':>8} {'max':>8}")
        for rate in rates:
            clients: dict[str, Callable[[float, Path], object]] = {
                "tokspeed": lambda r, out: run_client(url, out, "--rate", f"{r:g}", "--arrival", "constant", "--requests",
                                                      str(n), "--warmup", str(warmup), quiet=False),
                "aiohttp, 60 lines": lambda r, out: run_reference(url, script, r, n + warmup),
            }
            if vllm and tokenizer is not None:
                clients["vLLM bench serve"] = partial(run_vllm_paced, vllm, url, model, tokenizer, n=n, warmup=warmup)
            figures: dict[str, list[tuple[float, float, float, float, float]]] = {name: [] for name in clients}
            for _ in range(repeat):
                for name, run in clients.items():
                    start_line = log_length(log)
                    run(rate, tmp / f"side-{next(runs)}")
                    received = arrivals_since(log, start_line, n)
                    achieved, cv = rate_and_cv(list(received))
                    late = grid_lateness_ms(received, rate)
                    figures[name].append((achieved, cv, float(np.median(late)), float(np.percentile(late, 99)),
                                          float(late.max())))
            for name, rows in figures.items():
                for row in rows if repeat > 1 else []:
                    print(f"{'':>6} {'  one run':<24} " + _figure_cells(row))
                print(f"{rate:>6g} {name:<24} " + _figure_cells(tuple(np.median(np.array(rows), axis=0))), flush=True)
    finally:
        stop(proc)


def _figure_cells(row: tuple[float, ...]) -> str:
    achieved, cv, p50, p99, top = row
    return f"{achieved:>9.3f} {cv:>7.4f} {p50:>7.3f}ms {p99:>6.3f}ms {top:>6.3f}ms"


# -- part 4: what shares the loop with the pacer ------------------------------------------------


def _per_call_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(median, max) wall time of one call of `fn`, in µs, over n calls after 20 to warm up."""
    for _ in range(20):
        fn()
    times = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - t0
    return float(np.median(times)) / 1000, float(times.max()) / 1000


def loop_costs(tmp: Path, n: int = 2000) -> None:
    """Each candidate's cost per call, measured here in-process."""
    import io

    from rich.console import Console as RichConsole

    from tokspeed.records import RequestRecord, Status
    from tokspeed.reports.console import Progress
    from tokspeed.results.writer import ResultsWriter
    from tokspeed.telemetry.client import ClientProbe

    body = {"model": "tokspeed-sim", "messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 8,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    writer = ResultsWriter(tmp / "costs", epoch_offset_ns=0)
    record = RequestRecord(index=1, iteration=0, warmup=False, scheduled_ns=1, sent_ns=2, first_token_ns=3, end_ns=4,
                           status=Status.OK, output_tokens=8, input_tokens=120, chunk_ns=list(range(5, 13)))
    sampler = ClientProbe()
    progress = Progress(echo=None)
    progress.ttfts = [1_000_000 * i for i in range(512)]
    screen = RichConsole(file=io.StringIO(), force_terminal=True, width=120)
    costs = {
        "request body (orjson)": lambda: orjson.dumps(body),
        "record written + flushed": lambda: writer.append(record),
        "client telemetry sample (psutil)": sampler.read,
        "live view render (rich)": lambda: screen.print(progress),
    }
    print(f"\nWhat shares the loop, cost per call in this process ({n} calls each); at 200 req/s a send is due every 5,000 µs")
    print(f"{'what':<34} {'median':>9} {'max':>9}")
    for name, fn in costs.items():
        median, top = _per_call_us(fn, n)
        print(f"{name:<34} {median:>7.1f}µs {top:>7.1f}µs")


def run_in_terminal(argv: list[str]) -> None:
    """Run `argv` with a pseudo-terminal as its stdout and stderr (so the live view draws), reading it to the end."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    try:
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the child closed the terminal
                break
    finally:
        os.close(master)
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(argv[3:])} failed")


ATTRIBUTION = {
    "defaults (live view, telemetry)": (),
    "-q (no live view)": ("-q",),
    "--no-telemetry": ("--no-telemetry",),
    "-q --no-telemetry": ("-q", "--no-telemetry"),
}


def attribution(tmp: Path, rate: float, n: int, repeat: int) -> None:
    """Constant `rate` req/s with the live view and telemetry each on and off; medians over `repeat` runs."""
    loop_costs(tmp)
    log = tmp / "sim-attribution.jsonl"
    proc, url = start_sim("--ttft-ms", "0", "--itl-ms", "0", "--kernel-stamps", "--log", str(log))
    warmup = 20
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ATTRIBUTION}
    try:
        for k in range(repeat):
            for i, (name, flags) in enumerate(ATTRIBUTION.items()):
                out = tmp / f"attr-{k}-{i}"
                start_line = log_length(log)
                run_in_terminal([sys.executable, "-m", "tokspeed", "run", "--target", url, "--max-tokens", "8",
                                 "--rate", f"{rate:g}", "--arrival", "constant", "--requests", str(n),
                                 "--warmup", str(warmup), "--out", str(out), *flags])
                received = arrivals_since(log, start_line, n)
                _, cv = rate_and_cv(list(received))
                times, _ = measured(out, log)
                lag = (np.asarray(times["sent"]) - np.asarray(times["scheduled"])) / MS
                figures[name].append((cv, float(np.percentile(grid_lateness_ms(received, rate), 99)),
                                      float(np.percentile(lag, 99))))
    finally:
        stop(proc)
    print(f"\nConstant {rate:g} req/s, the client in a terminal, {n} arrivals a run, median of {repeat} runs each")
    print(f"{'configuration':<34} {'server gap CV':>13} {'lateness p99':>12} {'client lag p99':>14}")
    for name, rows in figures.items():
        cv, late, lag = np.median(np.array(rows), axis=0)
        print(f"{name:<34} {cv:>13.4f} {late:>10.3f}ms {lag:>12.3f}ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="measured arrivals per case")
    ap.add_argument("--skip-pacer", action="store_true", help="only the end-to-end part")
    ap.add_argument("--repeat", type=int, default=0, help="then constant 200 req/s this many more times")
    ap.add_argument("--pin", action="store_true", help="client on the first CPU, simulator on the last (sched_setaffinity)")
    ap.add_argument("--vs", choices=["vllm"], help="in the side-by-side part, also vLLM's client (bench/peers.py finds it)")
    ap.add_argument("--skip-side-by-side", action="store_true", help="leave out the side-by-side part")
    ap.add_argument("--side-repeat", type=int, default=3, help="runs of each client in the side-by-side part")
    ap.add_argument("--skip-end-to-end", action="store_true", help="leave out the end-to-end part")
    ap.add_argument("--attribute", type=int, default=0, metavar="K",
                    help="then part 4: constant 200 req/s with the live view and telemetry on and off, K runs each")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    if not args.skip_pacer:
        pacer([20.0, 200.0], args.requests)
    vllm = None
    if args.vs == "vllm":
        vllm = find_vllm(Path(__file__).resolve().parents[1])
        if vllm is None:
            raise SystemExit("--vs vllm: no Python with vllm found (TOKSPEED_VLLM_PYTHON, ./.venv-vllm; see bench/peers.py)")
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_end_to_end:
            end_to_end(Path(d), [(20.0, "constant"), (200.0, "constant"), (20.0, "poisson")], args.requests, args.repeat,
                       args.pin)
        if not args.skip_side_by_side:
            side_by_side(Path(d), [20.0, 200.0], args.requests, vllm, args.side_repeat)
        if args.attribute:
            attribution(Path(d), 200.0, args.requests, args.attribute)


if __name__ == "__main__":
    main()
