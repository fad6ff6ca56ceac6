"""A saved run as CSV: one row per request, or one row per benchmark.

Pure: records or a result in, CSV text out. Per-request rows are flat and in
human units (ms, tokens, Unix seconds); empty cells mean "does not apply".
Warm-up requests are included and marked, so a spreadsheet can filter them.
Per-benchmark rows use the `Summary.flat()` names as columns.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

from tokspeed.metrics import request as rq
from tokspeed.metrics.schema import Summary
from tokspeed.records import RequestRecord
from tokspeed.results import RunResult
from tokspeed.results.records import records_by_benchmark

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value / NS_PER_MS, 6)


def _itl_stat(stat: Callable[[Any], Any]) -> Callable[[RequestRecord], float | None]:
    def value(r: RequestRecord) -> float | None:
        itl = rq.itl_values_ns(r)
        return round(float(stat(itl)) / NS_PER_MS, 6) if itl.size else None

    return value


# column -> value of one record
REQUEST_COLUMNS: dict[str, Callable[[RequestRecord], Any]] = {
    "index": lambda r: r.index,
    "iteration": lambda r: r.iteration,
    "warmup": lambda r: r.warmup,
    "status": lambda r: r.status.value,
    "sent_unix_s": lambda r: round(r.sent_ns / NS_PER_S, 6) if rq.was_sent(r) else None,
    "lateness_ms": lambda r: _ms(rq.lateness_ns(r)),
    "ttft_ms": lambda r: _ms(rq.ttft_ns(r)),
    "ttfa_ms": lambda r: _ms(rq.ttfa_ns(r)),
    "tpot_ms": lambda r: _ms(rq.tpot_ns(r)),
    "itl_mean_ms": _itl_stat(lambda v: v.mean()),
    "itl_max_ms": _itl_stat(lambda v: v.max()),
    "e2e_ms": lambda r: _ms(rq.e2e_ns(r)),
    "decode_tokens_per_s": lambda r: None if (v := rq.decode_tokens_per_s(r)) is None else round(v, 3),
    "input_tokens": lambda r: r.input_tokens,
    "output_tokens": lambda r: r.output_tokens,
    "max_tokens": lambda r: r.max_tokens,
    "chunks": lambda r: len(r.chunk_ns),
    "finish_reason": lambda r: r.finish_reason,
    "error_kind": lambda r: None if r.error_kind is None else r.error_kind.value,
    "http_status": lambda r: r.http_status,
    "error": lambda r: r.error,
    "response_id": lambda r: r.response_id,
    "stage": lambda r: r.stage,  # scheduled loads: the stage the request was scheduled in
    "workload_class": lambda r: r.workload_class,  # mixed classes
    "model": lambda r: r.model,  # a model mix: the model the request asked for
}


def requests_csv(result: RunResult, records: Sequence[RequestRecord]) -> str:
    """One row per record (file order), with the benchmark it belongs to when that is known."""
    groups = records_by_benchmark(result.benchmarks, list(records))
    names = [b.name for b in result.benchmarks]
    rows: list[list[Any]] = []
    if groups is None:
        rows = [["", *_request_row(r)] for r in records]
    else:
        rows = [[name, *_request_row(r)] for name, group in zip(names, groups) for r in group]
    return _csv(["benchmark", *REQUEST_COLUMNS], rows)


def _request_row(r: RequestRecord) -> list[Any]:
    return [column(r) for column in REQUEST_COLUMNS.values()]


def summary_csv(result: RunResult) -> str:
    """One row per benchmark: its name, profile kind, then every `Summary.flat()` value (the
    standard names, then any --percentiles beyond them, e.g. `ttft_p75_ms`)."""
    names = list(Summary().flat())
    for b in result.benchmarks:
        names += [n for n in b.summary.flat() if n not in names]
    rows = []
    for b in result.benchmarks:
        flat = b.summary.flat()
        rows.append([b.name, b.profile.get("kind", ""), *(_count(n, flat.get(n)) for n in names)])
    return _csv(["benchmark", "profile", *names], rows)


def _count(name: str, value: float | None) -> float | int | None:
    """Counts as integers (`ttft_count` 12, not 12.0)."""
    return int(value) if value is not None and name.endswith("_count") else value


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else _cell(v) for v in row])
    return buf.getvalue()


def _cell(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, 6))
    return v
