"""Orchestrate a whole run: start the backend, warm up, run each iteration, save everything.

Order of events, each visible on disk: run.json (status "running") is written
before the first request; every request is appended to requests.jsonl as it
finishes; run.json is rewritten with the summaries when the run ends, however
it ends (complete, interrupted by Ctrl-C, or failed).

Memory: records are not kept once they are on disk. While a load point runs, the
runner holds counts and bounded state only (the first few sample responses, the
target-lost watch). When the point ends, its records are read back from
requests.jsonl, all at once, to build its summary: peak memory is one point's
records, not the whole run's, and nothing accumulates while a point runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import time
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tokspeed.backends.base import Backend, TargetInfo
from tokspeed.backends.credentials import url_auth_replacing
from tokspeed.backends.redact import Redactor, secret_values
from tokspeed.config import DURATION_GRACE_MIN_S, SAMPLE_OUTPUTS, RunConfig
from tokspeed.diagnosis.digest import PointDigest
from tokspeed.diagnosis.rules import diagnose_point, diagnose_result, ordered
from tokspeed.errors import ResultsError, TargetGone, TokspeedError
from tokspeed.load.plan import LoadPlan
from tokspeed.metrics.cold_start import add_cold_start
from tokspeed.records import RequestRecord, Status
from tokspeed.results import (
    REQUESTS_FILE,
    Benchmark,
    ResultsWriter,
    RunResult,
    Sample,
    StoredRecords,
    build_benchmark,
    now_iso,
    read_records,
)
from tokspeed.results.findings import Finding
from tokspeed.runner.checks import measurement_warnings
from tokspeed.runner.conversations import phase_runner
from tokspeed.runner.guard import ErrorRateGuard, RunStopped, TargetWatch, run_guarded
from tokspeed.runner.loops import Phase, SpecSource
from tokspeed.runner.profiling import ServerProfiler
from tokspeed.telemetry.environment import capture_environment, server_facts
from tokspeed.telemetry.schema import TelemetrySummary
from tokspeed.telemetry.session import Telemetry, TelemetryOptions
from tokspeed.telemetry.summary import Mark, Work

WARMUP_INDEX_BASE = 1_000_000_000  # warm-up requests use spec indices from here on
LEAD_INDEX_STRIDE = 10_000_000  # warm-up held at the load: iteration k's lead uses indices from BASE + k × this
SAMPLE_CHARS = 2000


class Observer(Protocol):
    """Receives progress; implemented by the live console view (or a no-op)."""

    def target_ready(self, info: TargetInfo) -> None: ...

    def phase_started(self, label: str, phase: Phase) -> None: ...

    def started(self, record: RequestRecord) -> None: ...

    def record(self, record: RequestRecord) -> None: ...

    def phase_finished(self, phase: Phase) -> None: ...

    def summarising(self, label: str, requests: int) -> None: ...


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

    def summarising(self, label: str, requests: int) -> None:
        pass


@dataclass
class RunOutcome:
    """How a run ended. Its records are on disk, not here: `load_records()` reads them back."""

    result: RunResult
    directory: Path
    requests: int = 0  # records written to requests.jsonl (warm-up, failed and cancelled included)

    @property
    def interrupted(self) -> bool:
        return self.result.status == "interrupted"

    def load_records(self) -> list[RequestRecord]:
        """Every record of the run, read from requests.jsonl at once (for reports made at the end)."""
        return read_records(self.directory / REQUESTS_FILE)


class Workload(SpecSource, Protocol):
    def describe(self) -> dict[str, object]: ...


def plan_from_config(cfg: RunConfig) -> LoadPlan:
    if cfg.multi_turn is not None:  # conversations: users in a closed loop, or new conversations per second
        from tokspeed.runner.conversations import conversation_plan

        return conversation_plan(cfg)
    if cfg.scheduled is not None:  # a trace, stages or classes: a precomputed open-loop timeline
        from tokspeed.runner.scheduled import scheduled_plan

        return scheduled_plan(cfg)
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
        exact_rate=cfg.exact_rate,
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
                  first_index=0, seed=cfg.seed + it - 1, lead_s=cfg.warmup_s or 0.0,
                  lead_first_index=WARMUP_INDEX_BASE + it * LEAD_INDEX_STRIDE)
        )
    return phases


@dataclass(frozen=True)
class LoadPoint:
    """One benchmark of a run: its name, its full config, and what serves and feeds it."""

    name: str
    cfg: RunConfig
    backend: Backend
    workload: Workload


class SourceStopped(Exception):
    """Thrown into a point source when the run stops early (Ctrl-C, a stopped point): return what you have."""


# Yields the points to measure; is sent each finished Benchmark; may return result updates
# (e.g. {"capacity": ...}) that are stored on the RunResult.
PointSource = Generator[LoadPoint, Benchmark, "dict[str, Any] | None"]


def single_point(cfg: RunConfig, backend: Backend, workload: Workload) -> PointSource:
    yield LoadPoint(plan_from_config(cfg).label(), cfg, backend, workload)
    return None


async def execute_run(
    cfg: RunConfig,
    backend: Backend,
    workload: Workload,
    out_dir: Path,
    observer: Observer | None = None,
    overwrite: bool = False,
    interrupt: Interrupt | None = None,
) -> RunOutcome:
    """Run one load point (warm-up, iterations); returns even when interrupted (status says so)."""
    return await execute_points(cfg, single_point(cfg, backend, workload), out_dir, observer, overwrite, interrupt)


class _Run:
    """The state of a run in progress: its files, its result so far, how many records it wrote."""

    def __init__(self, cfg: RunConfig, out_dir: Path, overwrite: bool) -> None:
        self.cfg = cfg
        self.writer = ResultsWriter(out_dir, epoch_offset_ns=time.time_ns() - time.perf_counter_ns(), overwrite=overwrite,
                                    redact=config_redactor(cfg).tree)
        self.result = RunResult(
            started_at=now_iso(),
            epoch_offset_ns=self.writer.epoch_offset_ns,
            config=cfg.redacted_dump(),
            environment=capture_environment(),
        )
        self.requests = 0  # records written so far (none is kept in memory)
        self.notes: list[str] = []
        # (benchmark name, its index, its warnings with the diagnosis rule covering each)
        self.point_warnings: list[tuple[str, int, list[tuple[str | None, str]]]] = []
        self.point_findings: list[Finding] = []  # diagnosis of each finished point, from its records
        self.telemetry: Telemetry | None = None  # samplers beside the load (None with --no-telemetry)
        self.writer.write_run(self.result)


class Interrupt:
    """A stop asked from outside (SIGINT, SIGTERM, SIGHUP): the load is cancelled once, later asks only counted.

    `execute_points` hands it the task running the load (`watch`); `request()` cancels that task
    the first time and does nothing more after, so a second signal 50 ms later cannot land in
    the summary or the final writes. A stop asked once the load is over (while summarising)
    still marks the run interrupted.
    """

    __slots__ = ("_task", "asked")

    def __init__(self) -> None:
        self.asked = 0
        self._task: asyncio.Future[Any] | None = None

    def watch(self, task: asyncio.Future[Any] | None) -> None:
        self._task = task
        if task is not None and self.asked:
            task.cancel()

    def request(self) -> bool:
        """Ask the run to stop; True the first time (when the load is cancelled)."""
        self.asked += 1
        if self.asked == 1 and self._task is not None:
            self._task.cancel()
        return self.asked == 1


@dataclass
class _Current:
    """The load point in progress (None between points) and its state."""

    point: LoadPoint | None = None
    state: _PointState | None = None


async def execute_points(
    cfg: RunConfig,
    points: PointSource,
    out_dir: Path,
    observer: Observer | None = None,
    overwrite: bool = False,
    interrupt: Interrupt | None = None,
) -> RunOutcome:
    """Run each load point the source yields, one after another, into one results directory.

    run.json is rewritten after every finished point, so a sweep that dies keeps the
    points it finished. A TokspeedError raised by a backend's start (target
    unreachable, ...) is re-raised after run.json records the failure. A point stopped
    by `--max-error-rate`, or whose target stopped answering, ends the run with status
    "failed" and the reason in `error`.

    The load runs in a task of its own; `interrupt` (or a cancellation of the caller) cancels
    only that task, so the summaries and the final writes that follow are never cut: the run
    ends "interrupted" with what it measured, whenever the stop came.
    """
    obs = observer or NullObserver()
    run = _Run(cfg, out_dir, overwrite)
    cur = _Current()

    async def load() -> None:
        await _start_telemetry(run)
        cur.point = next(points)
        while True:
            cur.state = _PointState(index=len(run.result.benchmarks), offset=run.writer.position())
            await _run_point(run, cur.point, cur.state, obs)
            obs.summarising(cur.point.name, cur.state.finished)
            bench = _add_benchmark(run, cur.point, cur.state)
            cur.point = None
            try:
                cur.point = points.send(bench)
            except StopIteration as stop:
                for key, value in (stop.value or {}).items():
                    setattr(run.result, key, value)
                break

    work = asyncio.ensure_future(load())
    if interrupt is not None:
        interrupt.watch(work)
    failure: BaseException | None = None
    stopped = False  # the caller was cancelled
    try:
        try:
            await asyncio.wait({work})
        except asyncio.CancelledError:  # the caller was cancelled: stop the load, keep what it measured
            stopped = True
            work.cancel()
            await asyncio.wait({work})
        if interrupt is not None:
            interrupt.watch(None)
        if work.cancelled():
            run.result.status = "interrupted"
            _stop_source(run, points)
        elif (exc := work.exception()) is None:
            asked = stopped or (interrupt is not None and interrupt.asked > 0)  # a stop while summarising
            run.result.status = "interrupted" if asked else "complete"
        elif isinstance(exc, RunStopped):
            run.result.status, run.result.error = "failed", str(exc)
            if exc.args and str(exc).startswith("stopped early"):
                run.notes.append(f"the run {exc}; its summary covers only the requests that finished before")
            _stop_source(run, points)
        else:
            if isinstance(exc, TokspeedError):
                run.result.status, run.result.error = "failed", str(exc)
            failure = exc
    finally:
        late = await _wind_up(run, cur)
    failure = failure or late
    if failure is not None:
        raise failure
    return RunOutcome(result=run.result, directory=out_dir, requests=run.requests)


async def _wind_up(run: _Run, cur: _Current) -> ResultsError | None:
    """Summarise a point stopped midway, stop the samplers, write run.json, close the backend.

    A cancellation arriving here (a caller cancelled again) is absorbed: the run is already
    stopping, and cutting these steps would leave run.json "running". So is a results file that
    cannot be written (a full disk): every step still runs, and the first such failure is
    returned for the caller to raise.
    """
    point, state = cur.point, cur.state
    failed: ResultsError | None = None
    # (a point whose summary is already in the result failed only to be written: not summarised twice)
    if point is not None and state is not None and state.finished and len(run.result.benchmarks) == state.index:
        try:
            _add_benchmark(run, point, state)
        except ResultsError as exc:
            failed = exc
    try:
        await _stop_telemetry(run)
    except asyncio.CancelledError:
        run.result.status = "interrupted" if run.result.status in ("running", "complete") else run.result.status
    finally:
        try:
            _finish(run)
        except ResultsError as exc:
            failed = failed or exc
    if point is not None:
        try:
            await point.backend.close()
        except asyncio.CancelledError:
            pass
    return failed


def _stop_source(run: _Run, points: PointSource) -> None:
    """Let a stopped run's point source say what it found so far (a capacity search's probes and bracket)."""
    try:
        points.throw(SourceStopped())
    except StopIteration as stop:
        for key, value in (stop.value or {}).items():
            setattr(run.result, key, value)
    except SourceStopped:
        pass
    except Exception as exc:  # noqa: BLE001 - what was measured matters more than the source's summary
        run.notes.append(f"the load points' summary failed on stopping ({type(exc).__name__}: {exc})")


class SampleKeeper:
    """The first `limit` measured responses by (iteration, index), fed one record at a time.

    Keeps at most `limit` texts (cut to SAMPLE_CHARS), never the records.
    """

    def __init__(self, limit: int = SAMPLE_OUTPUTS) -> None:
        self.limit = limit
        self._fed = 0
        self._kept: list[tuple[int, int, int, str]] = []  # heap of (-iteration, -index, -fed, text): worst first

    def record(self, r: RequestRecord) -> None:
        if not r.ok or r.warmup or r.output_text is None or self.limit <= 0:
            return
        self._fed += 1
        item = (-r.iteration, -r.index, -self._fed, r.output_text[:SAMPLE_CHARS])
        if len(self._kept) < self.limit:
            heapq.heappush(self._kept, item)
        elif item > self._kept[0]:
            heapq.heapreplace(self._kept, item)

    def samples(self, workload: SpecSource) -> list[Sample]:
        """The kept responses with their prompts, first (iteration, index) first."""
        return [
            Sample(index=-index, prompt=workload.request(-index).prompt_text()[:SAMPLE_CHARS], response=text)
            for _, index, _, text in sorted(self._kept, reverse=True)
        ]


@dataclass
class _PointState:
    """What a load point in progress keeps: where its records start on disk, counts, bounded state."""

    index: int  # its position in run.json's benchmarks (each record's `benchmark`)
    offset: int  # where its records start in requests.jsonl
    finished: int = 0  # records written
    served: dict[str, Any] = field(default_factory=dict)  # the TargetInfo of its backend
    samples: SampleKeeper = field(default_factory=SampleKeeper)
    watch: TargetWatch = field(default_factory=TargetWatch)
    window: Mark | None = None  # telemetry: when its measured phases began
    window_end: Mark | None = None  # ... and ended
    began_ns: int | None = None  # when its backend's start() was called (cold start)
    profiler: ServerProfiler | None = None  # --profile: the server's profiler around the measured window


def duration_grace_s(cfg: RunConfig) -> float | None:
    """How long requests still in flight at the end of --duration may take to finish (None: no --duration)."""
    if cfg.duration_s is None:
        return None
    return min(cfg.timeout_s, max(DURATION_GRACE_MIN_S, cfg.duration_s))


class _Cut:
    """A timed phase's hard end: its duration (held warm-up included) plus the grace; what it cut off."""

    __slots__ = ("active", "count", "grace_s")

    def __init__(self, grace_s: float | None) -> None:
        self.grace_s = grace_s
        self.active = False
        self.count = 0

    def limit_s(self, phase: Phase, cfg: RunConfig) -> float | None:
        """Seconds after the phase starts when its requests in flight are cut off (None: never)."""
        if self.grace_s is None or cfg.duration_s is None:
            return None
        return phase.lead_s + (phase.duration_s or cfg.duration_s) + self.grace_s  # a warm-up is held to --duration too

    def mark(self, record: RequestRecord) -> None:
        if self.active and record.status is Status.INCOMPLETE:
            self.count += 1
            record.error = f"cut off: still in flight {self.grace_s:g} s after --duration ended"

    async def run(self, phase_run: Coroutine[Any, Any, None], limit_s: float | None) -> None:
        """Run the phase; past `limit_s`, cancel it (its requests in flight end incomplete) and return."""
        task = asyncio.ensure_future(phase_run)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit_s)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})
            raise
        if task not in done:
            self.active = True
            try:
                task.cancel()
                await asyncio.wait({task})
            finally:
                self.active = False
            if task.cancelled():
                return
        task.result()


