"""The versioned results directory: `run.json` (schema tokspeed.run/1) and `requests.jsonl`.

`ResultsWriter` creates the directory before the run (a bad path fails at
once), appends each finished request to `requests.jsonl` and flushes it, and
rewrites `run.json` atomically at the start and the end of a run, so a crash
or Ctrl-C leaves every finished request on disk and a run.json that says how
far it got. The runner keeps no records in memory: it reads each load point's
records back (`read_records(path, benchmark=i)`) to summarise that point.
`load_run` reads a directory back; when `run.json` is missing, or
still says "running" (the process was killed), it rebuilds the summaries from
`requests.jsonl`.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from tokspeed import __version__
from tokspeed.diagnosis.schema import Finding
from tokspeed.errors import ConfigError, ResultsError
from tokspeed.metrics import (
    AcrossIterations,
    Summary,
    across_iterations,
    summarize,
)
from tokspeed.metrics.fit import LinearFit
from tokspeed.metrics.groups import GroupResult
from tokspeed.metrics.schema import Goodput
from tokspeed.metrics.slo import SLO, parse_slo
from tokspeed.metrics.steady_state import TimedSpan, with_steady_state
from tokspeed.metrics.summary import SummaryBuilder, summarize_by_iteration
from tokspeed.metrics.token_audit import TokenAudit
from tokspeed.quality.schema import QualityResult
from tokspeed.records import RequestRecord
from tokspeed.telemetry.schema import TelemetrySummary

SCHEMA = "tokspeed.run/1"
# The metric definitions (docs/numbers.md, docs/metric-spec.md). Bumped whenever a formula changes, so
# two runs are comparable figure by figure only when their specs match.
METRIC_SPEC = "tokspeed.metrics/2"
RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
RunStatus = Literal["running", "complete", "interrupted", "failed"]


class IterationResult(BaseModel):
    iteration: int
    summary: Summary
    partial: bool = Field(False, description="cut short (the run stopped during it): left out of across_iterations")


class Benchmark(BaseModel):
    """One load point: its profile, the pooled summary and, with --iterations, each iteration."""

    name: str
    profile: dict[str, Any]
    summary: Summary
    iterations: list[IterationResult] = Field(default_factory=list)
    across_iterations: AcrossIterations | None = None
    target: dict[str, Any] | None = Field(None, description="what served this point (sweeps over several targets)")
    telemetry: TelemetrySummary | None = Field(None, description="GPU, client and server telemetry over this point")
    stages: dict[str, GroupResult] | None = Field(
        None, description="scheduled load (stages, ramp): each stage's or ramp window's requests, by scheduled time"
    )
    classes: dict[str, GroupResult] | None = Field(
        None, description="mixed workload classes: each class's requests, judged on the class's own SLOs"
    )
    classes_goodput: Goodput | None = Field(
        None, description="mixed workload classes together: good requests of every class, each on its own SLOs"
    )
    token_audit: TokenAudit | None = Field(
        None, description="run --token-audit: usage vs tokenizer counts, tokens per chunk, early stops"
    )


class Sample(BaseModel):
    """One prompt and the response it got (truncated), so a run shows what was generated."""

    index: int
    prompt: str
    response: str


class SweepInfo(BaseModel):
    """What a sweep varied; each point is one entry of `benchmarks`."""

    dimension: str | None = Field(None, description="concurrency, rate, input_tokens, output_tokens; None for --auto")
    values: list[float] = Field(default_factory=list)
    auto: bool = False
    targets: list[str] = Field(default_factory=list)
    ttft_vs_input_tokens: LinearFit | None = Field(None, description="prefill cost fitted over all points")


class CapacityProbe(BaseModel):
    value: float = Field(description="offered rate (req/s) or concurrency probed")
    passed: bool
    reason: str = ""
    benchmark: int = Field(description="index of this probe in `benchmarks`")
    offered_requests_per_s: float | None = Field(None, description="arrivals per second in its steady window (what was sent)")
    sustained_requests_per_s: float | None = Field(None, description="completions per second in that window")


class CapacityResult(BaseModel):
    """The highest load at which every SLO held ('QPS under a latency budget')."""

    by: Literal["rate", "concurrency"]
    requests_per_s: float | None = Field(
        description="capacity in requests per second: where the SLO figures of the probes near the bracket, fitted "
        "against their rates, meet their limits (by rate; the highest passing probe without a fit or by concurrency), "
        "as sent, never above the most the server completed at steady state in any probe"
    )
    value: float | None = Field(description="the highest passing probed rate or concurrency (the knob)")
    low: float | None
    high: float | None = Field(description="lowest failing value: the capacity lies in [low, high)")
    uncertainty: float | None = Field(description="(high - low) / 2, in the unit of `value`")
    precision: float
    slos: list[str]
    goodput_requests_per_s: float | None = None
    probes: list[CapacityProbe] = Field(default_factory=list)
    interval_requests_per_s: list[float | None] | None = Field(
        None, description="[low, high] req/s the capacity lies in: the bracketing probes, widened to the next probe "
        "where a probe's SLO figure is within its own 95% percentile interval of the limit, and to requests_per_s"
    )
    fitted: bool = Field(False, description="requests_per_s comes from the fit of the probes' SLO figures (else: "
                         "the highest passing probe)")
    stopped_by: str = Field("bracket", description="why the search ended: " + ", ".join(
        ["bracket (narrowed to precision)", "max_value (held up to --max-rate)", "client (the client could not send faster)",
         "probes (--max-probes)", "floor (nothing passed down to the lowest rate)", "baseline (one request at a time misses the SLOs)",
         "budget (--max-time)", "interrupted"]))
    finding: str = Field("", description="the search's outcome in one sentence")
    requests_spent: int = 0
    seconds_spent: float = 0.0


class RunResult(BaseModel):
    """The contents of run.json. Additive changes keep the schema name; breaking ones bump it."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(SCHEMA, alias="schema")
    metric_spec: str = Field(METRIC_SPEC, description="version of the metric definitions the figures follow")
    tool: dict[str, str] = Field(default_factory=lambda: {"name": "tokspeed", "version": __version__})
    status: RunStatus = "running"
    started_at: str
    finished_at: str | None = None
    epoch_offset_ns: int = Field(0, description="Unix-epoch ns minus monotonic ns, for converting record times")
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any] = Field(default_factory=dict)
    benchmarks: list[Benchmark] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list, description="first prompts and responses, for eyeballing quality")
    sweep: SweepInfo | None = None
    capacity: CapacityResult | None = None
    warnings: list[str] = Field(default_factory=list)
    telemetry: TelemetrySummary | None = Field(None, description="GPU, client and server telemetry over the whole run")
    diagnosis: list[Finding] = Field(default_factory=list, description="validity and bottleneck findings")
    error: str | None = None
    quality: QualityResult | None = Field(default=None, description="quality probe after the load (run --quality)")

    def to_json_bytes(self, redact: Callable[[Any], Any] | None = None) -> bytes:
        """run.json's bytes; `redact` (a `Redactor.tree`) cleans every string first, the last guard for secrets."""
        data = self.model_dump(mode="json", by_alias=True)
        return orjson.dumps(data if redact is None else redact(data), option=orjson.OPT_INDENT_2)


