"""How many client processes a run uses (`--workers N|auto`), and why.

One process runs every stream by default. `--workers N` spreads the per-token
work (HTTP streaming, SSE parsing) over N worker processes while this process
keeps the schedule, the files and the summaries (see `backends/worker_pool.py`).

`--workers auto` picks:
- 1 for an in-process engine (embedded, `hf:`, `vllm:`): its work is in this process;
- else ceil(streams / STREAMS_PER_WORKER), at most the usable cores minus one (a
  core stays for this process), and never more than the streams; so 1 below
  `STREAMS_PER_WORKER + 1` streams and on a machine with two cores or fewer.

`streams` is the run's in-flight bound: `--concurrency N`, `--max-concurrency`,
or for an uncapped `--rate R` the estimate 10 × R (at most 1024).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError

STREAMS_PER_WORKER = 256  # --workers auto: one client process per this many streams (docs/scaling.md says why)
WORKER_COMMAND = (sys.executable, "-m", "tokspeed.cli.client_worker")


@dataclass(frozen=True)
class WorkerChoice:
    """The client process count for one load point and the reason, as printed."""

    count: int
    reason: str

    @property
    def pooled(self) -> bool:
        return self.count > 1


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, which containers narrow), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def is_in_process(target: str | None) -> bool:
    """True for the embedded model, `hf:` and `vllm:` targets (they run in tokspeed's process)."""
    from tokspeed.backends.embedded.defaults import is_embedded_target
    from tokspeed.backends.local_target import engine_kind

    return is_embedded_target(target) or engine_kind(target) is not None


def choose_workers(cfg: RunConfig, cpus: int | None = None) -> WorkerChoice:
    """The count for `cfg`; ConfigError for `--workers N` (N > 1) with an in-process engine."""
    asked = cfg.client_workers
    if is_in_process(cfg.target):
        if asked != "auto" and asked > 1:
            raise ConfigError(
                f"--workers {asked} needs an HTTP target: {cfg.target or 'the embedded model'} runs in tokspeed's "
                "own process",
                hint="drop --workers (an in-process engine's work cannot be split across client processes)",
            )
        return WorkerChoice(1, "in-process engine" if asked == "auto" else "--workers 1")
    streams = cfg.streams
    if asked != "auto":
        if asked > streams:
            return WorkerChoice(streams, f"--workers {asked}, but only {streams} stream{'s' if streams > 1 else ''}")
        return WorkerChoice(asked, f"--workers {asked}")
    return _auto(streams, usable_cpus() if cpus is None else cpus)


def _auto(streams: int, cpus: int) -> WorkerChoice:
    wanted = math.ceil(streams / STREAMS_PER_WORKER)
    count = max(1, min(wanted, cpus - 1, streams))
    rule = f"--workers auto: {streams} streams, {cpus} cores; one process per {STREAMS_PER_WORKER} streams"
    if count < wanted:
        rule += f", at most cores − 1 = {max(1, cpus - 1)}"
    return WorkerChoice(count, rule)


def check_workers(cfg: RunConfig, targets: Sequence[str | None]) -> None:
    """Refuse `--workers N` for any in-process target before anything is written (ConfigError)."""
    for target in targets:
        choose_workers(cfg.model_copy(update={"target": target}))


def worker_settings(cfg: RunConfig) -> dict[str, Any]:
    """The config a worker rebuilds its backend from, API key included: it goes over a pipe, never argv."""
    settings = cfg.model_dump(mode="json")
    settings["api_key"] = cfg.api_key.get_secret_value() if cfg.api_key is not None else None
    return settings
