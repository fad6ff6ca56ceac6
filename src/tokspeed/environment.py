"""Capture the environment a run happened in (tool, Python, OS, CPU, memory), for run.json."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from tokspeed import __version__


def capture_environment() -> dict[str, Any]:
    """A plain dict of facts about this machine; never raises."""
    return {
        "tokspeed_version": __version__,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "event_loop": _event_loop_name(),
        "gpu": None,
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # psutil missing or unsupported platform
        return None


def _event_loop_name() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"
