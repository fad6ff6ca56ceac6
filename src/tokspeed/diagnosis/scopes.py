"""Where telemetry lives in a result: per load point when sampled per point, else for the whole run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tokspeed.results import RunResult
from tokspeed.telemetry.schema import TelemetrySummary

_LOOPBACK = {"127.0.0.1", "::1", "localhost", "0.0.0.0"}


@dataclass(frozen=True, slots=True)
class Scope:
    """Telemetry over one window: a load point (`benchmark` = its index) or the run (None)."""

    benchmark: int | None
    telemetry: TelemetrySummary
    profile: dict[str, Any]
    target: dict[str, Any]


def telemetry_scopes(result: RunResult) -> list[Scope]:
    """Each point's telemetry; the run's only when no point has its own (so nothing is said twice)."""
    points = [
        Scope(i, b.telemetry, b.profile, b.target or result.target)
        for i, b in enumerate(result.benchmarks)
        if b.telemetry is not None
    ]
    if points or result.telemetry is None:
        return points
    profile = result.benchmarks[0].profile if len(result.benchmarks) == 1 else {}
    return [Scope(None, result.telemetry, profile, result.target)]


def in_flight_cap(profile: dict[str, Any]) -> int | None:
    """How many requests the client keeps in flight: the concurrency, or the open-loop cap."""
    value = profile.get("concurrency") or profile.get("max_concurrency")
    return int(value) if value else None


def target_is_local(target: dict[str, Any]) -> bool:
    """The target runs on this machine (in-process, or a loopback URL): its GPUs are the ones sampled."""
    url = target.get("url")
    if not url:
        return True
    try:
        host = urlsplit(str(url)).hostname or ""
    except ValueError:
        return False
    return host in _LOOPBACK or host.startswith("127.")
