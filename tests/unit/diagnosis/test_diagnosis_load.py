"""The rules issue 24 added: each provoked by a hand-made run, each silent on the clean one beside it."""

from __future__ import annotations

from typing import Any

from diagnosis_builders import bench, many, point, rec, result
from tokspeed.diagnosis.load import itl_load_growth, kv_cache_pressure, server_bound, throughput_knee, ttft_client_gap
from tokspeed.diagnosis.rules import diagnose
from tokspeed.diagnosis.tail import ttft_tail
from tokspeed.diagnosis.thresholds import DEFAULT
from tokspeed.telemetry.schema import SeriesStats, ServerSummary, TelemetrySummary

RATE = {"kind": "rate", "rate": 20.0, "arrival": "poisson", "burstiness": None, "max_concurrency": None}


def with_server_timing(records: list[Any], server_ttft_ms: float) -> list[Any]:
    for r in records:
        r.server_timing = {"queue_ms": 0.0, "prefill_ms": server_ttft_ms, "decode_ms": 30.0}
    return records


# ttft_client_gap ---------------------------------------------------------------------------------
def test_time_lost_before_the_servers_clock_starts() -> None:
    (f,) = ttft_client_gap(result(bench(with_server_timing(many(20, ttft_ms=80.0), 30.0))), DEFAULT)
    assert f.rule == "ttft_client_gap" and abs(float(f.evidence["gap_p50_ms"] or 0) - 50.0) < 1e-6
    assert "before the server's clock starts" in f.title
    assert ttft_client_gap(result(bench(with_server_timing(many(20, ttft_ms=32.0), 30.0))), DEFAULT) == []
    assert ttft_client_gap(result(bench(many(20, ttft_ms=80.0))), DEFAULT) == []  # no server timings: silent


# ttft_tail -------------------------------------------------------------------------------------
def test_bimodal_ttft() -> None:
    records = [rec(i, ttft_ms=10.0 + (i % 5) * 0.1) for i in range(70)]
    records += [rec(100 + i, ttft_ms=60.0 + (i % 5) * 0.5) for i in range(30)]
    (f,) = ttft_tail(point(records), DEFAULT)
    assert "bimodal" in f.title and f.evidence["slow_share"] == 0.3 and f.evidence["fast_max_ms"] == 10.4


def test_two_prompt_lengths_make_two_modes_honestly() -> None:
    records = [rec(i, input_tokens=100 if i % 2 else 1000, ttft_ms=5.0 + (0.01 if i % 2 else 0.1) * 500) for i in range(60)]
    assert ttft_tail(point(records), DEFAULT) == []


def test_a_long_ttft_tail() -> None:
    records = [rec(i, ttft_ms=10.0 + (i % 10) * 0.2) for i in range(196)]
    records += [rec(300 + i, ttft_ms=400.0 + i) for i in range(4)]  # 2% of requests 40× slower
    (f,) = ttft_tail(point(records), DEFAULT)
    assert "long tail" in f.title and f.evidence["outliers"] == 4


def test_a_tail_of_long_prompts_is_not_a_ttft_tail_but_stalls_beside_them_are() -> None:
    """2% of prompts 80× longer: TTFT p99 is 27× p50 and exactly what the prompt-length line predicts
    for the p99 prompt (the embedded default's mixed prompts warned so on a clean run). The same
    share of requests stalled 400 ms beside long prompts is still a tail."""
    short = [rec(i, input_tokens=50, ttft_ms=5.0 + 0.05 * 50 + (i % 10) * 0.01) for i in range(196)]
    long = [rec(300 + i, input_tokens=4000, ttft_ms=5.0 + 0.05 * 4000) for i in range(4)]
    assert ttft_tail(point(short + long), DEFAULT) == []
    prompts = [rec(i, input_tokens=50 + (i % 20) * 100, ttft_ms=5.0 + 0.05 * (50 + (i % 20) * 100)) for i in range(400)]
    stalled = [rec(1000 + i, input_tokens=50, ttft_ms=2000.0) for i in range(8)]
    (f,) = ttft_tail(point(prompts + stalled), DEFAULT)
    assert "long tail" in f.title, f.title


def test_even_ttfts_have_no_tail_or_modes() -> None:
    assert ttft_tail(point([rec(i, ttft_ms=10.0 + (i % 10) * 0.5) for i in range(200)]), DEFAULT) == []
    assert ttft_tail(point(many(10)), DEFAULT) == []


