"""tokspeed as a library: run a benchmark, read a saved run back, compare runs, estimate a model's limits.

    from tokspeed import api

    cfg = api.config(target="http://127.0.0.1:8000/v1", concurrency=4, requests=50)
    a = api.run(cfg, out="runs/a")            # a Result: run.json's contents and its directory
    print(a.summary.ttft_ms.p99)              # the load point's summary (docs/numbers.md)
    b = api.load_run("runs/b")                # any saved run, however old
    for m in api.compare(a, b).runs[0].benchmarks[0].metrics:
        print(m.sentence)                     # one verdict per metric, as `tokspeed compare` prints them

The CLI is built on the same pieces; unlike it, nothing here prints or exits: failures raise
the typed errors of `tokspeed.errors` (`ConfigError` for bad input, `TargetError` for a server
that cannot be reached, `ResultsError` for a results directory that cannot be read).
In a notebook (a loop already running) await `run_async` instead of calling `run`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tokspeed.backends.base import Backend
from tokspeed.backends.embedded.defaults import is_embedded_target
from tokspeed.backends.local_target import engine_kind
from tokspeed.compare.comparison import CompareSettings, Comparison
from tokspeed.compare.evidence import RunData, compare_runs, run_labels
from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import BackendLost, ConfigError, ResultsError, TargetError, TokspeedError, WorkloadError
from tokspeed.estimate.hardware import load_gpu
from tokspeed.estimate.model import load_model
from tokspeed.estimate.speed_of_light import Estimate, Workload
from tokspeed.estimate.speed_of_light import estimate as _estimate
from tokspeed.metrics.schema import Summary
from tokspeed.records import RequestRecord
from tokspeed.results import Benchmark, RunResult, read_records
from tokspeed.results import load_run as _load_run
from tokspeed.results.run_json import REQUESTS_FILE
from tokspeed.runner.factory import build_backend, build_workload
from tokspeed.runner.fdlimit import ensure_fd_limit
from tokspeed.runner.passes import PROFILE_FIELDS, dataset_passes, embedded_defaults
from tokspeed.runner.run import execute_points, single_point

__all__ = [
    "Backend",
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
    "build_backend",
    "build_workload",
    "compare",
    "config",
    "estimate",
    "load_run",
    "run",
    "run_async",
]


@dataclass(frozen=True)
class Result:
    """A saved run: run.json's contents (`run`) and the directory that holds it; records read on demand."""

    run: RunResult
    directory: Path
    _records: tuple[RequestRecord, ...] | None = None

    @property
    def benchmarks(self) -> list[Benchmark]:
        """One entry per load point (a sweep or a capacity search has several)."""
        return self.run.benchmarks

    @property
    def summary(self) -> Summary:
        """The summary of the run's only (or first) load point; ResultsError when it has none."""
        if not self.run.benchmarks:
            raise ResultsError(f"{self.directory} holds no finished load point (status {self.run.status})",
                               hint=self.run.error or "see run.json's warnings")
        return self.run.benchmarks[0].summary

    def records(self) -> list[RequestRecord]:
        """Every request of the run (warm-up, failed and cancelled included), read from requests.jsonl."""
        if self._records is not None:
            return list(self._records)
        path = self.directory / REQUESTS_FILE
        return read_records(path, compact=True) if path.exists() else []


def config(scenario: str | Path | None = None, **fields: Any) -> RunConfig:
    """A validated RunConfig from a scenario file and/or fields (names as in run.json's `config`).

    `fields` override the scenario's; durations may be strings (`duration_s="30s"`). ConfigError
    says what is wrong and how to fix it."""
    return config_from_sources(Path(scenario) if scenario is not None else None, fields)


def run(cfg: RunConfig | Mapping[str, Any], out: str | Path | None = None, *, overwrite: bool = False) -> Result:
    """Run one benchmark as `tokspeed run` does (no console output) and return its saved result.

    `cfg` is a RunConfig or the fields of one. The results go to `out` (else the config's `out`, else
    runs/<timestamp>), written as the run goes: a failure after the start leaves what was measured
    there. No target means the embedded model on this CPU, with its CPU-sized defaults.
    """
    return asyncio.run(run_async(cfg, out, overwrite=overwrite))


async def run_async(cfg: RunConfig | Mapping[str, Any], out: str | Path | None = None, *,
                    overwrite: bool = False) -> Result:
    """`run` on the running event loop (a notebook's, an application's)."""
    cfg = cfg if isinstance(cfg, RunConfig) else config(**dict(cfg))
    given = cfg.model_fields_set  # what the caller set, before the target's defaults
    if is_embedded_target(cfg.target):
        cfg = embedded_defaults(cfg)
    ensure_fd_limit(cfg.streams)
    directory = Path(out) if out is not None else cfg.out or Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    workload = build_workload(cfg)
    offline = cfg.offline or (engine_kind(cfg.target) == "vllm" and not PROFILE_FIELDS & given)
    cfg = dataset_passes(cfg, workload.describe(), given, offline=offline)
    backend = build_backend(cfg, workload)
    outcome = await execute_points(cfg, single_point(cfg, backend, workload), directory, overwrite=overwrite)
    return Result(outcome.result, outcome.directory)


def load_run(directory: str | Path) -> Result:
    """A saved results directory (any run this tokspeed's schema reads); rebuilt from requests.jsonl
    when run.json is missing or the run was killed. ResultsError when it cannot be read."""
    path = Path(directory)
    result, records = _load_run(path, with_records=False)
    return Result(result, path, tuple(records) if records else None)


def compare(base: Result | str | Path, *others: Result | str | Path,
            settings: CompareSettings | None = None) -> Comparison:
    """Each of `others` against `base`, load point by load point, as `tokspeed compare` does
    (the method: docs/compare.md). Runs are labelled by their directory's name."""
    if not others:
        raise ConfigError("compare needs a baseline and at least one other run")
    runs = [r if isinstance(r, Result) else load_run(r) for r in (base, *others)]
    labels = run_labels([r.directory for r in runs])
    data = [RunData(label, str(r.directory), r.run, r.records()) for label, r in zip(labels, runs)]
    return compare_runs(data[0], data[1:], settings)


def estimate(model: str, gpu: str, *, concurrency: Sequence[int] = (1, 8, 32), gpus: int = 1,
             weights: str = "auto", kv: str = "fp16", input_tokens: int = 512, output_tokens: int = 256,
             max_model_len: int | None = None, gpu_memory_utilization: float = 0.9,
             **hardware: float) -> Estimate:
    """What `model` (a builtin name or a config.json) can do on `gpu`, from first principles, as
    `tokspeed estimate` computes it: memory sizing and a speed-of-light bound per concurrency.

    `hardware` overrides the GPU table: memory_gb, bandwidth_gb_s, tflops, interconnect_gb_s."""
    workload = Workload(weights=weights, kv=kv, gpus=gpus, input_tokens=input_tokens, output_tokens=output_tokens,
                        max_model_len=max_model_len, utilization=gpu_memory_utilization)
    return _estimate(load_model(model), load_gpu(gpu, **hardware), workload, list(concurrency))
