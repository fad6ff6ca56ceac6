"""tokspeed: measure how fast an LLM deployment really is.

The library's calls (`run`, `load_run`, `compare`, `estimate`, `config`, the result and error
types) live in `tokspeed.api` and are reachable from here too (`tokspeed.run(...)`); they are
imported on first use, so `import tokspeed` and `tokspeed --help` stay instant.
"""

from __future__ import annotations

from typing import Any

from tokspeed.version import __version__

__all__ = [
    "BackendLost",
    "Benchmark",
    "CompareSettings",
    "Comparison",
    "ConfigError",
    "Estimate",
    "RequestRecord",
    "Result",
    "ResultsError",
    "RunConfig",
    "RunResult",
    "Summary",
    "TargetError",
    "TokspeedError",
    "WorkloadError",
    "__version__",
    "compare",
    "config",
    "estimate",
    "load_run",
    "run",
    "run_async",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tokspeed import api

        return getattr(api, name)
    raise AttributeError(f"module 'tokspeed' has no attribute {name!r}")
