"""tokspeed's `--api triton` against a real Triton Inference Server (nvidia-pytriton's bundled binary).

`.ci/run` installs `nvidia-pytriton` into `.venv-triton/` (gitignored; ~40 s), a venv made with Debian's
`/usr/bin/python3`: the Triton Python backend's stub links the system's libpython3.11, so the venv's
standard library must be that Python's (a venv of another 3.11 build, pyenv's 3.11.7 here, fails the model's
load inside multiprocessing with "'_thread.RLock' object has no attribute '_recursion_count'").
TOKSPEED_TRITON_PYTHON names another Python. By hand:

    /usr/bin/python3 -m venv .venv-triton && .venv-triton/bin/pip install nvidia-pytriton==0.7.0
    python -m pytest -q tests/integration/test_triton_server.py -s

The module skips, saying what failed, without such a Python or when the server does not come up
(the server's log tail is in the reason). The server is Triton 2.51 on CPU (it logs that it finds no
CUDA driver and goes on) serving triton_model.py's decoupled model `tiny` through the generate
extension: `POST /v2/models/tiny/generate_stream` (SSE, one `text_output` per token, no end marker)
and `/generate` (one response). Its ports: HTTP, gRPC = HTTP + 1, metrics = HTTP + 2.

What the tests hold tokspeed to, against the server's own account:

* The model logs, on the same monotonic clock as tokspeed's records, when each request reached it and
  when each token left it. Every request reached the model after tokspeed sent it; every token tokspeed
  recorded arrived after the model emitted it and before the model emitted the next one (tokens are
  DECODE_S = 20 ms apart; the hop back through Triton took 1-6 ms here), so a client that stamped
  tokens late or in a batch fails; the number of tokens is the model's.
* Triton's Prometheus counters (`nv_inference_request_success`, ...) rose by exactly the requests the
  model logged, and tokspeed, scraping the metrics port it was given, recognised the engine and
  reports rises no larger than the test's own scrapes around the run.
* A model Triton does not serve is refused before the load starts (exit 1, a start-up error), naming the model.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import load_json, run_cli
from real_servers import Server, free_port

pytestmark = [pytest.mark.integration, pytest.mark.alone]  # token gaps judged against the model's own clock

ROOT = Path(__file__).resolve().parents[2]
TRITON_PYTHON = os.environ.get("TOKSPEED_TRITON_PYTHON", str(ROOT / ".venv-triton" / "bin" / "python"))
READY_S = 180.0  # measured ~15 s on 2 cores (the Python backend's stub and pytriton's proxy start)
MODEL = "tiny"
REQUESTS = 6
MAX_TOKENS = 8
DECODE_MS = 20.0  # the model's gap between tokens (triton_model.py's third argument)
HOP_MS = 50.0  # the most a token may take from the model to tokspeed here (1-6 ms measured) before it is called late

if not Path(TRITON_PYTHON).exists():
    pytest.skip(f"no Python with nvidia-pytriton at {TRITON_PYTHON}: .ci/run builds .venv-triton (see this file's "
                "docstring), or set TOKSPEED_TRITON_PYTHON", allow_module_level=True)
_probe = subprocess.run([TRITON_PYTHON, "-c", "import pytriton.triton, numpy"], capture_output=True, text=True,
                        timeout=120, check=False)
if _probe.returncode != 0:
    pytest.skip(f"{TRITON_PYTHON} cannot import pytriton ({_probe.stderr.strip().splitlines()[-1:]}): "
                "pip install nvidia-pytriton==0.7.0 there", allow_module_level=True)


@dataclass
class Triton:
    server: Server
    emit_log: Path

    @property
    def target(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.server.port + 2}/metrics"

    def emitted(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.emit_log.read_text().splitlines()] if self.emit_log.exists() else []

    def counters(self) -> dict[str, float]:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
        return {name: float(value) for name, value in re.findall(r"^(nv_inference_\w+)\{[^}]*\} (\S+)$", text, re.M)}


def three_free_ports() -> int:
    """A port P with P + 1 and P + 2 free too (HTTP, gRPC, metrics): bound together, then released."""
    for _ in range(50):
        port = free_port()
        sockets = []
        try:
            for p in (port + 1, port + 2):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no three consecutive free ports on 127.0.0.1")


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Triton]:
    where = tmp_path_factory.mktemp("triton")
    port = three_free_ports()
    emit_log = where / "emitted.jsonl"
    script = Path(__file__).with_name("triton_model.py")
    argv = [TRITON_PYTHON, str(script), str(port), str(emit_log), str(DECODE_MS / 1000)]
    server = Server("Triton", argv, {"PYTHONUNBUFFERED": "1"}, where / "server.log", port)
    try:
        try:
            server.wait_ready(f"/v2/models/{MODEL}/ready", READY_S)
        except RuntimeError as exc:
            pytest.skip(f"Triton (nvidia-pytriton) did not serve the model on this machine: {exc}")
        yield Triton(server, emit_log)
    finally:
        server.stop()


@dataclass
class Run:
    run: dict[str, Any]
    rows: list[dict[str, Any]]  # every record, in send order, times on the monotonic clock
    emitted: list[dict[str, Any]]  # the model's log of this run's requests, the probe's included
    before: dict[str, float]
    after: dict[str, float]


def bench(t: Triton, out: Path, *args: str) -> Run:
    logged, before = len(t.emitted()), t.counters()
    p = run_cli("run", "--target", t.target, "--api", "triton", "--model", MODEL, "--requests", str(REQUESTS),
                "--max-tokens", str(MAX_TOKENS), "--server-metrics", t.metrics_url, "--plain", "--out", str(out),
                *args, timeout=300)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- server log ---\n{t.server.tail()}"
    print(p.stdout)
    after = t.counters()
    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    offset = run["epoch_offset_ns"]  # the file's times are Unix-epoch ns: back on the monotonic clock
    rows = []
    for line in (out / "requests.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in ("sent_ns", "end_ns", "first_token_ns"):
            if row.get(key) is not None:
                row[key] -= offset
        rows.append(row)
    rows.sort(key=lambda r: r["sent_ns"])
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
    return Run(run, rows, t.emitted()[logged:], before, after)


def check_counters(r: Run) -> None:
    """Triton's own counters rose by the requests its model logged; tokspeed's window saw no more than that."""
    rise = r.after["nv_inference_request_success"] - r.before["nv_inference_request_success"]
    assert rise == len(r.emitted) == len(r.rows) + 1, (rise, len(r.emitted), len(r.rows))  # and tokspeed's probe
    assert r.after["nv_inference_request_failure"] == r.before["nv_inference_request_failure"]
    server = r.run["telemetry"]["server"]
    assert server is not None, r.run["telemetry"]["notes"]
    assert server["engine"] == "triton" and server["scrapes"] >= 1 and server["errors"] == 0, server
    metrics = server["metrics"]
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_queue_duration_us",
                 "nv_inference_compute_infer_duration_us"):
        assert 0 <= metrics[f"{name}_total"] <= r.after[name] - r.before[name], (name, metrics, r.before, r.after)
    print({k.removeprefix("nv_inference_"): v for k, v in metrics.items()})


def test_streamed_tokens_arrive_after_the_model_emits_them_and_before_the_next(triton: Triton, tmp_path: Path) -> None:
    r = bench(triton, tmp_path / "r")
    assert (r.run["target"]["model"], r.run["target"]["api"], r.run["target"]["stream"]) == (MODEL, "triton", True)
    requests = r.emitted[len(r.emitted) - len(r.rows):]  # one at a time: the model's order is the send order
    lags: list[float] = []
    for row, model in zip(r.rows, requests, strict=True):
        emitted = model["emitted_ns"]
        arrived = [row["sent_ns"] + o for o in row["chunk_offsets_ns"]]
        assert row["output_tokens"] == len(arrived) == len(emitted) == MAX_TOKENS, (row, model)
        assert row["finish_reason"] is None or row["finish_reason"] in ("stop", "length"), row
        assert model["received_ns"] > row["sent_ns"], (row, model)  # the model saw it after tokspeed sent it
        for i, (arrival, emission) in enumerate(zip(arrived, emitted, strict=True)):
            assert emission < arrival < emission + HOP_MS * 1e6, (i, row, model)
            if i + 1 < len(emitted):  # read as it came, not held back for the next token
                assert arrival < emitted[i + 1], (i, row, model)
            lags.append((arrival - emission) / 1e6)
        assert row["first_token_ns"] == arrived[0] and row["end_ns"] >= arrived[-1], row
    lags.sort()
    print(f"model emission -> tokspeed's arrival: median {lags[len(lags) // 2]:.2f} ms, max {lags[-1]:.2f} ms "
          f"over {len(lags)} tokens")
    summary = r.run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == REQUESTS
    assert summary["tokens"]["output_total"] == REQUESTS * MAX_TOKENS
    check_counters(r)


def test_a_whole_response_ends_after_the_model_answered(triton: Triton, tmp_path: Path) -> None:
    r = bench(triton, tmp_path / "r", "--no-stream")
    assert r.run["target"]["stream"] is False
    requests = r.emitted[len(r.emitted) - len(r.rows):]
    for row, model in zip(r.rows, requests, strict=True):
        assert model["stream"] is False and len(model["emitted_ns"]) == 1, model  # one response, the whole text
        assert model["received_ns"] > row["sent_ns"] and row["end_ns"] > model["emitted_ns"][0], (row, model)
        assert row["end_ns"] < model["emitted_ns"][0] + HOP_MS * 1e6, (row, model)
        assert row["chunk_offsets_ns"] == [] and row["first_token_ns"] is None, row
    check_counters(r)


def test_a_model_triton_does_not_serve_is_refused_naming_it(triton: Triton, tmp_path: Path) -> None:
    logged = len(triton.emitted())
    p = run_cli("run", "--target", triton.target, "--api", "triton", "--model", "no-such-model", "--requests", "2",
                "--plain", "--out", str(tmp_path / "r"), timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr  # a start-up error (docs/reliability.md's exit codes)
    assert "Error:" in p.stderr and "no-such-model" in p.stderr and "--model" in p.stderr, p.stderr
    assert not (tmp_path / "r" / "requests.jsonl").exists() or not (tmp_path / "r" / "requests.jsonl").read_text()
    assert len(triton.emitted()) == logged  # nothing reached the model
