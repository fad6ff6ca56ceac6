"""What the local CPU offers: native bf16 or not, and how many cores torch may use.

Pure functions of /proc/cpuinfo text and a core count, so tests can feed fakes.
"""

from __future__ import annotations

import os
from pathlib import Path

_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # x86 instructions that make bf16 matmuls fast


def read_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> str:
    """The text of /proc/cpuinfo, or "" where there is none (macOS, Windows)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """Every flag listed on a `flags` line of cpuinfo text."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            flags.update(value.split())
    return frozenset(flags)


def choose_dtype(cpuinfo: str | None = None) -> str:
    """`bfloat16` where the CPU has native bf16 (avx512_bf16 or AMX), else `float32`.

    Without native support bf16 is emulated and often slower than fp32.
    """
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    return "bfloat16" if cpu_flags(text) & _BF16_FLAGS else "float32"


def available_cpus() -> int:
    """Cores this process may run on (affinity and cgroup cpusets respected where visible)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def choose_threads(cpus: int | None = None) -> int:
    """Torch threads: every core but one, which is left to the client (the event loop).

    Measured on 2 cores: 2 torch threads plus the streaming client ran 2-3x
    slower than 1 torch thread, because the threads fight over the cores.
    """
    n = available_cpus() if cpus is None else cpus
    return max(1, n - 1)


def dtype_label(dtype: str) -> str:
    """Short name for the console: bf16, fp32, fp16."""
    return {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(dtype, dtype)
