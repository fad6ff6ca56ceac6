"""Benchmark tokspeed's own client against `tokspeed sim` on loopback. Prints figures; asserts nothing.

    python bench/client.py                          # tokspeed alone
    python bench/client.py --vs vllm                # side by side with vLLM's `bench serve`
    python bench/client.py --streams 256 --workers 1 2 --skip-truth

`--vs vllm` installs nothing: it uses `$TOKSPEED_VLLM_PYTHON`, `./.venv-vllm/bin/python`
(built by `.ci/run`) or the current Python, whichever can import vllm (see bench/peers.py).

Part 1, capacity, on two servers: "burst" (zero delays: the simulator writes a whole
response at once, so the client, not the server, is the bottleneck) and "paced" (one chunk every `--paced-itl-ms`, so every
token reaches the client in a read of its own, as with a real server). Figures: the
requests/s and output tokens/s the client and simulator sustain together, and the client's
CPU per request, marginal: (CPU of a run of 2N requests − CPU of a run of N) / N, from the
OS, whole process tree, so start-up and imports cancel out. On a 2-core machine client and
simulator share the cores: a client that uses less CPU leaves more to the simulator.

Part 2, timing truth at 8 and 64 streams, on /v1/completions (vLLM's chat client takes the
role-only first chunk for the first token, which is a different error): the simulator (TTFT
200 ms, ITL 5 ms) logs when it received each request and wrote each chunk. tokspeed's records are matched to that log by
response id (TTFT and ITL errors per request); vLLM's client keeps no ids, so its TTFT error is
the difference of the distributions (mean and p99 of measured − truth). The simulator runs with
`--kernel-stamps`: a request's arrival is the kernel's receive time, not when the simulator's loop
read it (late by up to milliseconds while it writes a burst of chunks); `--stamps loop` measures
against the loop's stamps instead. `--pin` puts the client and the simulator on cores of their own.
`--reads loop kernel` runs tokspeed twice in each measurement: reads stamped when its loop got to
them (the default) and with the kernel's receive stamps (`tokspeed run --kernel-stamps`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import export_tokenizer, find_vllm, run_vllm, vllm_version
from simproc import pin, start_sim, start_sims, stop

ROOT = Path(__file__).resolve().parent.parent
SIM_MODEL = "tokspeed-sim"


@dataclass(frozen=True)
class Measured:
    requests_per_s: float
    tokens_per_s: float
    cpu_s: float


def run_tokspeed(
    url: str, out: Path, streams: int, requests: int, tokens: int, workers: str = "1", api: str = "chat",
    cpus: set[int] | None = None, extra: tuple[str, ...] = (),
) -> Measured:
    """`tokspeed run` (pinned to `cpus` if given); CPU of the whole process tree (worker processes included) from the OS."""
    proc = pin(subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "run", "--target", url, "--concurrency", str(streams),
         "--requests", str(requests), "--max-tokens", str(tokens), "--warmup", str(streams),
         "--workers", workers, "--api", api, "--out", str(out), "-q", *extra],
        stdout=subprocess.DEVNULL,
    ), cpus)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tokspeed run failed at {streams} streams")
    s = orjson.loads((out / "run.json").read_bytes())["benchmarks"][0]["summary"]["throughput"]
    return Measured(s["requests_per_s"], s["output_tokens_per_s"], usage.ru_utime + usage.ru_stime)


class Clients:
    """The clients under test: tokspeed (one entry per --workers value and --reads stamp) and, if asked, vLLM's."""

    def __init__(self, workers: list[str], reads: list[str], vllm: str | None, tokenizer: Path | None) -> None:
        self._tokspeed: dict[str, tuple[str, tuple[str, ...]]] = {}  # name: (--workers, further flags)
        for w in workers:
            for stamp in reads:
                what = ([f"workers {w}"] if len(workers) > 1 else []) + ([f"{stamp} reads"] if len(reads) > 1 else [])
                name = f"tokspeed ({', '.join(what)})" if what else "tokspeed"
                self._tokspeed[name] = (w, ("--kernel-stamps",) if stamp == "kernel" else ())
        self.names = list(self._tokspeed)
        self._vllm, self._tokenizer = vllm, tokenizer
        if vllm:
            self.names.append("vllm bench serve")

    def run(
        self, name: str, url: str, out: Path, streams: int, requests: int, tokens: int, api: str = "chat",
        cpus: set[int] | None = None,
    ) -> Measured:
        if name in self._tokspeed:
            workers, extra = self._tokspeed[name]
            return run_tokspeed(url, out, streams, requests, tokens, workers, api, cpus, extra)
        assert self._vllm and self._tokenizer
        base = url[: -len("/v1")]
        peer = run_vllm(self._vllm, base, SIM_MODEL, self._tokenizer, streams, requests, tokens, out, api)
        return Measured(peer.result["request_throughput"], peer.result["output_throughput"], peer.cpu_s)


