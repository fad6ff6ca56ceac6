"""summarize(): counts, window, throughput, distributions, goodput, SLO verdicts, flat names."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tokspeed.metrics import (
    STAT_NAMES,
    Summary,
    parse_slo,
    summarize,
    summarize_by_iteration,
)
from tokspeed.metrics.slo import PER_REQUEST, RUN_LEVEL, STATS
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource

MS = 1_000_000
S = 1_000_000_000


def ok(sent: int, ttft: int, gaps: list[int], out: int | None = None, **kw: Any) -> RequestRecord:
    """A completed request sent at `sent`; first token after `ttft`, then chunks `gaps` apart.

    It ends at its last chunk; output_tokens defaults to one per chunk.
    """
    chunk_ns = [sent + ttft]
    for g in gaps:
        chunk_ns.append(chunk_ns[-1] + g)
    fields: dict[str, Any] = dict(
        index=0,
        iteration=1,
        warmup=False,
        scheduled_ns=sent,
        sent_ns=sent,
        first_token_ns=sent + ttft,
        first_content_ns=sent + ttft,
        chunk_ns=chunk_ns,
        end_ns=chunk_ns[-1],
        output_tokens=len(chunk_ns) if out is None else out,
        output_tokens_source=TokenSource.USAGE,
        input_tokens=10,
        input_tokens_source=TokenSource.TOKENIZER,
    )
    fields.update(kw)
    return RequestRecord(**fields)


def failed(sent: int, end: int, kind: ErrorKind, http: int | None = None) -> RequestRecord:
    return RequestRecord(
        index=0,
        iteration=1,
        warmup=False,
        scheduled_ns=sent,
        sent_ns=sent,
        end_ns=end,
        status=Status.ERROR,
        error_kind=kind,
        http_status=http,
    )


def incomplete(scheduled: int, sent: int = 0) -> RequestRecord:
    return RequestRecord(
        index=0, iteration=1, warmup=False, scheduled_ns=scheduled, sent_ns=sent,
        status=Status.INCOMPLETE,
    )  # fmt: skip


def test_empty_run() -> None:
    s = summarize([])
    assert s.requests.total == 0
    assert s.error_rate is None
    assert s.window_s is None
    assert s.ttft_ms.count == 0 and s.ttft_ms.mean is None
    assert s.throughput.requests_per_s is None
    assert s.goodput is None and s.slo == []


def test_counts_errors_and_error_rate() -> None:
    records = [
        ok(0, 10 * MS, [MS]),
        ok(0, 10 * MS, [MS]),
        ok(0, 10 * MS, [MS]),
        failed(0, 5 * MS, ErrorKind.HTTP, 503),
        failed(0, 5 * MS, ErrorKind.TIMEOUT),
        incomplete(scheduled=5, sent=10),
    ]
    s = summarize(records)
    assert s.requests.model_dump() == {"completed": 3, "errored": 2, "incomplete": 1, "total": 6, "cancelled": 0}
    assert s.error_rate == 2 / 5
    assert s.errors == {"http_503": 1, "timeout": 1}


def test_cancelled_requests_are_counted_apart_not_errors_not_latencies() -> None:
    """--cancel-share: a request the client aborted is its own count; no error, no latency, in the window."""
    cancelled = ok(0, 10 * MS, [MS, MS], status=Status.CANCELLED, end_ns=40 * MS, error="cancelled by the client")
    records = [ok(0, 10 * MS, [MS]), ok(0, 20 * MS, [MS]), failed(0, 5 * MS, ErrorKind.HTTP, 500), cancelled]
    s = summarize(records)
    assert s.requests.model_dump() == {"completed": 2, "errored": 1, "incomplete": 0, "total": 4, "cancelled": 1}
    assert s.error_rate == 1 / 3  # errored / (completed + errored): the cancelled one is in neither
    assert s.errors == {"http_500": 1}
    assert s.ttft_ms.count == 2 and s.ttft_ms.max == 20 and s.e2e_ms.count == 2 and s.itl_ms.count == 2
    assert s.output_tokens.count == 2
    assert s.window_s == 40 * MS / S  # its end (40 ms) is the window's last
    assert s.throughput.requests_per_s == 2 / 0.040


def test_warmup_is_excluded() -> None:
    warm = ok(0, 900 * MS, [MS], warmup=True, iteration=0)
    s = summarize([warm, ok(0, 10 * MS, [MS])])
    assert s.requests.total == 1
    assert s.ttft_ms.max == 10.0


def test_window_and_throughput_exact() -> None:
    a = ok(0, 500 * MS, [500 * MS, 1000 * MS], out=10, input_tokens=5)  # ends at 2 s
    b = ok(1 * S, 1000 * MS, [1000 * MS], out=20, input_tokens=7)  # ends at 3 s
    late_error = failed(2 * S, 4 * S, ErrorKind.STREAM)  # stretches the window to 4 s
    s = summarize([a, b, late_error])
    assert s.window_s == 4.0
    assert s.throughput.requests_per_s == 2 / 4
    assert s.throughput.output_tokens_per_s == 30 / 4
    assert s.throughput.input_tokens_per_s == 12 / 4
    assert s.throughput.total_tokens_per_s == 42 / 4
    assert s.tokens.model_dump() == {
        "input_total": 12,
        "output_total": 30,
        "input_sources": {"tokenizer": 2},
        "output_sources": {"usage": 2},
    }


def test_distributions_exact() -> None:
    a = ok(0, 1 * MS, [2 * MS, 4 * MS], out=3)  # ITL 2 ms, 4 ms; e2e 7 ms; tpot 3 ms
    b = ok(0, 3 * MS, [2 * MS], out=5, chunk_tokens=[1, 4])  # ITL 0.5 ms x4; e2e 5 ms; tpot 0.5
    s = summarize([a, b])
    assert (s.ttft_ms.min, s.ttft_ms.mean, s.ttft_ms.max) == (1.0, 2.0, 3.0)
    assert s.ttft_ms.stdev == pytest.approx(math.sqrt(2))
    assert s.itl_ms.count == 6
    assert (s.itl_ms.min, s.itl_ms.max, s.itl_ms.p50) == (0.5, 4.0, 0.5)
    assert s.itl_ms.mean == (2 + 4 + 4 * 0.5) / 6
    assert s.chunk_gap_ms.count == 3 and s.chunk_gap_ms.mean == 8 / 3
    assert (s.tpot_ms.min, s.tpot_ms.max) == (0.5, 3.0)
    assert (s.e2e_ms.min, s.e2e_ms.max) == (5.0, 7.0)
    assert s.decode_tokens_per_s.min == 2 / 0.006  # (N − 1) / (E2E − TTFT) = 1 / TPOT
    assert s.decode_tokens_per_s.max == 4 / 0.002
    assert (s.output_tokens.mean, s.input_tokens.mean) == (4.0, 10.0)


def test_latency_distributions_use_completed_requests_only() -> None:
    stalled = ok(0, 900 * MS, [MS], status=Status.ERROR, error_kind=ErrorKind.STREAM)
    s = summarize([ok(0, 10 * MS, [MS]), stalled])
    assert s.ttft_ms.count == 1 and s.ttft_ms.max == 10.0
    assert s.itl_ms.count == 1


def test_reasoning_first_request() -> None:
    r = ok(0, 10 * MS, [MS, MS], first_content_ns=12 * MS)
    s = summarize([r])
    assert s.ttft_ms.mean == 10.0
    assert s.ttfa_ms.mean == 12.0


def test_lateness_counts_every_sent_request() -> None:
    records = [
        ok(100 * MS, MS, [MS], scheduled_ns=99 * MS),  # 1 ms late
        failed(0, MS, ErrorKind.CONNECT),  # on time
        incomplete(scheduled=50 * MS, sent=53 * MS),  # sent, 3 ms late
        incomplete(scheduled=60 * MS),  # never sent
    ]
    s = summarize(records)
    assert s.lateness_ms.count == 3
    assert (s.lateness_ms.min, s.lateness_ms.max) == (0.0, 3.0)


def test_goodput_with_given_and_implied_thresholds() -> None:
    records = [
        ok(0, 100 * MS, [10 * MS, 10 * MS]),  # good
        ok(0, 300 * MS, [30 * MS, 30 * MS]),  # tpot 30 ms: fails tpot_ms<=20
        ok(0, 600 * MS, [10 * MS]),  # ttft 600: fails the implied ttft_ms<=500
        ok(0, 200 * MS, [], out=1),  # one token: no tpot, does not fail it -> good
        ok(0, 150 * MS, [5 * MS, 50 * MS]),  # tpot 27.5, max ITL 50 -> fails both
        failed(0, 1000 * MS, ErrorKind.TIMEOUT),  # sets the window to 1 s
    ]
    slos = [parse_slo("ttft_p99_ms<=500"), parse_slo("tpot_ms<=20"), parse_slo("itl_ms<=40")]
    s = summarize(records, slos)
    assert s.window_s == 1.0
    assert s.goodput is not None
    assert s.goodput.slos == ["ttft_ms<=500", "tpot_ms<=20", "itl_ms<=40"]
    assert s.goodput.good == 2
    assert s.goodput.fraction == 2 / 5
    assert s.goodput.requests_per_s == 2.0
    assert s.flat()["goodput_requests_per_s"] == 2.0


def test_goodput_deduplicates_thresholds_and_needs_per_request_slos() -> None:
    slos = [parse_slo("ttft_p99_ms<=500"), parse_slo("ttft_ms<=500")]
    s = summarize([ok(0, MS, [MS])], slos)
    assert s.goodput is not None and s.goodput.slos == ["ttft_ms<=500"]
    assert summarize([ok(0, MS, [MS])], [parse_slo("error_rate<=0.1")]).goodput is None


def test_slo_verdicts() -> None:
    records = [ok(0, 100 * MS, [MS, MS]), ok(0, 700 * MS, [MS, MS]), failed(0, MS, ErrorKind.OTHER)]
    slos = [
        parse_slo("ttft_p50_ms<=500"),
        parse_slo("ttft_ms<=500"),
        parse_slo("error_rate<=0.5"),
        parse_slo("decode_p50_tokens_per_s>=1"),
    ]
    s = summarize(records, slos)
    verdicts = [(v.slo, v.kind, v.observed, v.met) for v in s.slo]
    assert verdicts == [
        ("ttft_p50_ms<=500", "percentile", 400.0, True),
        ("ttft_ms<=500", "per_request", 0.5, False),
        ("error_rate<=0.5", "run", 1 / 3, True),
        ("decode_p50_tokens_per_s>=1", "percentile", 1000.0, True),  # 2 tokens after the first in 2 ms
    ]


def test_per_request_slo_without_completed_requests() -> None:
    s = summarize([failed(0, MS, ErrorKind.OTHER)], [parse_slo("ttft_ms<=500")])
    assert (s.slo[0].observed, s.slo[0].met) == (None, False)
    assert s.goodput is not None and s.goodput.fraction is None


def test_every_slo_name_resolves_in_flat() -> None:
    flat = Summary().flat()
    for metric, unit in PER_REQUEST.items():
        for stat in STATS:
            assert f"{metric}_{stat}_{unit}" in flat
    for name in RUN_LEVEL:
        assert name in flat
    for name in ("ttft_p99_ms", "itl_mean_ms", "decode_p50_tokens_per_s", "e2e_max_ms"):
        assert parse_slo(f"{name}<=1").name in flat
    assert {"input_tokens_mean", "output_tokens_p50", "ttft_count", "goodput_requests_per_s"} <= set(flat)


def test_flat_values() -> None:
    s = summarize([ok(0, 2 * MS, [MS])])
    flat = s.flat()
    assert flat["ttft_p99_ms"] == 2.0
    assert flat["ttft_count"] == 1.0
    assert flat["output_tokens_p50"] == 2.0
    assert flat["error_rate"] == 0.0
    assert flat["requests_per_s"] == 1 / 0.003


def test_json_shape_is_the_contract() -> None:
    data = summarize([ok(0, MS, [MS])], [parse_slo("ttft_ms<=5")]).model_dump(mode="json")
    assert set(data["requests"]) == {"completed", "errored", "incomplete", "total", "cancelled"}
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "input_tokens", "output_tokens"):
        assert list(data[key]) == list(STAT_NAMES)
    assert set(data["throughput"]) >= {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"}
    assert set(data["goodput"]) == {"good", "requests_per_s", "fraction", "slos"}
    assert Summary.model_validate(data) == summarize([ok(0, MS, [MS])], [parse_slo("ttft_ms<=5")])


def test_summarize_by_iteration() -> None:
    records = [
        ok(0, 5 * MS, [MS], iteration=0, warmup=True),
        ok(0, 1 * MS, [MS], iteration=1),
        ok(0, 2 * MS, [MS], iteration=2),
        ok(0, 3 * MS, [MS], iteration=2),
    ]
    by = summarize_by_iteration(records)
    assert list(by) == [1, 2]
    assert by[1].ttft_ms.mean == 1.0
    assert by[2].requests.completed == 2 and by[2].ttft_ms.mean == 2.5
