"""The master's side: merge the workers' record batches into one normal tokspeed results directory.

Each batch's records are appended to `requests.jsonl` (flushed) the moment the batch arrives,
so a worker killed mid-run loses only what it had not sent yet, and a master killed mid-run
leaves a directory `tokspeed report` rebuilds (run.json says "running" until the end). At the
end, run.json is written by the same code as a single-process run (`results.build_benchmark`),
with the per-worker facts a reader needs to trust a distributed run: how many records each
worker sent, whether it said goodbye, its CPU, its lateness and its clock anchor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tokspeed.metrics.request import lateness_ns
from tokspeed.records import RequestRecord, Status
from tokspeed.results import (
    ResultsWriter,
    RunResult,
    RunStatus,
    build_benchmark,
    now_iso,
    read_records,
)

if TYPE_CHECKING:
    from tokspeed.load.timeline import Timeline

CPU_SATURATED = 90.0  # a worker above this CPU share cannot be trusted to send on time


@dataclass
class WorkerStats:
    """What the master knows about one worker, from its batches."""

    worker: str
    index: int
    host: str | None = None
    pid: int | None = None
    wall_anchor_ns: int | None = None
    epoch_offset_ns: int | None = None
    batches: int = 0
    records: int = 0
    ok: int = 0
    final: bool = False  # it sent its last batch at stop (False: killed or lost)
    cpu_percent: list[float] = field(default_factory=list)
    lateness_ns: list[int] = field(default_factory=list)

    def observe_batch(self, batch: dict[str, Any]) -> None:
        self.batches += 1
        self.host, self.pid = batch.get("host"), batch.get("pid")
        self.wall_anchor_ns = batch.get("wall_anchor_ns")
        self.epoch_offset_ns = batch.get("epoch_offset_ns")
        cpu = batch.get("cpu_percent")
        if isinstance(cpu, (int, float)):
            self.cpu_percent.append(float(cpu))
        self.final = self.final or bool(batch.get("final"))

    def observe(self, record: RequestRecord) -> None:
        self.records += 1
        self.ok += record.status is Status.OK
        late = lateness_ns(record)
        if late is not None:
            self.lateness_ns.append(late)

    def describe(self) -> dict[str, Any]:
        late = np.asarray(self.lateness_ns, dtype=np.float64) / 1e6
        cpu = self.cpu_percent
        return {
            "worker": self.worker,
            "index": self.index,
            "host": self.host,
            "pid": self.pid,
            "records": self.records,
            "ok": self.ok,
            "batches": self.batches,
            "ended": "stopped" if self.final else "lost",
            "wall_anchor_ns": self.wall_anchor_ns,
            "epoch_offset_ns": self.epoch_offset_ns,
            "cpu_percent": {"mean": round(sum(cpu) / len(cpu), 1), "max": round(max(cpu), 1)} if cpu else None,
            "lateness_ms": {
                "p50": round(float(np.percentile(late, 50)), 3),
                "p99": round(float(np.percentile(late, 99)), 3),
                "max": round(float(late.max()), 3),
            } if late.size else None,
        }

    def warnings(self) -> list[str]:
        out = []
        name = f"worker {self.index} ({self.host}, pid {self.pid})"
        if not self.final:
            out.append(f"{name} stopped sending before the end (killed or lost): "
                       f"the {self.records} records it sent are kept, its requests in flight are not")
        if self.cpu_percent and max(self.cpu_percent) > CPU_SATURATED:
            out.append(f"{name} reached {max(self.cpu_percent):.0f}% CPU: it may have been the bottleneck "
                       "(check its lateness); add workers")
        return out


class RecordMerger:
    """Owns the master's results directory: appends batches as they come, writes run.json."""

    def __init__(
        self, directory: Path, skeleton: RunResult, overwrite: bool = False, facts: dict[str, Any] | None = None
    ) -> None:
        self.writer = ResultsWriter(directory, epoch_offset_ns=0, overwrite=overwrite)  # records arrive on the epoch scale
        self.result = skeleton
        self.workers: dict[str, WorkerStats] = {}
        self.facts = dict(facts or {})  # about the run as a whole (Locust version, users, run time)
        self.received = 0
        self.measured = 0  # received records that are not warm-up
        self.model: str | None = None  # what the workers' requests named (they may discover it)
        self.written_at = -1  # records received when run.json was last written with a summary
        self.writer.write_run(self.result)

    def accept(self, batch: dict[str, Any]) -> int:
        """Append one batch's records (flushed) and note its worker's facts; returns how many records."""
        worker = str(batch.get("worker"))
        stats = self.workers.get(worker)
        if stats is None:
            stats = self.workers[worker] = WorkerStats(worker=worker, index=int(batch.get("index", -1)))
        stats.observe_batch(batch)
        if self.model is None and batch.get("model"):
            self.model = str(batch["model"])
        for item in batch.get("records") or ():
            record = RequestRecord.from_json_dict(item)
            self.writer.append(record)
            stats.observe(record)
            self.received += 1
            self.measured += not record.warmup
        return len(batch.get("records") or ())

    def finish(
        self,
        name: str,
        profile: dict[str, Any],
        status: RunStatus = "complete",
        failures: Sequence[str] = (),
        stages: Timeline | None = None,
    ) -> RunResult:
        """Summarise every record received (read back from requests.jsonl) and write run.json.

        Without a measured (non-warm-up) record the run failed: for the `failures` reported
        (workers that could not start), else because nothing was measured. `stages`: the
        concurrency windows, each summarised over the records labelled with it.
        """
        records = read_records(self.writer.requests_path, compact=True)
        workers = sorted(self.workers.values(), key=lambda w: w.index)
        full = {**profile, "distributed": {**profile.get("distributed", {}),
                                           "workers": [w.describe() for w in workers]}}
        warnings = [w for s in workers for w in s.warnings()]
        warnings += [f"could not start: {f}" for f in failures]
        measured = any(not r.warmup for r in records)
        benchmarks = [build_benchmark(name, full, records, [])] if measured else []
        if benchmarks and stages is not None:
            from tokspeed.config import RunConfig
            from tokspeed.results.groups import add_groups

            add_groups(benchmarks[0], stages, records, RunConfig.model_construct(slo=[], classes=None))
        self.result = self.result.model_copy(update={
            "status": status if measured else "failed",
            "error": None if measured else _failure(failures, bool(records)),
            "finished_at": now_iso(),
            "benchmarks": benchmarks,
            "warnings": warnings if measured else [*warnings, "no measured request finished: no summary"],
        })
        self.writer.write_run(self.result)
        self.written_at = self.received
        return self.result

    @property
    def stale(self) -> bool:
        """Records arrived after run.json was last summarised."""
        return self.received != self.written_at

    def close(self) -> None:
        self.writer.close()


def _failure(failures: Sequence[str], any_record: bool) -> str:
    """Why a run measured nothing: the workers' own reasons first."""
    if failures:
        return "; ".join(failures)
    if any_record:
        return "every finished request was warm-up: nothing measured (lower --warmup-s or run longer)"
    return "no worker sent a finished request (see the workers' logs)"
