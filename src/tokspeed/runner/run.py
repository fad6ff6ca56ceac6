"""Orchestrate a whole run: start the backend, warm up, run each iteration, save everything.

Order of events, each visible on disk: run.json (status "running") is written
before the first request; every request is appended to requests.jsonl as it
finishes; run.json is rewritten with the summaries when the run ends, however
it ends (complete, interrupted by Ctrl-C, or failed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tokspeed.backends.base import Backend, TargetInfo
from tokspeed.config import SAMPLE_OUTPUTS, RunConfig
from tokspeed.environment import capture_environment
from tokspeed.errors import TokspeedError
from tokspeed.load.plan import LoadPlan
from tokspeed.records import RequestRecord
from tokspeed.results import ResultsWriter, RunResult, Sample, build_benchmark, now_iso
from tokspeed.runner.checks import measurement_warnings
from tokspeed.runner.executor import Phase, SpecSource, run_phase
from tokspeed.runner.guard import ErrorRateGuard, RunStopped, run_guarded, target_lost

WARMUP_INDEX_BASE = 1_000_000_000  # warm-up requests use spec indices from here on
SAMPLE_CHARS = 2000


class Observer(Protocol):
    """Receives progress; implemented by the live console view (or a no-op)."""

    def target_ready(self, info: TargetInfo) -> None: ...

    def phase_started(self, label: str, phase: Phase) -> None: ...

    def started(self, record: RequestRecord) -> None: ...

    def record(self, record: RequestRecord) -> None: ...

    def phase_finished(self, phase: Phase) -> None: ...


class NullObserver:
    def target_ready(self, info: TargetInfo) -> None:
        pass

    def phase_started(self, label: str, phase: Phase) -> None:
        pass

    def started(self, record: RequestRecord) -> None:
        pass

    def record(self, record: RequestRecord) -> None:
        pass

    def phase_finished(self, phase: Phase) -> None:
        pass


@dataclass
class RunOutcome:
    result: RunResult
    records: list[RequestRecord]
    directory: Path

    @property
    def interrupted(self) -> bool:
        return self.result.status == "interrupted"


class Workload(SpecSource, Protocol):
    def describe(self) -> dict[str, object]: ...


def plan_from_config(cfg: RunConfig) -> LoadPlan:
    if cfg.profile == "synchronous":
        return LoadPlan(kind="synchronous", workers=1)
    if cfg.profile == "concurrency":
        return LoadPlan(kind="concurrency", workers=cfg.concurrency)
    return LoadPlan(
        kind="rate",
        workers=cfg.max_concurrency,
        rate=cfg.rate,
        arrival=cfg.arrival.value,
        burstiness=cfg.burstiness,
    )


def phases_from_config(cfg: RunConfig) -> list[Phase]:
    """The warm-up phase (if any) then one phase per iteration."""
    phases = []
    if cfg.warmup_requests:
        phases.append(
            Phase(iteration=0, warmup=True, n=cfg.warmup_requests, duration_s=None,
                  first_index=WARMUP_INDEX_BASE, seed=cfg.seed + 7919)
        )
    for it in range(1, cfg.iterations + 1):
        phases.append(
            Phase(iteration=it, warmup=False, n=cfg.measured_requests, duration_s=cfg.duration_s,
                  first_index=0, seed=cfg.seed + it - 1)
        )
    return phases


async def execute_run(
    cfg: RunConfig,
    backend: Backend,
    workload: Workload,
    out_dir: Path,
    observer: Observer | None = None,
    overwrite: bool = False,
) -> RunOutcome:
    """Run everything the config asks for; returns even when interrupted (status says so).

    A TokspeedError raised by the backend's start (target unreachable, ...) is
    re-raised after run.json records the failure. A run stopped by `--max-error-rate`,
    or whose target stopped answering, ends with status "failed" and the reason in `error`.
    """
    obs = observer or NullObserver()
    writer = ResultsWriter(out_dir, epoch_offset_ns=time.time_ns() - time.perf_counter_ns(), overwrite=overwrite)
    result = RunResult(
        started_at=now_iso(),
        epoch_offset_ns=writer.epoch_offset_ns,
        config=cfg.redacted_dump(),
        environment=capture_environment(),
        workload=workload.describe(),
    )
    writer.write_run(result)
    records: list[RequestRecord] = []
    guard = ErrorRateGuard(cfg.max_error_rate)
    notes: list[str] = []

    def on_record(record: RequestRecord) -> None:
        writer.append(record)
        records.append(record)
        obs.record(record)
        guard.record(record)

    plan = plan_from_config(cfg)
    try:
        info = await backend.start()
        result.target = dataclasses.asdict(info)
        writer.write_run(result)
        obs.target_ready(info)
        for phase in phases_from_config(cfg):
            obs.phase_started(plan.label(), phase)
            await run_guarded(run_phase(plan, phase, backend, workload, on_record, obs.started), guard)
            obs.phase_finished(phase)
        result.status = "complete"
    except RunStopped as exc:
        result.status, result.error = "failed", str(exc)
        notes.append(f"the run {exc}; its summary covers only the requests that finished before")
    except asyncio.CancelledError:
        result.status = "interrupted"
    except TokspeedError as exc:
        result.status, result.error = "failed", str(exc)
        raise
    finally:
        result.samples = collect_samples(records, workload)
        _finish(result, cfg, plan, records, writer, notes)
        await backend.close()
    return RunOutcome(result=result, records=records, directory=out_dir)


def collect_samples(records: list[RequestRecord], workload: SpecSource, limit: int = SAMPLE_OUTPUTS) -> list[Sample]:
    """The first few measured prompts with the responses they got (as the seed's script prints)."""
    kept = sorted((r for r in records if r.ok and not r.warmup and r.output_text is not None),
                  key=lambda r: (r.iteration, r.index))
    return [
        Sample(index=r.index, prompt=workload.request(r.index).prompt_text()[:SAMPLE_CHARS],
               response=(r.output_text or "")[:SAMPLE_CHARS])
        for r in kept[:limit]
    ]


def _finish(
    result: RunResult,
    cfg: RunConfig,
    plan: LoadPlan,
    records: list[RequestRecord],
    writer: ResultsWriter,
    notes: list[str],
) -> None:
    bench = build_benchmark(plan.label(), plan.describe(), records, cfg.slos)
    result.benchmarks = [bench]
    result.warnings = measurement_warnings(bench, cfg, records) + notes
    if result.status == "running":
        result.status = "failed"
    if result.status == "complete" and (lost := target_lost(records)) is not None:
        result.status, result.error = "failed", lost
    result.finished_at = now_iso()
    writer.write_run(result)
    writer.close()