async def _run_point(run: _Run, point: LoadPoint, state: _PointState, obs: Observer) -> None:
    """Start the point's backend, warm up, run its iterations; each record goes to disk, not to memory."""
    guard = ErrorRateGuard(point.cfg.max_error_rate)
    cut = _Cut(duration_grace_s(point.cfg))

    def on_record(record: RequestRecord) -> None:
        cut.mark(record)
        if plan.timeline is not None:  # scheduled load: the record's stage and class
            plan.timeline.label(record)
        record.benchmark = state.index
        run.writer.append(record)
        run.requests += 1
        state.finished += 1
        state.samples.record(record)
        state.watch.record(record)
        obs.record(record)
        guard.record(record)

    if not run.result.workload:
        run.result.workload = point.workload.describe()
    plan = plan_from_config(point.cfg)
    state.began_ns = time.perf_counter_ns()
    info = await point.backend.start()
    state.served.update(dataclasses.asdict(info))
    if not run.result.target:
        run.result.target = dict(state.served)
    await _server_environment(run, point.cfg)
    run.writer.write_run(run.result)
    obs.target_ready(info)
    if point.cfg.server_profile and point.cfg.target:
        state.profiler = ServerProfiler(point.cfg.target, target_headers(point.cfg), config_redactor(point.cfg))
    measuring = False
    try:
        for phase in phases_from_config(point.cfg):
            if not phase.warmup and not measuring:
                measuring = True
                await _open_window(run, state, phase)
            obs.phase_started(point.name, phase)
            runner = phase_runner(point.workload)  # run_phase, or conversations for a multi-turn workload
            phase_run = runner(plan, phase, point.backend, point.workload, on_record, obs.started)
            try:
                await run_guarded(cut.run(phase_run, cut.limit_s(phase, point.cfg)), guard)
            except TargetGone as exc:  # refused for long after answering: a failed run that keeps its results
                raise RunStopped(str(exc)) from None
            obs.phase_finished(phase)
    finally:
        if cut.count:
            run.notes.append(
                f"{cut.count} requests were still in flight {cut.grace_s:g} s after --duration ended: cut off, "
                "recorded as incomplete (not in the summary); raise --duration or look for stalled streams"
            )
        notes = getattr(point.backend, "transport_notes", None)  # refused connections and the back-off
        for note in notes() if notes is not None else []:
            if note not in run.notes:
                run.notes.append(note)
        if state.window is not None and run.telemetry is not None:
            await run.telemetry.scrape_edge()  # ... and as it closes
            state.window_end = run.telemetry.window("end", state.index)
        if state.profiler is not None:  # after the window's end: a trace's flush (minutes) is not measured
            try:
                await state.profiler.stop()
            finally:
                run.notes += [n for n in state.profiler.notes if n not in run.notes]
        if not run.result.samples:
            run.result.samples = state.samples.samples(point.workload)
    await point.backend.close()
    if (lost := state.watch.verdict()) is not None:
        raise RunStopped(lost)


