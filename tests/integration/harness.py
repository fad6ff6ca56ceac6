"""Test harness: a real simulator subprocess on loopback, real `tokspeed run` subprocesses.

`SimServer` starts `python -m tokspeed sim --port 0 --log FILE ...` and reads
its URL from the first line it prints. `run_cli` runs `python -m tokspeed ...`
and returns the completed process. `Truth` joins a run's request records with
the simulator's log by response id, in one clock (CLOCK_MONOTONIC ns).
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

_URL = re.compile(rb"listening on (http://\S+/v1)")


class SimServer:
    def __init__(self, tmp: Path, *args: str, preexec_fn: Callable[[], None] | None = None) -> None:
        self.log = tmp / f"sim-{time.monotonic_ns()}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tokspeed", "sim", "--port", "0", "--log", str(self.log), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = _URL.search(line)
        if not m:
            self.stop()
            raise RuntimeError(f"simulator did not start: {line!r}")
        self.url = m.group(1).decode()

    def entries(self) -> dict[str, dict[str, Any]]:
        out = {}
        for line in self.log.read_bytes().splitlines():
            d = orjson.loads(line)
            out[d["id"]] = d
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# Ports for servers the tests start on a port they choose (vLLM, transformers serve, llama.cpp, PostgreSQL), or
# keep closed: below Linux's ephemeral range (32768-60999), where the OS never puts a `--port 0` server. A port
# taken from that range (bind to 0, then release) could be handed to a simulator another worker starts while vLLM
# took ~30 s to bind it; vLLM then failed to start, and the simulator, answering on its port, passed for it.
CHOSEN_PORTS = range(20000, 32000)


def free_port() -> int:
    """A port nothing listens on now, outside the range the OS hands out to `--port 0` servers."""
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.choice(CHOSEN_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {CHOSEN_PORTS} after 100 tries")


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "tokspeed", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def start_run(*args: str) -> subprocess.Popen[str]:
    """`tokspeed run ARGS` in the background (no OPENAI_API_KEY from the caller's environment)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.Popen([sys.executable, "-m", "tokspeed", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def wait_for_records(out: Path, n: int, proc: subprocess.Popen[str], timeout_s: float = 30) -> None:
    """Until `out/requests.jsonl` holds `n` lines; AssertionError if the run ends or time runs out first."""
    deadline = time.monotonic() + timeout_s
    path = out / "requests.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_bytes().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records in {out} (exit {proc.poll()})")


def capacity_search(sim: SimServer, out: Path, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`tokspeed capacity` against `sim` into `out` (exit 0, or 3 for an SLO verdict): run.json and its capacity."""
    p = run_cli("capacity", "--target", sim.url, "--precision", "5%", "--out", str(out), "--plain", "--no-telemetry",
                *args, timeout=600)
    assert p.returncode in (0, 3), p.stdout + p.stderr
    result = load_json(out / "run.json")
    return result, result["capacity"]


def load_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "requests.jsonl").read_bytes().splitlines()]


@dataclass
class Pair:
    """One measured request as tokspeed saw it (client_*) and as the simulator did it (sim)."""

    client: dict[str, Any]
    sim: dict[str, Any]
    offset: int  # epoch_offset_ns of the run: client file times minus offset = monotonic ns

    def c(self, key: str) -> int:
        return int(self.client[key]) - self.offset

    @property
    def client_chunks(self) -> np.ndarray:
        return np.asarray(self.client["chunk_offsets_ns"], dtype=np.int64) + self.c("sent_ns")

    @property
    def sim_chunks(self) -> np.ndarray:
        return np.asarray(self.sim["chunk_ns"], dtype=np.int64)

    @property
    def sim_late_ns(self) -> np.ndarray:
        return sim_late_ns(self.sim)


def sim_late_ns(entry: dict[str, Any]) -> np.ndarray:
    """How late the simulator wrote each chunk of a logged response after it was due (its timers, on this machine)."""
    last_token = np.cumsum(entry["chunk_tokens"]) - 1
    due = int(entry["start_ns"]) + int(entry["prefill_ns"]) + last_token * int(entry["itl_ns"] or 0)
    return np.asarray(entry["chunk_ns"], dtype=np.int64) - due


def pairs(out: Path, sim: SimServer) -> list[Pair]:
    run = load_json(out / "run.json")
    truth = sim.entries()
    return [
        Pair(client=r, sim=truth[r["response_id"]], offset=run["epoch_offset_ns"])
        for r in records(out)
        if not r["warmup"] and r["status"] == "ok"
    ]


@dataclass(frozen=True)
class Noise:
    """How late this run's messages were picked up on this machine, per request, in ms.

    Measured in the run itself, in the one clock both processes share:

    * `send`: the simulator's arrival stamp minus tokspeed's `sent_ns` (taken just before
      the write): the kernel, plus however long the simulator's event loop, busy with other
      streams or descheduled, took to read the request;
    * `delivery`: the mean lag of the chunks after the first (tokspeed's stamp minus the
      simulator's): how late the client got to a chunk under this run's load;
    * `last`: the lag of the last chunk, which the end of the stream comes with (it runs
      ~0.2-1 ms behind the others: the server writes the usage chunk and [DONE] right after it).

    None of them is tokspeed's error. A client on a busy machine does see its answer that
    late, but the simulator's clock starts and stops inside the server, so the client's TTFT
    and E2E exceed the simulator's truth by `send` plus a chunk's delivery lag. On an idle
    machine each is a fraction of a millisecond; on 2 loaded cores, 64 streams, `send`
    reaches 10-20 ms.
    """

    send: np.ndarray
    delivery: np.ndarray
    last: np.ndarray

    @classmethod
    def of(cls, ps: list[Pair]) -> Noise:
        send, delivery, last = [], [], []
        for p in ps:
            send.append((p.sim["received_ns"] - p.c("sent_ns")) / 1e6)
            lag = p.client_chunks - p.sim_chunks if len(p.client_chunks) == len(p.sim_chunks) > 1 else None
            delivery.append(np.nan if lag is None else float(np.mean(lag[1:])) / 1e6)
            last.append(np.nan if lag is None else float(lag[-1]) / 1e6)
        return cls(*(np.asarray(v, dtype=float) for v in (send, delivery, last)))

    def describe(self) -> str:
        delivery = self.delivery[~np.isnan(self.delivery)]
        back = f"{delivery.mean():.2f} ms" if delivery.size else "none (not streamed)"
        return (f"send lag mean {np.mean(self.send):.2f} ms (max {np.max(self.send):.2f}), "
                f"chunk delivery lag mean {back}, over {len(self.send)} requests")


# the kernel's stamp is on the real-time clock, moved onto the monotonic one by their offset at the read: when the
# real-time clock is adjusted between a packet's arrival and its read, the stamp is off by the adjustment. A floor
# allows CLOCK_SLEW_MS plus what the offset moved in a second (every wait here is shorter), measured over the test: on
# this VM it once moved 5 ms a second for minutes (stamps 1.4-1.9 ms "early" after a 400 ms wait)
CLOCK_SLEW_MS = 1


class ClockDrift:
    """How fast the real-time clock moved against the monotonic one over a test (ns per ns)."""

    def __init__(self) -> None:
        self._start = (time.perf_counter_ns(), time.time_ns() - time.perf_counter_ns())

    def allowance_ms(self) -> float:
        """CLOCK_SLEW_MS plus one second of the drift seen since this was made."""
        now, offset = time.perf_counter_ns(), time.time_ns() - time.perf_counter_ns()
        rate = abs(offset - self._start[1]) / max(now - self._start[0], 1)
        return CLOCK_SLEW_MS + rate * 1000
