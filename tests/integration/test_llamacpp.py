"""tokspeed against llama.cpp's OpenAI-compatible server (llama-cpp-python). Opt-in.

Skipped unless TOKSPEED_LLAMACPP=1 is set and both `llama_cpp` (with the server
extra) and `gguf` import. llama-cpp-python has no wheel on PyPI: it builds from
source, 6-10 minutes. To run it:

    pip install 'llama-cpp-python[server]' gguf
    TOKSPEED_LLAMACPP=1 python -m pytest -q tests/integration/test_llamacpp.py

or with llama-cpp-python in a venv of its own (only the server runs there):
TOKSPEED_LLAMACPP_PYTHON=/path/to/venv/bin/python.

The model is a tiny random-weight Llama written as GGUF in under a second
(gguf_model.py), served with `python -m llama_cpp.server ... --interrupt_requests
False` (by default a new request aborts the running one). llama.cpp sends no
usage while streaming, so output tokens are counted from the chunks.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if os.environ.get("TOKSPEED_LLAMACPP") != "1":
    pytest.skip("llama.cpp test is opt-in: set TOKSPEED_LLAMACPP=1 (needs pip install 'llama-cpp-python[server]' gguf)",
                allow_module_level=True)
# the server may run from another venv (llama-cpp-python builds from source): TOKSPEED_LLAMACPP_PYTHON
LLAMACPP_PYTHON = os.environ.get("TOKSPEED_LLAMACPP_PYTHON") or sys.executable
if importlib.util.find_spec("gguf") is None:
    pytest.skip("TOKSPEED_LLAMACPP=1 but gguf is not importable: pip install gguf", allow_module_level=True)
_probe = subprocess.run([LLAMACPP_PYTHON, "-c", "import llama_cpp.server.app"], capture_output=True, text=True, timeout=120, check=False)
if _probe.returncode != 0:
    pytest.skip(f"TOKSPEED_LLAMACPP=1 but {LLAMACPP_PYTHON} cannot import llama_cpp.server: "
                f"pip install 'llama-cpp-python[server]' ({_probe.stderr.strip().splitlines()[-1:]})", allow_module_level=True)

from gguf_model import write_tiny_llama_gguf
from harness import load_json, run_cli
from real_servers import Server, free_port, measured

pytestmark = pytest.mark.integration

READY_S = 120.0
REQUESTS = 6
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    where = tmp_path_factory.mktemp("llamacpp")
    model = write_tiny_llama_gguf(where / "tiny-random.gguf")
    port = free_port()
    argv = [
        LLAMACPP_PYTHON, "-m", "llama_cpp.server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--interrupt_requests", "False",
        "--n_ctx", "2048", "--n_threads", "1",
    ]
    server = Server("llama.cpp server", argv, {"OMP_NUM_THREADS": "1"}, where / "server.log", port)
    try:
        server.wait_ready("/v1/models", READY_S)
        yield server
    finally:
        server.stop()


def test_llamacpp_completions_stream(llamacpp_server: Server, tmp_path: Path) -> None:
    out = tmp_path / "r"
    p = run_cli("run", "--target", llamacpp_server.url, "--api", "completions", "--requests", str(REQUESTS),
                "--max-tokens", str(MAX_TOKENS), "--plain", "--out", str(out), timeout=300)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- server log ---\n{llamacpp_server.tail()}"
    print(p.stdout)

    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    rows = measured(out)
    assert len(rows) == REQUESTS
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
    for r in rows:
        offsets = r["chunk_offsets_ns"]
        assert offsets and offsets[0] > 0 and offsets == sorted(offsets), r
        assert r["first_token_ns"] > r["sent_ns"], r  # TTFT > 0
        if len(offsets) >= 2:
            assert offsets[-1] > offsets[0], r  # ITL > 0 (gaps may be 0 when two chunks arrive in one read)
        # no usage while streaming: counted from chunks (or a tokenizer, if one was given)
        assert r["output_tokens_source"] in ("chunks", "tokenizer"), r
        assert 1 <= r["output_tokens"] <= MAX_TOKENS, r
        assert r["output_tokens"] >= len(offsets) or r["output_tokens_source"] == "tokenizer", r

    summary = run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == REQUESTS
    assert summary["ttft_ms"]["min"] > 0
    if any(len(r["chunk_offsets_ns"]) >= 2 for r in rows):
        assert summary["itl_ms"]["mean"] > 0
    assert summary["tokens"]["output_total"] == sum(r["output_tokens"] for r in rows) > 0
