"""Capture the environment a run happened in, for run.json's `environment`.

`capture_environment()`: tokspeed, Python and key package versions (importlib.metadata: never
imports torch or vllm to learn them), OS, CPU model and cores, memory, and the GPUs NVML sees
(model, memory, driver, CUDA version), or `gpu: null` with `gpu_reason`. `server_facts()`: what
an OpenAI-compatible server says about itself (`/version`, `/v1/models`), fetched on its own
connection. Neither ever raises.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokspeed.version import __version__

if TYPE_CHECKING:
    from tokspeed.backends.http_policy import HttpPolicy

PACKAGES = (
    "tokspeed", "aiohttp", "orjson", "uvloop", "numpy", "pydantic", "psutil", "nvidia-ml-py",
    "prometheus-client", "torch", "transformers", "vllm", "llama-cpp-python",
)
MODEL_KEYS = ("id", "owned_by", "root", "parent", "max_model_len", "created")
LOAD = object()  # capture_environment's nvml default: import pynvml if installed
FACTS_TIMEOUT_S = 5.0


def capture_environment(nvml: Any = LOAD) -> dict[str, Any]:
    """A plain dict of facts about this machine; never raises."""
    env: dict[str, Any] = {
        "tokspeed_version": __version__,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_physical_cores": _physical_cores(),
        "memory_gib": _memory_gib(),
        "event_loop": _event_loop_name(),
        "packages": package_versions(),
    }
    gpu, reason = gpu_facts(nvml)
    env["gpu"] = gpu
    if reason:
        env["gpu_reason"] = reason
    return env


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """{distribution: version} of the installed ones, read from their metadata (nothing imported)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def gpu_facts(nvml: Any = LOAD) -> tuple[dict[str, Any] | None, str | None]:
    """({"driver", "cuda", "devices": [{index, name, memory_total_mib}]}, None), or (None, why)."""
    from tokspeed.telemetry.gpu import driver_facts, load_nvml, open_nvml

    module = load_nvml() if nvml is LOAD else nvml
    gpus, note = open_nvml(module)
    if gpus is None:
        return None, (note or "no GPU").removeprefix("no GPU telemetry: ")
    try:
        devices = [{"index": g.index, "name": g.name, "memory_total_mib": g.memory_total_mib} for g in gpus.infos]
        return {**driver_facts(module), "devices": devices}, None
    finally:
        gpus.close()


async def server_facts(target: str, headers: dict[str, str] | None = None, policy: HttpPolicy | None = None) -> dict[str, Any]:
    """What the server at `target` (…/v1) tells about itself: `version` and `models`; `unavailable` if neither.

    `policy`: the TLS of the run's other clients of the target (redirects are not followed: no answer).
    """
    import aiohttp

    from tokspeed.backends.credentials import url_auth_replacing
    from tokspeed.backends.http_policy import HttpPolicy

    target, headers = url_auth_replacing(target, headers or {})  # user:password@ becomes a Basic header
    root = target.rstrip("/")
    root = root.removesuffix("/v1")
    timeout = aiohttp.ClientTimeout(total=FACTS_TIMEOUT_S)
    async with (policy or HttpPolicy()).session(headers=headers or {}, timeout=timeout) as session:
        version, models = await asyncio.gather(_get_json(session, f"{root}/version"), _get_json(session, f"{target.rstrip('/')}/models"))
    facts: dict[str, Any] = {}
    if isinstance(version, dict) and version.get("version") is not None:
        facts["version"] = str(version["version"])
    cards = models.get("data") if isinstance(models, dict) else None
    if isinstance(cards, list):
        facts["models"] = [{k: card[k] for k in MODEL_KEYS if k in card} for card in cards if isinstance(card, dict)]
    if not facts:
        facts["unavailable"] = "neither /version nor /v1/models answered"
    return facts


async def _get_json(session: Any, url: str) -> Any:
    import aiohttp

    try:
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:  # a redirect too: it names another server
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil missing or unsupported platform
        return None


def _memory_gib() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # noqa: BLE001 - psutil missing or unsupported platform
        return None


def _event_loop_name() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"