async def _open_window(run: _Run, state: _PointState, phase: Phase) -> None:
    """The measured window opens: the telemetry's mark and edge scrape, then the server's profiler.

    With a warm-up held at the load, the phase runs its lead first: the profiler starts when
    the lead ends (the window's telemetry has always included the lead).
    """
    if run.telemetry is not None:
        state.window = run.telemetry.window("begin", state.index)
        await run.telemetry.scrape_edge()  # the server's counters as the window opens
    if state.profiler is not None:
        if phase.lead_s > 0:
            state.profiler.start_later(phase.lead_s)
        else:
            await state.profiler.start()


def _add_benchmark(run: _Run, point: LoadPoint, state: _PointState) -> Benchmark:
    """Summarise a finished (or stopped) point from its records, streamed back from requests.jsonl in passes.

    Memory does not grow with the point: each pass holds one record (and a bounded batch), the
    summaries keep bounded samples (stats/sketch.py). Only --token-audit, which kept every text
    on purpose, reads the point's records into memory at once.
    """
    records = StoredRecords(run.writer.requests_path, state.index, state.offset, run.writer.epoch_offset_ns)
    plan = plan_from_config(point.cfg)
    guarded = _GuardedDigest(run, point.name)  # what the checks, rules and cold start need, in the summary's pass
    feeds: list[Callable[[RequestRecord], None]] = [guarded.add]
    groups = models = None
    if plan.timeline is not None:  # per stage and per class summaries, in the same pass
        from tokspeed.results.groups import GroupSummaries

        groups = GroupSummaries(plan.timeline, point.cfg)
        feeds.append(groups.add)
    if point.cfg.model_mix:  # per model summaries, in the same pass
        from tokspeed.results.groups import ModelSummaries

        models = ModelSummaries(point.cfg)
        feeds.append(models.add)

    def also(r: RequestRecord) -> None:
        for feed in feeds:
            feed(r)

    bench = build_benchmark(point.name, plan.describe(), records, point.cfg.slos, also=also,
                            percentiles=point.cfg.percentiles, cooldown=point.cfg.cooldown,
                            planned_duration_s=point.cfg.duration_s)
    if groups is not None:
        groups.fill(bench)
    if models is not None:
        models.fill(bench)
    digest = guarded.digest
    if digest is not None:
        add_cold_start(state.served, digest.cold, state.began_ns)  # in-process targets: load vs first vs warm request
    bench.target = state.served or None
    bench.telemetry = _point_telemetry(run, point, state, bench)
    bench.server_profile = state.profiler.record if state.profiler is not None else None
    if point.cfg.token_audit:  # --token-audit: every text was kept
        from tokspeed.metrics.token_audit import audit_tokens
        from tokspeed.workload.tokens import load_counter

        bench.token_audit = audit_tokens(list(records), load_counter(point.cfg.tokenizer) if point.cfg.tokenizer else None)
    run.result.benchmarks.append(bench)
    if digest is not None:
        _diagnose_point(run, state.index, bench, digest)
        run.point_warnings.append((point.name, state.index, measurement_warnings(bench, point.cfg, digest)))
    run.writer.write_run(run.result)
    return bench


