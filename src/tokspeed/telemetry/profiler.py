"""The HTTP side of `--profile`: a server's `/start_profile` and `/stop_profile` (vLLM, SGLang).

vLLM serves both (POST, at the server's root, not under /v1) only when started with a profiler:
`--profiler-config '{"profiler": "torch", "torch_profiler_dir": "DIR"}'` from v0.13, the
`VLLM_TORCH_PROFILER_DIR=DIR` environment variable before; without one the routes do not exist
(404). SGLang always serves them and writes under `SGLANG_TORCH_PROFILER_DIR` (default /tmp).
Neither says in its answer where the trace went: vLLM answers an empty 200, SGLang a line of text.
So the directory is looked for in the answers' bodies, in vLLM's `/server_info` (served in its
development mode) and, failing those, in this machine's environment (right when the server runs
here with the same environment).

`probe` asks without starting anything: an OPTIONS request, which a route that exists answers
405 (or 200/204) and a path that does not exist answers 404 — the handler never runs.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from typing import Any

import aiohttp

PROBE_TIMEOUT_S = 10.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 1800.0  # vLLM flushes the trace on stop: minutes for a large model (its docs: ~10 min on an H100)
ABSENT = (404, 405)  # what a server without the endpoints answers a POST
TRACE_ENV = ("VLLM_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR")
_DIR_KEYS = ("trace_dir", "output_dir", "torch_profiler_dir", "profiler_dir", "path")
_DIR_IN_TEXT = re.compile(r"""torch_profiler_dir['"]?\\?['"]?\s*[:=]\s*\\?['"]([^'"\\]+)""")
NO_ENDPOINTS_HINT = (
    "start vLLM with a profiler: --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"DIR\"}' "
    "(v0.13+) or VLLM_TORCH_PROFILER_DIR=DIR (older); SGLang serves them always"
)


def server_root(target: str) -> str:
    """http://h:8000/v1 -> http://h:8000 (where the profiler endpoints are)."""
    return target.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class ProfilerAnswer:
    """One call's outcome: the HTTP status (None when no answer came), the body's text or why it failed."""

    status: int | None
    text: str
    trace_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def absent(self) -> bool:
        return self.status in ABSENT


async def probe(session: aiohttp.ClientSession, root: str, headers: dict[str, str]) -> int | None:
    """The status of OPTIONS {root}/start_profile (404: no such endpoint); None when the server did not answer."""
    try:
        async with session.options(f"{root}/start_profile", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as resp:
            return resp.status
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


async def call(session: aiohttp.ClientSession, root: str, which: str, headers: dict[str, str],
               timeout_s: float) -> ProfilerAnswer:
    """POST {root}/{which}_profile; never raises for what the network or the server does."""
    try:
        async with session.post(f"{root}/{which}_profile", headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = (await resp.text(errors="replace")).strip()
            return ProfilerAnswer(resp.status, text[:500], trace_dir_in(text))
    except asyncio.TimeoutError:
        return ProfilerAnswer(None, f"no answer within {timeout_s:g} s")
    except aiohttp.ClientError as exc:
        return ProfilerAnswer(None, f"{type(exc).__name__}: {exc}"[:300])


async def server_info_dir(session: aiohttp.ClientSession, root: str, headers: dict[str, str]) -> str | None:
    """The trace directory in vLLM's GET /server_info (its config, as text or JSON), if it serves one."""
    try:
        async with session.get(f"{root}/server_info", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as resp:
            if resp.status != 200:
                return None
            return trace_dir_in(await resp.text(errors="replace"))
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


def trace_dir_in(text: str) -> str | None:
    """A trace directory named in a server's answer: a JSON key (trace_dir, output_dir, torch_profiler_dir, ...)
    at any depth, or `torch_profiler_dir='...'` in a config printed as text."""
    if not text:
        return None
    try:
        import orjson

        found = _dir_in_json(orjson.loads(text))
    except ValueError:
        found = None
    if found:
        return found
    m = _DIR_IN_TEXT.search(text)
    return m.group(1) if m else None


def _dir_in_json(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in _DIR_KEYS:
            if isinstance(value.get(key), str) and value[key]:
                return str(value[key])
        for inner in value.values():
            if (found := _dir_in_json(inner)) is not None:
                return found
    elif isinstance(value, list):
        for inner in value:
            if (found := _dir_in_json(inner)) is not None:
                return found
    elif isinstance(value, str) and "torch_profiler_dir" in value:
        m = _DIR_IN_TEXT.search(value)
        return m.group(1) if m else None
    return None


def trace_dir_from_env(environ: dict[str, str] | None = None) -> str | None:
    """VLLM_TORCH_PROFILER_DIR or SGLANG_TORCH_PROFILER_DIR as this process sees them."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in TRACE_ENV if env.get(name)), None)