SCHEMA_FILE = Path(__file__).parent / "schemas" / "run.schema.json"


def run_json_schema() -> dict[str, Any]:
    """The JSON Schema of run.json, generated from the models (shipped as schemas/run.schema.json)."""
    schema = RunResult.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = "https://tokspeed.dev/schemas/" + SCHEMA.replace("/", "-") + ".json"
    schema["title"] = SCHEMA
    return schema


def write_schema_file() -> None:
    """Regenerate schemas/run.schema.json (run after changing the result models)."""
    SCHEMA_FILE.write_bytes(orjson.dumps(run_json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ResultsWriter:
    """Owns one results directory for the duration of a run."""

    def __init__(self, directory: Path, epoch_offset_ns: int, overwrite: bool = False,
                 redact: Callable[[Any], Any] | None = None) -> None:
        self.directory = directory
        self._redact = redact  # applied to run.json's tree before each write (Redactor.tree)
        self.epoch_offset_ns = epoch_offset_ns
        existing = [directory / f for f in (RUN_FILE, REQUESTS_FILE) if (directory / f).exists()]
        if existing and not overwrite:
            raise ConfigError(
                f"{directory} already holds a run ({', '.join(p.name for p in existing)})",
                hint="choose a new --out directory, or pass --overwrite to replace it",
            )
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for path in existing:
                path.unlink()
            self._requests: IO[bytes] = open(directory / REQUESTS_FILE, "xb")
            self._broken: ResultsError | None = None  # the failed append that stopped the appends
            self.appended = 0  # records written whole
        except OSError as exc:
            raise ConfigError(
                f"cannot write results to {directory}: {exc.strerror}",
                hint="choose another --out directory",
            ) from exc

    def append(self, record: RequestRecord) -> None:
        """Write one finished request and flush it to the OS at once (one write: a kill leaves whole lines).

        After a failed write (a full disk) nothing more is appended: a second partial line would
        land after the first, so the file keeps the whole records before the failure and at most
        one torn line (which `report` names by its number).
        """
        if self._broken is not None:
            raise self._broken
        try:
            self._requests.write(orjson.dumps(record.to_json_dict(self.epoch_offset_ns)) + b"\n")
            self._requests.flush()
        except OSError as exc:
            self._broken = ResultsError(
                f"cannot append to {self.directory / REQUESTS_FILE}: {exc.strerror}",
                hint=_space_hint(exc, self.directory),
            )
            raise self._broken from exc
        self.appended += 1

    def write_run(self, result: RunResult) -> None:
        """Replace run.json atomically (write a temp file, then rename).

        When that fails (a full disk), the temp file is removed and run.json's status is
        patched in place (bytes already on disk, so no space is needed): a reader then sees
        how the run ended, not "running". Raises ResultsError saying what could not be written.
        """
        tmp = self.directory / (RUN_FILE + ".tmp")
        data = result.to_json_bytes(self._redact)
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.directory / RUN_FILE)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            patched = _patch_status(self.directory / RUN_FILE, result.status)
            raise ResultsError(
                f"cannot write {self.directory / RUN_FILE}: {exc.strerror}"
                + (f" (its status says {result.status!r}; its summary is not saved)" if patched else ""),
                hint=_space_hint(exc, self.directory),
            ) from exc

    @property
    def requests_path(self) -> Path:
        return self.directory / REQUESTS_FILE

    def position(self) -> int:
        """Bytes in requests.jsonl so far: where the next record will start (every append is flushed)."""
        return self._requests.tell()

    def close(self) -> None:
        try:
            self._requests.close()
        except OSError:  # a buffered line that could not be flushed: the failure was already raised
            pass


def _space_hint(exc: OSError, directory: Path) -> str | None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"free space where {directory} is (or pass another --out): the requests that finished before are in "
                f"{REQUESTS_FILE}; tokspeed report {directory} summarises them")
    return None


