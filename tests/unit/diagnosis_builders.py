"""Hand-made records, load points and results for the diagnosis rule tests (times in exact integer ns)."""

from __future__ import annotations

from typing import Any

from tokspeed.diagnosis.context import PointData
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource
from tokspeed.results import Benchmark, RunResult, build_benchmark

MS = 1_000_000
T0 = 1_000_000_000_000


def rec(
    i: int,
    *,
    ttft_ms: float = 10.0,
    itl_ms: float = 2.0,
    tokens: int = 16,
    max_tokens: int | None = 16,
    finish: str | None = "length",
    warmup: bool = False,
    iteration: int = 1,
    start_ms: float | None = None,
    lateness_ms: float = 0.0,
    input_tokens: int = 100,
    input_source: TokenSource = TokenSource.USAGE,
    source: TokenSource = TokenSource.USAGE,
    anomalies: list[str] | None = None,
    benchmark: int = 0,
) -> RequestRecord:
    """A completed streamed request: TTFT `ttft_ms`, then `tokens` one-token chunks `itl_ms` apart."""
    sent = T0 + int((start_ms if start_ms is not None else i * 1000.0) * MS)
    first = sent + int(ttft_ms * MS)
    chunks = [first + k * int(itl_ms * MS) for k in range(tokens)]
    return RequestRecord(
        index=i, iteration=0 if warmup else iteration, warmup=warmup,
        scheduled_ns=sent - int(lateness_ms * MS), sent_ns=sent,
        first_token_ns=first, first_content_ns=first, end_ns=chunks[-1] if chunks else first,
        chunk_ns=chunks, input_tokens=input_tokens, input_tokens_source=input_source,
        output_tokens=tokens, output_tokens_source=source, max_tokens=max_tokens,
        finish_reason=finish, anomalies=anomalies, benchmark=benchmark,
    )  # fmt: skip


def failed(
    i: int, kind: ErrorKind, error: str, http_status: int | None = None, *, benchmark: int = 0
) -> RequestRecord:
    sent = T0 + i * 1000 * MS
    return RequestRecord(
        index=i, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent, end_ns=sent + 5 * MS,
        status=Status.ERROR, error_kind=kind, error=error, http_status=http_status, benchmark=benchmark,
    )  # fmt: skip


def bench(records: list[RequestRecord], profile: dict[str, Any] | None = None, name: str = "point") -> Benchmark:
    return build_benchmark(name, profile or {"kind": "concurrency", "concurrency": 4}, records, [])


def point(records: list[RequestRecord], config: dict[str, Any] | None = None, profile: dict[str, Any] | None = None,
          index: int = 0) -> PointData:
    return PointData(index=index, bench=bench(records, profile), records=records, config=config or {})


def result(*benchmarks: Benchmark, **fields: Any) -> RunResult:
    return RunResult(started_at="2025-01-01T00:00:00+00:00", benchmarks=list(benchmarks), **fields)


def many(n: int, **kw: Any) -> list[RequestRecord]:
    return [rec(i, **kw) for i in range(n)]