def config_redactor(cfg: RunConfig) -> Redactor:
    """Every secret a run's config holds: the target's, and those of a `--server-metrics` URL."""
    key = cfg.api_key.get_secret_value() if cfg.api_key is not None else None
    values = secret_values(cfg.target or "", key, cfg.headers)
    if cfg.server_metrics:
        values += secret_values(cfg.server_metrics, None, {})
    return Redactor(values)


def target_headers(cfg: RunConfig) -> dict[str, str]:
    """The headers the target gets, credentials included (for its /version, /v1/models and /metrics)."""
    headers = dict(cfg.headers)
    if cfg.api_key is not None:
        headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
    if cfg.target:  # user:password@ in the target URL: the Basic header it stands for
        headers = url_auth_replacing(cfg.target, headers)[1]
    return headers


async def _start_telemetry(run: _Run) -> None:
    """Start the samplers for the whole run (unless --no-telemetry); they never fail the run."""
    cfg = run.cfg
    if not cfg.telemetry:
        return
    options = TelemetryOptions(
        interval_s=cfg.telemetry_interval_s, server_metrics=cfg.server_metrics, target=cfg.target,
        headers=target_headers(cfg), policy=cfg.http_policy(),
    )
    run.telemetry = Telemetry(options, run.writer.directory, run.writer.epoch_offset_ns)
    await run.telemetry.start()