_RUNNING = re.compile(rb'"status":(\s*)"running"')


def _patch_status(run_file: Path, status: str) -> bool:
    """Overwrite `"status": "running"` in run.json in place with `status` (same length, padded): True if done."""
    if status == "running" or len(status) > len("running"):
        return False
    try:
        with open(run_file, "r+b") as f:
            m = _RUNNING.search(f.read())
            if m is None:
                return False
            new = b'"status":%s"%s"' % (m.group(1), status.encode())
            f.seek(m.start())
            f.write(new.ljust(m.end() - m.start()))
        return True
    except OSError:
        return False


def read_records(
    path: Path, benchmark: int | None = None, offset: int = 0, epoch_offset_ns: int = 0, compact: bool = False,
    skipped: list[str] | None = None,
) -> list[RequestRecord]:
    """Read requests.jsonl (or one load point of it); see `iter_records`."""
    return list(iter_records(path, benchmark, offset, epoch_offset_ns, compact, skipped))


def iter_records(
    path: Path, benchmark: int | None = None, offset: int = 0, epoch_offset_ns: int = 0, compact: bool = False,
    skipped: list[str] | None = None,
) -> Iterator[RequestRecord]:
    """Stream requests.jsonl one record at a time, from byte `offset`, only load point `benchmark` if given.

    Times stay on the epoch scale unless the run's `epoch_offset_ns` is given (then they are back on
    the run's monotonic clock, as the runner held them). `compact` stores each record's chunk
    times as an int64 array (a quarter of the memory; for summaries, which only read them). A torn
    last line (crash mid-write) is skipped; other bad lines are errors, unless `skipped` is given:
    then every torn or corrupt line is skipped, the rest still read, and each is named there
    ("requests.jsonl:12: ...", the last one included).
    """
    where = str(path) if not offset else f"{path} (from byte {offset})"
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = iter(f)
            line, n = next(lines, None), 1
            while line is not None:
                following = next(lines, None)  # one line ahead: is this the last?
                if line.strip():
                    try:
                        record = RequestRecord.from_json_dict(orjson.loads(line), epoch_offset_ns, compact)
                    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
                        if skipped is not None:
                            torn = following is None and not line.endswith(b"\n")
                            what = "torn (cut off mid-write)" if torn else "corrupt"
                            skipped.append(f"{where}:{n}: a {what} line, skipped ({str(exc)[:120]}); "
                                           "the other records were read")
                            line, n = following, n + 1
                            continue
                        if following is None:
                            return
                        raise ResultsError(f"{where}:{n}: not a tokspeed request record ({exc})") from exc
                    if benchmark is None or record.benchmark == benchmark:
                        yield record
                line, n = following, n + 1
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror}") from exc