def capacity(
    tmp: Path, clients: Clients, streams_list: list[int], requests: int, tokens: int, paced_itl_ms: float, sims: int
) -> None:
    print(f"\nCapacity: {tokens}-token streamed responses; CPU/request is marginal over runs of {requests} and "
          f"{2 * requests} requests" + (f"; {sims} simulators share the port (--reuse-port)" if sims > 1 else ""))
    print("CPU/token is CPU/request over the tokens of one response (each token one SSE event read, parsed and stamped "
          "on a paced server); 'vs vLLM' is req/s, then CPU/request, as a ratio to vLLM's client on the same server")
    print(f"{'server':>7} {'streams':>8} {'client':>22} {'req/s':>8} {'tok/s':>9} {'CPU/request':>12} {'CPU/token':>10} "
          f"{'vs vLLM':>15}")
    for server, itl in (("burst", 0.0), ("paced", paced_itl_ms)):
        for streams in streams_list:
            rows: dict[str, tuple[Measured, float]] = {}
            for name in clients.names:
                procs, url = start_sims(sims, "--ttft-ms", "0", "--itl-ms", str(itl))
                try:
                    tag = re.sub(r"\W+", "-", name)
                    small = clients.run(name, url, tmp / f"cap-{server}-{streams}-{tag}-1", streams, requests, tokens)
                    large = clients.run(name, url, tmp / f"cap-{server}-{streams}-{tag}-2", streams, 2 * requests, tokens)
                finally:
                    for proc in procs:
                        stop(proc)
                rows[name] = (large, (large.cpu_s - small.cpu_s) / requests * 1000)
            peer = rows.get("vllm bench serve")
            for name, (m, cpu_ms) in rows.items():
                ratio = (f"{m.requests_per_s / peer[0].requests_per_s:.2f}x, {cpu_ms / peer[1]:.2f}x"
                         if peer and name != "vllm bench serve" else "")
                print(f"{server:>7} {streams:>8} {name:>22} {m.requests_per_s:>8.0f} {m.tokens_per_s:>9.0f} "
                      f"{cpu_ms:>9.2f} ms {cpu_ms / tokens * 1000:>7.2f} µs {ratio:>15}")


def truth_log(log: Path) -> dict[str, dict[str, object]]:
    return {d["id"]: d for d in map(orjson.loads, log.read_bytes().splitlines())}