async def _stop_telemetry(run: _Run) -> None:
    if run.telemetry is not None:
        telemetry, run.telemetry = run.telemetry, None
        run.result.telemetry = await telemetry.stop()


async def _server_environment(run: _Run, cfg: RunConfig) -> None:
    """Once per run: what an HTTP target says about itself, into environment.server."""
    if "server" in run.result.environment or not (cfg.target or "").startswith(("http://", "https://")):
        return
    assert cfg.target is not None
    facts = await server_facts(cfg.target, target_headers(cfg), cfg.http_policy())
    run.result.environment["server"] = config_redactor(cfg).tree(facts)  # a server can echo the key


def _point_telemetry(run: _Run, point: LoadPoint, state: _PointState, bench: Benchmark) -> TelemetrySummary | None:
    """The telemetry of a point's measured window; the server only when it is the one the run scrapes."""
    if run.telemetry is None or state.window is None:
        return None
    end = state.window_end or run.telemetry.window("end", state.index)
    s = bench.summary
    work = Work(output_tokens=s.tokens.output_total, requests=s.requests.total)
    same_server = run.cfg.server_metrics is not None or point.cfg.target == run.cfg.target
    return run.telemetry.summarise(state.window, end, work, server=same_server)


def grouped_warnings(per_point: list[tuple[str, list[str]]]) -> list[str]:
    """One line per distinct warning; with several points, prefixed by the points it applies to."""
    names: dict[str, list[str]] = {}
    for name, warnings in per_point:
        for w in warnings:
            names.setdefault(w, []).append(name)
    if len(per_point) <= 1:
        return list(names)
    every = len(per_point)
    return [f"{'every point' if len(points) == every else ', '.join(points)}: {w}" for w, points in names.items()]