def build_benchmark(
    name: str,
    profile: dict[str, Any],
    records: Iterable[RequestRecord],
    slos: Sequence[SLO],
    also: Callable[[RequestRecord], None] | None = None,
) -> Benchmark:
    """Summaries of one load point: pooled over iterations, per iteration, and across iterations.

    An open-loop `profile` (kind "rate") passes its rate on, for the schedule-based metrics.
    `records` is read in passes (one for the summaries, two more for the steady state), never
    held: a list, or a `StoredRecords` that streams them from requests.jsonl each time. `also`
    gets every record of the first pass (the runner's diagnosis digest), saving it a pass.
    """
    rate = profile.get("rate") if profile.get("kind") == "rate" or profile.get("open_loop") else None
    turns = profile.get("turns") if profile.get("kind") == "conversations" else None  # --multi-turn's plan
    pooled_builder, span = SummaryBuilder(slos, rate, turns), TimedSpan()
    unnumbered = False  # a measured record outside iterations ≥ 1: the pooled summary is not one iteration's
    for r in records:
        pooled_builder.add(r)
        span.add(r)
        unnumbered = unnumbered or (not r.warmup and r.iteration < 1)
        if also is not None:
            also(r)
    pooled = with_steady_state(pooled_builder.summary(), records, lambda rs: summarize(rs, slos, rate, turns), span)
    if len(span.iterations) == 1 and not unnumbered:
        per_iteration = {next(iter(span.iterations)): pooled}  # one iteration: its summary is the pooled one
    else:  # one more pass
        per_iteration = summarize_by_iteration(records, slos, rate, turns)
    iterations = mark_partial([IterationResult(iteration=i, summary=s) for i, s in sorted(per_iteration.items())])
    complete = [it for it in iterations if not it.partial]
    across = None
    if len(iterations) > 1:
        across = across_iterations([it.summary for it in complete])
        across = across.model_copy(update={"partial": [it.iteration for it in iterations if it.partial]})
    return Benchmark(
        name=name,
        profile=profile,
        summary=pooled,
        iterations=iterations,
        across_iterations=across,
    )


PARTIAL_SHARE = 0.9  # a last iteration with fewer measured requests than this share of the others' fewest


def mark_partial(iterations: list[IterationResult]) -> list[IterationResult]:
    """The iterations, the last one marked partial when it has fewer than PARTIAL_SHARE of the
    measured requests of the smallest other one (a run stopped during it: 60 of 100 requests)."""
    if len(iterations) < 2:
        return iterations
    *others, last = iterations
    fewest = min(it.summary.requests.total for it in others)
    if last.summary.requests.total < PARTIAL_SHARE * fewest:
        return [*others, last.model_copy(update={"partial": True})]
    return iterations


@dataclass(frozen=True)
class StoredRecords:
    """Records in requests.jsonl (one load point's, or all), streamed afresh on every iteration over them.

    A re-iterable for what reads records in one or several passes (summaries, diagnosis):
    memory holds one record at a time (chunk times compact), however long the run was.
    """

    path: Path
    benchmark: int | None = None  # only this load point's; None: every record
    offset: int = 0  # where to start reading (a point's first record)
    epoch_offset_ns: int = 0

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter_records(self.path, self.benchmark, self.offset, self.epoch_offset_ns, compact=True)


