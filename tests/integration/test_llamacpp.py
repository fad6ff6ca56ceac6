"""tokspeed against llama.cpp's OpenAI-compatible server (llama-cpp-python).

`.ci/run` installs llama-cpp-python's server into `.venv-llama/` (gitignored) from the sdist that
`.ci/build-llama-server` keeps in its cache, without compiling llama.cpp a second time: the package is
built with `CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"` (its Python code only, ~25 s) and loads the
libllama.so that build made for `llama-server` (same sdist, same llama.cpp) through `LLAMA_CPP_LIB_PATH`,
which this module sets to the cache's `bin/` when the variable is unset. By hand:

    .ci/build-llama-server
    python -m venv .venv-llama
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" .venv-llama/bin/pip install \
        "$HOME/.cache/tokspeed/llama-server-0.3.36/llama_cpp_python-0.3.36.tar.gz[server]" gguf
    python -m pytest -q tests/integration/test_llamacpp.py

(or a llama-cpp-python that compiled its own library: `pip install 'llama-cpp-python[server]' gguf`).
The module skips, saying what failed, when no such Python imports `llama_cpp.server` and `gguf`.

The server runs with the Python named by TOKSPEED_LLAMACPP_PYTHON, else with
`.venv-llama/bin/python` when it exists, else with this one; tokspeed runs from
the test's venv and need not be installed there. Measured with
llama-cpp-python 0.3.36: 5-15 s for the module's four tests on 2 cores.

The model is a tiny random-weight Llama written as GGUF in under a second by
that Python (gguf_model.py: its logit bias keeps generation on printable
tokens to `max_tokens`), served with `python -m llama_cpp.server ...
--interrupt_requests False` (by default a new request aborts the running one).

What llama-cpp-python's server does, as seen on the wire (0.3.36), and what the
tests hold tokspeed to:

* `/v1/models` lists one model, its `--model_alias`: tokspeed discovers it.
* Streams are plain SSE (`data: {...}\\n\\n`, then `data: [DONE]`), one event
  per token; chat streams open with a role-only delta and close with an empty
  delta carrying finish_reason. `stream_options` is accepted and ignored: no
  usage while streaming, so tokspeed counts one token per chunk; without
  streaming the body has usage.
* No timings in responses, no `/metrics` and no `/version` (all 404): tokspeed
  notes the missing metrics and goes on. The server's log (verbose, the
  default) prints llama.cpp's per-request timings; the tests parse them and
  check tokspeed against them: the server's generated-token count (1 + decode
  runs) equals tokspeed's, the server's prompt count equals tokspeed's usage,
  TTFT ≥ the server's prompt-eval time and E2E ≥ prompt eval + decode time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from real_servers import LLAMA_CPP_BUILD, Server, free_port, measured

ROOT = Path(__file__).resolve().parents[2]
_VENV_PYTHON = ROOT / ".venv-llama" / "bin" / "python"


def _server_python() -> str:
    if os.environ.get("TOKSPEED_LLAMACPP_PYTHON"):
        return os.environ["TOKSPEED_LLAMACPP_PYTHON"]
    return str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable


def _library_env() -> dict[str, str]:
    """LLAMA_CPP_LIB_PATH for a llama-cpp-python installed without its own library (LLAMA_BUILD=OFF)."""
    if os.environ.get("LLAMA_CPP_LIB_PATH") or not (LLAMA_CPP_BUILD / "libllama.so").exists():
        return {}
    return {"LLAMA_CPP_LIB_PATH": str(LLAMA_CPP_BUILD)}


LLAMACPP_PYTHON = _server_python()
LIBRARY_ENV = _library_env()
_probe = subprocess.run([LLAMACPP_PYTHON, "-c", "import llama_cpp.server.app, gguf, numpy"],
                        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **LIBRARY_ENV})
if _probe.returncode != 0:
    pytest.skip(f"{LLAMACPP_PYTHON} cannot import llama_cpp.server and gguf ({_probe.stderr.strip().splitlines()[-1:]}): "
                f".ci/run installs them into .venv-llama (see this file's docstring)",
                allow_module_level=True)

from gguf_model import N_CTX  # noqa: E402  (after the module-level skip: they import llama.cpp helpers)
from harness import load_json, run_cli  # noqa: E402

pytestmark = pytest.mark.integration

READY_S = 120.0
REQUESTS = 6
MAX_TOKENS = 16
ALIAS = "tokspeed-tiny-random"


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    where = tmp_path_factory.mktemp("llamacpp")
    model = where / "tiny-random.gguf"
    subprocess.run([LLAMACPP_PYTHON, str(Path(__file__).with_name("gguf_model.py")), str(model)],
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    argv = [
        LLAMACPP_PYTHON, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--interrupt_requests", "False",
        "--n_ctx", str(N_CTX), "--n_threads", "1", "--verbose", "True",
    ]
    server = Server("llama.cpp server", argv, {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **LIBRARY_ENV},
                    where / "server.log", port)
    try:
        server.wait_ready("/v1/models", READY_S)
        yield server
    finally:
        server.stop()


# --- the server's own account: llama.cpp's per-request timings in its log ---------------------------------

_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_PROMPT = re.compile(r"llama_perf_context_print:\s+prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"llama_perf_context_print:\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs")


@dataclass
class ServerTiming:
    prompt_tokens: int  # the whole prompt: tokens reused from the previous request's cache + those evaluated
    prompt_eval_ms: float
    eval_ms: float
    eval_runs: int  # decode calls after the prompt: generated tokens - 1 (llama.cpp reports at least 1)


def server_timings(log_text: str) -> list[ServerTiming]:
    """One entry per completion the server ran, in order (it runs one at a time)."""
    out: list[ServerTiming] = []
    reused = 0
    for line in log_text.splitlines():
        if m := _PREFIX.search(line):
            reused = int(m.group(1))
        elif m := _PROMPT.search(line):
            out.append(ServerTiming(reused + int(m.group(2)), float(m.group(1)), 0.0, 0))
            reused = 0
        elif (m := _EVAL.search(line)) and out:
            out[-1].eval_ms, out[-1].eval_runs = float(m.group(1)), int(m.group(2))
    return out


def run_against(server: Server, out: Path, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[ServerTiming]]:
    """`tokspeed run` against the server; (run.json, all records in send order, the server's timings of this run)."""
    log_start = server.log.stat().st_size
    p = run_cli("run", "--target", server.url, "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS),
                "--plain", "--out", str(out), *args, timeout=300)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- server log ---\n{server.tail()}"
    print(p.stdout)
    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    rows = sorted((json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()), key=lambda r: r["sent_ns"])
    timings = server_timings(server.log.read_bytes()[log_start:].decode("utf-8", "replace"))
    # the server ran tokspeed's 1-token probe, then every request tokspeed recorded (warm-up included), nothing else
    assert len(timings) == 1 + len(rows), (len(timings), len(rows), server.tail())
    assert timings[0].eval_runs == 1, timings[0]  # the probe: max_tokens 1
    return run, rows, timings[1:]


def check_against_server(rows: list[dict[str, Any]], timings: list[ServerTiming], *, streamed: bool) -> None:
    """tokspeed's records against the server's own timings, request by request (synchronous: same order)."""
    print(f"{'TTFT ms':>9} {'E2E ms':>8} {'ITL ms':>7} | server: {'prompt tok':>10} {'prefill ms':>10} {'decode ms':>9} {'ms/tok':>7}")
    for r, t in zip(rows, timings, strict=True):
        e2e_ms = (r["end_ns"] - r["sent_ns"]) / 1e6
        assert 1 + t.eval_runs == MAX_TOKENS == r["output_tokens"], (r, t)  # the server generated what tokspeed counted
        assert e2e_ms >= t.prompt_eval_ms + t.eval_ms, (r, t)  # the response cannot end before the server's compute
        if streamed:
            ttft_ms = (r["first_token_ns"] - r["sent_ns"]) / 1e6
            offsets = r["chunk_offsets_ns"]
            itl_ms = (offsets[-1] - offsets[0]) / (len(offsets) - 1) / 1e6  # 0 when all came in one read
            assert ttft_ms >= t.prompt_eval_ms, (r, t)  # the first token needs the whole prompt evaluated
            print(f"{ttft_ms:>9.2f} {e2e_ms:>8.2f} {itl_ms:>7.3f} | server: {t.prompt_tokens:>10} {t.prompt_eval_ms:>10.2f} "
                  f"{t.eval_ms:>9.2f} {t.eval_ms / t.eval_runs:>7.3f}")
        else:
            assert r["input_tokens_source"] == "usage" and r["input_tokens"] == t.prompt_tokens, (r, t)
            print(f"{'-':>9} {e2e_ms:>8.2f} {'-':>7} | server: {t.prompt_tokens:>10} {t.prompt_eval_ms:>10.2f} "
                  f"{t.eval_ms:>9.2f} {t.eval_ms / t.eval_runs:>7.3f}")


def check_target(run: dict[str, Any], server: Server, api: str, stream: bool) -> None:
    """Model discovery from /v1/models; stream_options accepted (and ignored); no /metrics, no /version."""
    with urllib.request.urlopen(f"{server.url}/models", timeout=10) as resp:
        listed = [m["id"] for m in json.load(resp)["data"]]
    assert listed == [ALIAS]
    target = run["target"]
    assert (target["model"], target["api"], target["stream"], target["include_usage"]) == (ALIAS, api, stream, stream)
    assert target["server_version"] is None
    telemetry = run["telemetry"]
    assert telemetry["server"] is None
    assert any("no server metrics" in n and "HTTP 404" in n for n in telemetry["notes"]), telemetry["notes"]


def check_streamed(run: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    for r in rows:
        assert r["status"] == "ok" and r["finish_reason"] == "length", r
        offsets = r["chunk_offsets_ns"]
        assert len(offsets) == MAX_TOKENS, r  # one event per token; a chat stream's role-only delta is no token
        assert offsets[0] > 0 and offsets == sorted(offsets), r  # equal when two events came in one read
        assert r["first_token_ns"] == r["first_content_ns"] == r["sent_ns"] + offsets[0], r
        assert r["end_ns"] >= r["sent_ns"] + offsets[-1], r
        # no usage while streaming: one token per chunk, prompt length estimated
        assert (r["output_tokens"], r["output_tokens_source"]) == (MAX_TOKENS, "chunks"), r
        assert r["input_tokens_source"] == "approx", r
        assert r["chunk_tokens"] is None and not r["anomalies"], r
    summary = run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == REQUESTS
    assert summary["tokens"]["output_total"] == REQUESTS * MAX_TOKENS
    assert summary["ttft_ms"]["min"] > 0 and summary["itl_ms"]["mean"] >= 0
    # a whole response takes the server ~1-5 ms: on a loaded 2-core machine the client may sleep through it
    # and read every event at once (measured: all 6 responses of a run, with two busy loops beside it)
    if any(r["chunk_offsets_ns"][-1] > r["chunk_offsets_ns"][0] for r in rows):
        assert summary["itl_ms"]["mean"] > 0 and summary["tpot_ms"]["mean"] > 0
    assert summary["itl_ms"]["max"] < 1000 and summary["ttft_ms"]["max"] < 10_000  # a tiny model on a CPU


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_llamacpp_stream(llamacpp_server: Server, tmp_path: Path, api: str) -> None:
    run, rows, timings = run_against(llamacpp_server, tmp_path / "r", "--api", api)
    check_target(run, llamacpp_server, api, stream=True)
    assert len(measured(tmp_path / "r")) == REQUESTS
    check_streamed(run, [r for r in rows if not r["warmup"]])
    check_against_server(rows, timings, streamed=True)


def test_llamacpp_no_stream(llamacpp_server: Server, tmp_path: Path) -> None:
    """Whole responses carry usage: tokspeed takes both counts from it; they match the server's log."""
    run, rows, timings = run_against(llamacpp_server, tmp_path / "r", "--api", "completions", "--no-stream")
    check_target(run, llamacpp_server, "completions", stream=False)
    for r in rows:
        assert r["status"] == "ok" and r["finish_reason"] == "length", r
        assert (r["output_tokens"], r["output_tokens_source"]) == (MAX_TOKENS, "usage"), r
        assert r["chunk_offsets_ns"] == [] and r["first_token_ns"] is None, r
    summary = run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == REQUESTS
    assert summary["tokens"]["output_total"] == REQUESTS * MAX_TOKENS
    check_against_server(rows, timings, streamed=False)


def test_llamacpp_concurrent(llamacpp_server: Server, tmp_path: Path) -> None:
    """Two streams at once: the server runs one completion at a time (the other waits, whole, in its TTFT).

    With `--interrupt_requests False` none is cut short. The server's log cannot be
    matched request by request any more, but it still accounts for every request,
    and since it computes one at a time the run lasts at least its total compute.
    """
    run, rows, timings = run_against(llamacpp_server, tmp_path / "r", "--api", "completions", "--concurrency", "2")
    check_target(run, llamacpp_server, "completions", stream=True)
    check_streamed(run, [r for r in rows if not r["warmup"]])
    assert all(1 + t.eval_runs == MAX_TOKENS for t in timings), timings
    wall_ms = (max(r["end_ns"] for r in rows) - min(r["sent_ns"] for r in rows)) / 1e6
    compute_ms = sum(t.prompt_eval_ms + t.eval_ms for t in timings)
    print(f"wall {wall_ms:.2f} ms >= server compute {compute_ms:.2f} ms over {len(rows)} requests")
    assert wall_ms >= compute_ms
    # tokspeed really kept two in flight: some request was sent while another was still streaming
    assert any(a is not b and a["sent_ns"] < b["sent_ns"] < a["end_ns"] for a in rows for b in rows)