def tokspeed_errors(
    out: Path, truth: dict[str, dict[str, object]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per request: TTFT error, its send side and its read side (ms); per gap: |ITL error| (ms).

    The TTFT error is the sum of the two sides: send (the client's send stamp to the simulator's
    arrival stamp) and read (the simulator's first-token write to the client's read stamp).
    """
    offset = orjson.loads((out / "run.json").read_bytes())["epoch_offset_ns"]
    ttft_err, itl_err, send_gap, read_gap = [], [], [], []
    for line in (out / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r["warmup"] or r["status"] != "ok":
            continue
        t = truth[r["response_id"]]
        sent = r["sent_ns"] - offset
        ttft_err.append(((r["first_token_ns"] - offset - sent) - (t["first_token_ns"] - t["received_ns"])) / 1e6)
        send_gap.append((t["received_ns"] - sent) / 1e6)
        read_gap.append((r["first_token_ns"] - offset - t["first_token_ns"]) / 1e6)
        itl_err.extend((np.diff(r["chunk_offsets_ns"]) - np.diff(t["chunk_ns"])) / 1e6)
    return np.asarray(ttft_err), np.asarray(send_gap), np.asarray(read_gap), np.abs(np.asarray(itl_err))


def truth_ttft_ms(truth: dict[str, dict[str, object]]) -> np.ndarray:
    return np.asarray([(t["first_token_ns"] - t["received_ns"]) / 1e6 for t in truth.values()  # type: ignore[operator]
                       if t.get("first_token_ns")])


def timing_truth(
    tmp: Path, clients: Clients, streams_list: list[int], tokens: int, pinned: bool, stamps: str, run: int = 0
) -> None:
    """`pinned`: tokspeed on core 0, the simulator on core 1 (vLLM's client is not pinned).
    `stamps`: the simulator's arrival stamps, "kernel" (`--kernel-stamps`) or "loop" (when its loop read the request)."""
    client_cpus, sim_cpus = ({0}, {1}) if pinned else (None, None)
    print("\nTiming truth: /v1/completions, simulator TTFT 200 ms, ITL 5 ms; error = client's figure − the log"
          + (" (client on core 0, simulator on core 1)" if pinned else "")
          + f"; the log's arrivals stamped by the {'kernel' if stamps == 'kernel' else 'simulator loop'}")
    print("send side: the client's send stamp to the simulator's arrival stamp; read side: the simulator's "
          "first-token write to the client's read stamp (mean / p99; the two add up to the TTFT error)")
    print(f"{'streams':>8} {'client':>22} {'TTFT err mean':>14} {'p99':>9} {'send side':>16} {'read side':>16} "
          f"{'|ITL err| mean':>15} {'p99':>7}")
    for streams in streams_list:
        requests = max(8 * streams, 256)
        for name in clients.names:
            tag = re.sub(r"\W+", "-", name)
            log = tmp / f"truth-{run}-{streams}-{tag}.jsonl"
            kernel = ["--kernel-stamps"] if stamps == "kernel" else []
            proc, url = start_sim("--log", str(log), "--ttft-ms", "200", "--itl-ms", "5", *kernel, cpus=sim_cpus)
            out = tmp / f"truth-{run}-{streams}-{tag}"
            try:
                clients.run(name, url, out, streams, requests, tokens, api="completions", cpus=client_cpus)
            finally:
                stop(proc)
            truth = truth_log(log)
            if name == "vllm bench serve":
                measured = np.asarray(orjson.loads((out / "vllm.json").read_bytes())["ttfts"]) * 1000
                real = truth_ttft_ms(truth)
                print(f"{streams:>8} {name:>22} {measured.mean() - real.mean():>+12.2f} ms "
                      f"{np.percentile(measured, 99) - np.percentile(real, 99):>+7.2f} ms")
                continue
            te, send, read, ie = tokspeed_errors(out, truth)
            print(f"{streams:>8} {name:>22} {te.mean():>+12.2f} ms {np.percentile(te, 99):>+7.2f} ms "
                  f"{_side(send):>16} {_side(read):>16} {ie.mean():>12.3f} ms {np.percentile(ie, 99):>7.3f}")


def _side(gaps_ms: np.ndarray) -> str:
    return f"{gaps_ms.mean():.2f} / {np.percentile(gaps_ms, 99):.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--requests", type=int, default=1000, help="the smaller of the two runs per measurement")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--paced-itl-ms", type=float, default=2.0, help="the paced server's inter-token latency")
    ap.add_argument("--workers", nargs="+", default=["1"], help="--workers values to measure (N or auto)")
    ap.add_argument("--vs", choices=["vllm"], help="also run this peer client on the same servers")
    ap.add_argument("--reads", nargs="+", choices=["loop", "kernel"], default=["loop"],
                    help="how tokspeed stamps its reads: when its event loop got to them (the default) or the kernel's "
                         "receive time (--kernel-stamps); several to compare")
    ap.add_argument("--skip-truth", action="store_true", help="only the capacity part")
    ap.add_argument("--sims", type=int, default=1,
                    help="simulators behind the client in the capacity part (sharing one port): one simulator "
                         "process is the limit on a burst server once the client is cheap")
    ap.add_argument("--skip-capacity", action="store_true", help="only the timing-truth part")
    ap.add_argument("--pin", action="store_true", help="timing truth with the client and the simulator on cores of their own")
    ap.add_argument("--repeat", type=int, default=1, help="timing-truth runs (each a new simulator)")
    ap.add_argument("--stamps", choices=["kernel", "loop"], default="kernel",
                    help="the truth simulator's arrival stamps: the kernel's receive time (--kernel-stamps) or when "
                         "its event loop read the request (late by the loop's backlog)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        vllm, tokenizer = None, None
        if args.vs == "vllm":
            vllm = find_vllm(ROOT)
            if vllm is None:
                raise SystemExit("no Python with vllm found; see bench/peers.py for how to get one")
            tokenizer = export_tokenizer(tmp / "tokenizer")
            print(f"peer: vllm {vllm_version(vllm)} bench serve ({vllm})")
        clients = Clients(args.workers, args.reads, vllm, tokenizer)
        if not args.skip_capacity:
            capacity(tmp, clients, args.streams, args.requests, args.tokens, args.paced_itl_ms, args.sims)
        if not args.skip_truth:
            for run in range(args.repeat):
                timing_truth(tmp, clients, [8, 64], 64, args.pin, args.stamps, run)


if __name__ == "__main__":
    main()