def load_run_file(run_file: Path) -> RunResult:
    """run.json alone, checked: valid JSON of the schema this tokspeed reads."""
    try:
        data = orjson.loads(run_file.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ResultsError(f"{run_file} is not valid JSON: {exc}") from exc
    if data.get("schema") != SCHEMA:
        raise ResultsError(
            f"{run_file} has schema {data.get('schema')!r}; this tokspeed reads {SCHEMA}",
            hint="upgrade tokspeed to read newer results",
        )
    return RunResult.model_validate(data)


def load_run(directory: Path, with_records: bool = True) -> tuple[RunResult, list[RequestRecord]]:
    """Read a results directory. Without run.json, rebuild a result from requests.jsonl alone.

    `with_records=False` leaves requests.jsonl unread (the records come back empty) when run.json
    is complete: what reads only the summaries then needs no memory for the requests. A run
    that never finished, or one without run.json, is rebuilt from its records either way.
    """
    if not directory.is_dir():
        raise ResultsError(f"{directory} is not a directory", hint="pass the --out directory of a run")
    run_file, req_file = directory / RUN_FILE, directory / REQUESTS_FILE
    if not with_records and run_file.exists():
        saved = load_run_file(run_file)
        if saved.status != "running" and (saved.status != "failed" or saved.benchmarks):
            return saved, []
    skipped: list[str] = []
    records = read_records(req_file, compact=True, skipped=skipped) if req_file.exists() else []
    if run_file.exists():
        result = load_run_file(run_file)
        if result.status == "running" and records:
            result = _rebuilt_from_records(result, records, torn=bool(skipped))
            result = _with_rebuilt_telemetry(result, directory)
        elif result.status == "failed" and any(r.benchmark >= len(result.benchmarks) for r in records):
            result = _rebuilt_from_records(result, records, why="the run failed before it could save their summary")
        if skipped:
            result = result.model_copy(update={"warnings": [*result.warnings, *skipped]})
        return result, records
    if not records:
        raise ResultsError(f"{directory} holds neither {RUN_FILE} nor any request in {REQUESTS_FILE}")
    result = RunResult(
        status="interrupted",
        started_at="unknown",
        benchmarks=missing_benchmarks([], records, [], {"kind": "unknown"}),
        warnings=[f"{RUN_FILE} was missing: summary rebuilt from {REQUESTS_FILE}; config and environment unknown",
                  *skipped],
    )
    return result, records


def _with_rebuilt_telemetry(result: RunResult, directory: Path) -> RunResult:
    """A killed run's telemetry summary, from telemetry.jsonl, when the run never wrote one."""
    from tokspeed.telemetry.rebuild import rebuild_telemetry
    from tokspeed.telemetry.schema import TELEMETRY_FILE

    path = directory / TELEMETRY_FILE
    if result.telemetry is not None or not path.exists():
        return result
    output = sum(b.summary.tokens.output_total or 0 for b in result.benchmarks)
    requests = sum(b.summary.requests.total for b in result.benchmarks)
    return result.model_copy(update={"telemetry": rebuild_telemetry(path, output or None, requests or None)})


def _rebuilt_from_records(result: RunResult, records: list[RequestRecord], torn: bool = False,
                          why: str | None = None) -> RunResult:
    """A run whose process died before writing its summary (run.json still says "running"), or that
    failed before it could (`why`: a full disk); its status is kept then."""
    slos = [parse_slo(s) for s in result.config.get("slo") or []]
    profile = {"kind": result.config.get("profile", "unknown")}
    if profile["kind"] == "rate":
        profile["rate"] = result.config.get("rate")
    rebuilt = missing_benchmarks(result.benchmarks, records, slos, profile)
    if why is not None:
        note = f"{RUN_FILE} holds no summary of the requests in {REQUESTS_FILE} ({why}): summary rebuilt from them"
        return result.model_copy(
            update={"benchmarks": [*result.benchmarks, *rebuilt], "warnings": [*result.warnings, note]}
        )
    note = (
        f"{RUN_FILE} says the run never finished (the process was killed"
        + (", or its disk filled" if torn else "") + "?): "
        f"summary rebuilt from the {len(records)} requests in {REQUESTS_FILE}"
        + (f" ({len(rebuilt)} unfinished load points)" if len(rebuilt) > 1 else "")
    )
    return result.model_copy(
        update={"status": "interrupted", "benchmarks": [*result.benchmarks, *rebuilt], "warnings": [*result.warnings, note]}
    )


def missing_benchmarks(
    saved: list[Benchmark], records: list[RequestRecord], slos: list[SLO], profile: dict[str, Any]
) -> list[Benchmark]:
    """Summaries for the load points whose records are on disk but whose summary is not (by `benchmark`)."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.benchmark >= len(saved):
            groups.setdefault(r.benchmark, []).append(r)
    name = "rebuilt" if profile.get("kind", "unknown") == "unknown" else str(profile["kind"])
    return [
        build_benchmark(name if len(groups) == 1 else f"point {i + 1} (rebuilt)", profile, recs, slos)
        for i, recs in sorted(groups.items())
    ]