def _finish(run: _Run) -> None:
    result = run.result
    if result.status == "running":
        result.status = "failed"
    result.finished_at = now_iso()
    result.diagnosis = _diagnosis(run)
    result.warnings = [*result.warnings, *grouped_warnings(_uncovered(run.point_warnings, result.diagnosis)), *run.notes]
    try:
        run.writer.write_run(result)
    finally:
        run.writer.close()


def _uncovered(
    per_point: list[tuple[str, int, list[tuple[str | None, str]]]], findings: list[Finding]
) -> list[tuple[str, list[str]]]:
    """Each point's warnings, less those whose topic a finding for that point (or the run) already says."""
    fired = {(f.rule, f.benchmark) for f in findings}
    return [
        (name, [w for rule, w in tagged if rule is None or ((rule, index) not in fired and (rule, None) not in fired)])
        for name, index, tagged in per_point
    ]


class _GuardedDigest:
    """A point's diagnosis digest, fed one record at a time; a bug in it costs the diagnosis (a note), never the run."""

    def __init__(self, run: _Run, point: str) -> None:
        self.digest: PointDigest | None = PointDigest()
        self._run, self._point = run, point

    def add(self, r: RequestRecord) -> None:
        if self.digest is None:
            return
        try:
            self.digest.add(r)
        except Exception as exc:  # noqa: BLE001 - the measurement matters more than its diagnosis
            self._run.notes.append(f"the diagnosis of {self._point} failed ({type(exc).__name__}: {exc}); the results are unaffected")
            self.digest = None


def _diagnose_point(run: _Run, index: int, bench: Benchmark, digest: PointDigest) -> None:
    """The point rules over its digest; a failure is a warning, never a lost run."""
    try:
        run.point_findings += diagnose_point(index, bench, digest, run.result.config)
    except Exception as exc:  # noqa: BLE001 - the measurement matters more than its diagnosis
        run.notes.append(f"the diagnosis of {bench.name} failed ({type(exc).__name__}: {exc}); the results are unaffected")


def _diagnosis(run: _Run) -> list[Finding]:
    """Every finding: the points' (gathered as they ended) and the result rules' (summaries, telemetry, sweep)."""
    try:
        return ordered([*run.point_findings, *diagnose_result(run.result)])
    except Exception as exc:  # noqa: BLE001 - never lose the results over their diagnosis
        run.result.warnings.append(f"the diagnosis failed ({type(exc).__name__}: {exc}); the results are unaffected")
        return list(run.point_findings)