# sweeps --------------------------------------------------------------------------------------
def concurrency(c: int, ttft_ms: float, itl_ms: float, tokens: int = 16) -> Any:
    """A closed-loop point: c requests in flight, each taking ttft + tokens × itl."""
    per = ttft_ms + (tokens - 1) * itl_ms
    records = [rec(i, ttft_ms=ttft_ms, itl_ms=itl_ms, tokens=tokens, max_tokens=tokens,
                   start_ms=(i // c) * per) for i in range(20 * c)]
    return bench(records, {"kind": "concurrency", "concurrency": c})


def test_itl_growing_with_load_is_batch_saturation() -> None:
    (f,) = itl_load_growth(result(concurrency(1, 10, 5), concurrency(8, 10, 6), concurrency(32, 10, 12)), DEFAULT)
    assert f.rule == "itl_load_growth" and f.evidence["high_load"] == 32 and "batch" in f.title
    assert itl_load_growth(result(concurrency(1, 10, 5), concurrency(32, 10, 5)), DEFAULT) == []


def test_the_throughput_knee_of_a_sweep() -> None:
    # throughput 1, 4, 8 streams scale; from 8 to 32 the ITL grows 4×: throughput flat, latency 4×
    points = [concurrency(1, 10, 5), concurrency(4, 10, 5), concurrency(8, 10, 5), concurrency(32, 10, 20)]
    (f,) = throughput_knee(result(*points), DEFAULT)
    assert f.evidence["knee_load"] == 8 and f.evidence["far_load"] == 32
    assert throughput_knee(result(concurrency(1, 10, 5), concurrency(4, 10, 5), concurrency(8, 10, 5)), DEFAULT) == []


# kv_cache_pressure ----------------------------------------------------------------------------
def server_telemetry(kv: float, preemptions: float | None) -> TelemetrySummary:
    server = ServerSummary(url="http://127.0.0.1:8000/metrics", kv_cache_usage_pct=SeriesStats(mean=kv, max=kv, samples=5),
                           waiting=SeriesStats(mean=0.0, max=0.0, samples=5), preemptions=preemptions)
    return TelemetrySummary(interval_s=1.0, server=server)


def test_a_full_kv_cache_with_preemptions() -> None:
    b = bench(many(20))
    b.telemetry = server_telemetry(97.0, 12.0)
    (f,) = kv_cache_pressure(result(b), DEFAULT)
    assert f.severity == "warning" and f.evidence["preemptions"] == 12.0
    b.telemetry = server_telemetry(97.0, 0.0)  # full but nothing evicted: silent
    assert kv_cache_pressure(result(b), DEFAULT) == []
    b.telemetry = server_telemetry(60.0, 5.0)
    assert kv_cache_pressure(result(b), DEFAULT) == []


# server_bound ---------------------------------------------------------------------------------
def open_loop(done: float, arriving: float, late_ms: float) -> Any:
    b = bench(many(120, lateness_ms=late_ms), RATE)
    throughput = b.summary.throughput.model_copy(update={"sustained_requests_per_s": done,
                                                          "window_arrivals_per_s": arriving})
    b.summary = b.summary.model_copy(update={"throughput": throughput})
    return b


def test_the_server_is_the_bottleneck_when_the_client_kept_its_schedule() -> None:
    (f,) = server_bound(result(open_loop(12.0, 20.0, 1.0)), DEFAULT)
    assert f.rule == "server_bound" and f.evidence["share"] == 0.6
    assert server_bound(result(open_loop(19.5, 20.0, 1.0)), DEFAULT) == []  # kept up
    assert server_bound(result(open_loop(12.0, 20.0, 150.0)), DEFAULT) == []  # the client far behind: client_bound


# clean runs --------------------------------------------------------------------------------------
def test_clean_runs_have_no_new_finding() -> None:
    new = {"ttft_client_gap", "ttft_tail", "itl_load_growth", "throughput_knee", "kv_cache_pressure", "server_bound"}
    sweep = result(concurrency(1, 10, 5), concurrency(4, 10, 5), concurrency(8, 10, 5))
    assert not {f.rule for f in diagnose(sweep, [])} & new
    single = [rec(i, ttft_ms=10.0 + (i % 7) * 0.3) for i in range(150)]
    assert not {f.rule for f in diagnose(result(bench(single)), single)} & new


def test_two_clusters_a_millisecond_apart_are_jitter_not_modes() -> None:
    records = [rec(i, ttft_ms=1.0 if i % 3 else 2.5) for i in range(60)]  # 2.5× apart but only 1.5 ms
    assert ttft_tail(point(records), DEFAULT) == []
