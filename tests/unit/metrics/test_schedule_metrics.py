"""Open-loop schedule metrics: realised rates, gap CVs, lag, and TTFT/E2E counted from the scheduled time."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tokspeed.metrics import (
    Summary,
    e2e_from_scheduled_ns,
    gap_stats,
    summarize,
    summarize_by_iteration,
    ttft_from_scheduled_ns,
)
from tokspeed.records import RequestRecord, Status, TokenSource
from tokspeed.results import build_benchmark

MS = 1_000_000
US = 1_000


def rec(scheduled: int, lag: int, ttft: int = 2 * MS, e2e: int = 10 * MS, **kw: Any) -> RequestRecord:
    """A completed request due at `scheduled`, sent `lag` later; first token `ttft` and end `e2e` after sending."""
    sent = scheduled + lag
    fields: dict[str, Any] = {
        "index": 0, "iteration": 1, "warmup": False, "scheduled_ns": scheduled, "sent_ns": sent,
        "first_token_ns": sent + ttft, "first_content_ns": sent + ttft, "chunk_ns": [sent + ttft, sent + e2e],
        "end_ns": sent + e2e, "output_tokens": 2, "output_tokens_source": TokenSource.USAGE,
    }  # fmt: skip
    fields.update(kw)
    return RequestRecord(**fields)


# constant 100 req/s: due at 0, 10, 20, 30 ms; sent 0.1, 0.2, 5 and 0.1 ms late
LAGS = [100 * US, 200 * US, 5 * MS, 100 * US]
RECORDS = [rec(i * 10 * MS, lag) for i, lag in enumerate(LAGS)]


def test_per_request_latency_from_the_scheduled_time() -> None:
    r = rec(scheduled=1_000, lag=300, ttft=2_000, e2e=9_000)
    assert ttft_from_scheduled_ns(r) == 300 + 2_000
    assert e2e_from_scheduled_ns(r) == 300 + 9_000
    no_token = rec(0, 300, first_token_ns=None, first_content_ns=None)
    assert ttft_from_scheduled_ns(no_token) is None
    assert e2e_from_scheduled_ns(rec(0, 300, status=Status.ERROR)) is None


def test_open_loop_summary_has_lag_and_latency_from_schedule() -> None:
    s = summarize(RECORDS, target_rate=100.0)
    assert s.lateness_ms.count == 4 and s.lateness_ms.max == 5.0 and s.lateness_ms.min == 0.1
    assert s.ttft_ms.mean == 2.0  # from sending: the client's lag is hidden here ...
    assert s.ttft_from_scheduled_ms.mean == pytest.approx(2.0 + 5.4 / 4)  # ... and counted here
    assert s.ttft_from_scheduled_ms.max == pytest.approx(7.0)
    assert s.e2e_from_scheduled_ms.min == pytest.approx(10.1) and s.e2e_from_scheduled_ms.max == pytest.approx(15.0)


def test_schedule_rates_and_gap_cv() -> None:
    sc = summarize(RECORDS, target_rate=100.0).schedule
    assert sc is not None
    assert sc.target_requests_per_s == 100.0
    assert sc.offered_requests_per_s == pytest.approx(100.0)  # 3 gaps over 30 ms
    assert sc.scheduled_gap_cv == 0.0
    # sent at 0.1, 10.2, 25.0, 30.1 ms: gaps 10.1, 14.8, 5.1 ms (30 ms in all)
    gaps = [10.1, 14.8, 5.1]
    mean = sum(gaps) / 3
    stdev = math.sqrt(sum((g - mean) ** 2 for g in gaps) / 2)
    assert sc.sent_requests_per_s == pytest.approx(100.0)
    assert sc.sent_gap_cv == pytest.approx(stdev / mean)


def test_realised_rate_of_a_drawn_schedule_is_reported_not_the_target() -> None:
    """A schedule that happened to come out slow says so: offered 2 req/s beside a target of 2.5."""
    records = [rec(t * MS, 0) for t in (0, 400, 1100, 1500)]  # 3 gaps over 1.5 s
    sc = summarize(records, target_rate=2.5).schedule
    assert sc is not None and sc.target_requests_per_s == 2.5 and sc.offered_requests_per_s == pytest.approx(2.0)
    flat = summarize(records, target_rate=2.5).flat()
    assert flat["offered_requests_per_s"] == pytest.approx(2.0) and flat["sent_requests_per_s"] == pytest.approx(2.0)


def test_unsent_requests_count_as_offered_not_as_sent() -> None:
    never_sent = RequestRecord(index=9, iteration=1, warmup=False, scheduled_ns=40 * MS, status=Status.INCOMPLETE)
    sc = summarize([*RECORDS, never_sent], target_rate=100.0).schedule
    assert sc is not None
    assert sc.offered_requests_per_s == pytest.approx(100.0)  # 4 gaps over 40 ms
    assert sc.sent_requests_per_s == pytest.approx(100.0)  # 3 gaps over 30 ms: the unsent one is not in it


def test_each_iteration_restarts_its_schedule() -> None:
    """Gaps are taken within an iteration: iteration 2 starting again at 0 adds no negative gap."""
    first = [rec(i * 10 * MS, 0, iteration=1) for i in range(3)]
    second = [rec(i * 20 * MS, 0, iteration=2) for i in range(3)]
    warm = [rec(i * MS, 0, iteration=0, warmup=True) for i in range(5)]
    sc = summarize([*warm, *first, *second], target_rate=70.0).schedule
    assert sc is not None
    assert sc.offered_requests_per_s == pytest.approx(4 / 0.060)  # gaps 10, 10, 20, 20 ms
    by = summarize_by_iteration([*first, *second], target_rate=70.0)
    assert by[1].schedule is not None and by[1].schedule.offered_requests_per_s == pytest.approx(100.0)
    assert by[2].schedule is not None and by[2].schedule.offered_requests_per_s == pytest.approx(50.0)


def test_closed_loop_leaves_schedule_metrics_empty() -> None:
    s = summarize(RECORDS)  # no target rate: a closed loop
    assert s.schedule is None
    assert s.ttft_from_scheduled_ms.count == 0 and s.ttft_from_scheduled_ms.p99 is None
    assert s.e2e_from_scheduled_ms.count == 0
    assert s.lateness_ms.count == 4  # lateness (client overhead) is still reported
    flat = s.flat()
    assert flat["offered_requests_per_s"] is None and flat["ttft_from_scheduled_p99_ms"] is None


def test_build_benchmark_passes_the_rate_of_an_open_loop_profile() -> None:
    open_loop = build_benchmark("rate 100/s", {"kind": "rate", "rate": 100.0, "arrival": "constant"}, RECORDS, [])
    closed = build_benchmark("concurrency 4", {"kind": "concurrency", "concurrency": 4}, RECORDS, [])
    assert open_loop.summary.schedule is not None and open_loop.iterations[0].summary.schedule is not None
    assert open_loop.summary.ttft_from_scheduled_ms.count == 4
    assert closed.summary.schedule is None and closed.summary.ttft_from_scheduled_ms.count == 0


def test_gap_stats_edge_cases() -> None:
    assert gap_stats([]) == (None, None)
    assert gap_stats([[5]]) == (None, None)  # no gap
    assert gap_stats([[7, 7, 7]]) == (None, None)  # gaps sum to zero
    assert gap_stats([[0, 10**9]]) == (1.0, 0.0)
    assert gap_stats([[2 * 10**9, 0, 10**9]]) == (1.0, 0.0)  # sorted first


def test_summary_round_trips_with_schedule() -> None:
    s = summarize(RECORDS, target_rate=100.0)
    assert Summary.model_validate(s.model_dump(mode="json")) == s
    old = {k: v for k, v in s.model_dump(mode="json").items() if k not in ("schedule", "ttft_from_scheduled_ms")}
    assert Summary.model_validate(old).schedule is None  # a run.json written before these fields still loads


def _text(renderable: Any) -> str:
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


def test_console_shows_schedule_rows_and_line_for_open_loop_only() -> None:
    from tokspeed.reports.summary_text import metric_table, totals_lines
    from tokspeed.reports.sweep_text import sweep_table
    from tokspeed.results import RunResult

    open_loop = build_benchmark("rate 100/s constant", {"kind": "rate", "rate": 100.0}, RECORDS, [])
    closed = build_benchmark("concurrency 4", {"kind": "concurrency", "concurrency": 4}, RECORDS, [])
    table = _text(metric_table(open_loop))
    assert "TTFT from schedule" in table and "E2E from schedule" in table and "Send lateness" in table
    assert "from schedule" not in _text(metric_table(closed))
    line = next(x for x in totals_lines(open_loop) if x.startswith("Schedule"))
    assert "target 100.00 req/s · offered 100.00 req/s" in line and "gap CV 0.000 scheduled" in line
    assert not any(x.startswith("Schedule") for x in totals_lines(closed))
    both = _text(sweep_table(RunResult(status="complete", started_at="now", benchmarks=[open_loop, closed])))
    assert "offered/s" in both and "100.0" in both
    assert "offered/s" not in _text(sweep_table(RunResult(status="complete", started_at="now", benchmarks=[closed])))


def test_slos_from_the_schedule_parse_judge_and_are_refused_for_closed_loops() -> None:
    import pytest

    from tokspeed.config import RunConfig
    from tokspeed.errors import ConfigError
    from tokspeed.metrics import summarize
    from tokspeed.metrics.slo import parse_slo
    from tokspeed.records import RequestRecord

    slo = parse_slo("ttft_from_scheduled_p99_ms<=50")
    assert (slo.metric, slo.stat, slo.unit) == ("ttft_from_scheduled", "p99", "ms")
    assert parse_slo("e2e_from_scheduled_ms<=100").kind == "per_request"
    assert parse_slo("ttft_p99_ms<=50").metric == "ttft"  # the shorter name still means what it did
    ms = 1_000_000
    # two requests sent 40 ms late (client-side waiting), TTFT 20 ms each: 60 ms from the schedule
    records = [
        RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=i * 100 * ms, sent_ns=i * 100 * ms + 40 * ms,
                      first_token_ns=i * 100 * ms + 60 * ms, first_content_ns=i * 100 * ms + 60 * ms,
                      end_ns=i * 100 * ms + 90 * ms, chunk_ns=[i * 100 * ms + 60 * ms, i * 100 * ms + 90 * ms],
                      output_tokens=2)
        for i in range(2)
    ]
    s = summarize(records, [parse_slo("ttft_p99_ms<=50"), parse_slo("ttft_from_scheduled_p99_ms<=50"),
                            parse_slo("e2e_from_scheduled_ms<=100")], target_rate=10.0)
    assert s.slo is not None and [v.met for v in s.slo] == [True, False, True]
    assert s.goodput is not None and s.goodput.requests_per_s is not None
    with pytest.raises((ValueError, ConfigError), match="only an open-loop run has"):
        RunConfig(profile="concurrency", concurrency=4, slo=["ttft_from_scheduled_p99_ms<=500"])
    assert RunConfig(profile="rate", rate=5.0, slo=["ttft_from_scheduled_p99_ms<=500"]).slos[0].stat == "p99"
