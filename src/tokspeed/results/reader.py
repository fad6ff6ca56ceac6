"""Read a results directory back: run.json checked against its schema, requests.jsonl streamed.

The runner keeps no records in memory: it reads each load point's records back
(`read_records(path, benchmark=i)`) to summarise that point. `load_run` reads a
directory back; when `run.json` is missing, or still says "running" (the process
was killed), it rebuilds the summaries from `requests.jsonl`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import ResultsError
from tokspeed.metrics.slo import SLO, parse_slo
from tokspeed.records import RequestRecord
from tokspeed.results.benchmark import build_benchmark
from tokspeed.results.run_json import REQUESTS_FILE, RUN_FILE, SCHEMA, Benchmark, RunResult


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
