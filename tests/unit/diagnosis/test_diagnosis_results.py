"""Result rules over hand-made summaries and telemetry (TelemetrySummary built directly)."""

from __future__ import annotations

from typing import Any

from diagnosis_builders import bench, many, rec, result
from tokspeed.diagnosis.client import client_bound
from tokspeed.diagnosis.gpu import gpu_underutilised
from tokspeed.diagnosis.stability import too_few_samples, unstable
from tokspeed.diagnosis.thresholds import DEFAULT
from tokspeed.diagnosis.ttft import ttft_prefill_sweep, ttft_queueing
from tokspeed.metrics.fit import LinearFit
from tokspeed.results import SweepInfo
from tokspeed.telemetry.schema import (
    ClientSummary,
    GPUSummary,
    SeriesStats,
    ServerSummary,
    TelemetrySummary,
)

RATE = {"kind": "rate", "rate": 50.0, "arrival": "poisson", "burstiness": None, "max_concurrency": None}
LOCAL = {"url": "http://127.0.0.1:8000/v1", "model": "m"}


def telemetry(*, util: float | None = None, waiting: float | None = None, kv: float | None = None,
              lag: float | None = None, cpu: float | None = None) -> TelemetrySummary:
    gpus = [GPUSummary(index=0, name="H100", utilization_pct=SeriesStats(mean=util, max=util, samples=10))] if util is not None else []
    server = ServerSummary(url="http://127.0.0.1:8000/metrics", waiting=SeriesStats(mean=waiting, max=(waiting or 0) * 2, samples=10),
                           kv_cache_usage_pct=SeriesStats(mean=kv, max=kv, samples=10)) if waiting is not None else None
    client = ClientSummary(loop_lag_ms=SeriesStats(p99=lag, max=lag, samples=10),
                           process_cpu_pct=SeriesStats(mean=cpu, max=cpu, samples=10)) if (lag, cpu) != (None, None) else None
    return TelemetrySummary(interval_s=1.0, gpus=gpus, server=server, client=client)


def with_telemetry(t: TelemetrySummary, profile: dict[str, Any] | None = None, n: int = 120) -> Any:
    b = bench(many(n), profile)
    b.telemetry = t
    return b


# client_bound ------------------------------------------------------------------------------
def test_schedule_lag_under_open_loop_fires() -> None:
    (f,) = client_bound(result(bench(many(120, lateness_ms=25), RATE)), DEFAULT)
    assert f.rule == "client_bound" and f.severity == "warning" and f.evidence["lateness_p99_ms"] == 25
    assert "understate" in f.advice


def test_huge_schedule_lag_is_critical() -> None:
    (f,) = client_bound(result(bench(many(120, lateness_ms=250), RATE)), DEFAULT)
    assert f.severity == "critical"


def test_lag_is_ignored_below_threshold_closed_loop_or_capped() -> None:
    assert client_bound(result(bench(many(120, lateness_ms=5), RATE)), DEFAULT) == []
    assert client_bound(result(bench(many(120, lateness_ms=25))), DEFAULT) == []  # concurrency profile
    capped = {**RATE, "max_concurrency": 4}  # waits for a slot are the cap, not the client
    assert client_bound(result(bench(many(120, lateness_ms=25), capped)), DEFAULT) == []


def test_event_loop_lag_or_client_cpu_fires() -> None:
    (lag,) = client_bound(result(with_telemetry(telemetry(lag=45.0, cpu=30.0))), DEFAULT)
    assert "event-loop lag p99 45.0 ms" in lag.title and lag.benchmark == 0
    (cpu,) = client_bound(result(with_telemetry(telemetry(lag=1.0, cpu=97.0))), DEFAULT)
    assert "97% of a core" in cpu.title
    assert client_bound(result(with_telemetry(telemetry(lag=1.0, cpu=40.0))), DEFAULT) == []


def test_an_in_process_engines_cpu_and_loop_lag_are_not_the_client() -> None:
    """The embedded model computes in tokspeed's own process: 100% CPU there is the engine, not a saturated client."""
    busy = telemetry(lag=45.0, cpu=97.0)
    for kind in ("embedded", "hf", "vllm"):
        assert client_bound(result(with_telemetry(busy), target={"kind": kind, "model": "m"}), DEFAULT) == []
    assert len(client_bound(result(with_telemetry(busy), target={"kind": "openai-http", **LOCAL}), DEFAULT)) == 1
    # an open loop the in-process client could not keep is still said
    late = bench(many(120, lateness_ms=25), RATE)
    assert len(client_bound(result(late, target={"kind": "embedded", "model": "m"}), DEFAULT)) == 1


def test_run_telemetry_is_used_only_without_point_telemetry() -> None:
    busy = telemetry(lag=45.0)
    (f,) = client_bound(result(bench(many(120)), telemetry=busy), DEFAULT)
    assert f.benchmark is None
    both = client_bound(result(with_telemetry(busy), telemetry=busy), DEFAULT)
    assert [f.benchmark for f in both] == [0]


# gpu_underutilised ---------------------------------------------------------------------------
def test_idle_gpu_while_the_server_queues() -> None:
    (f,) = gpu_underutilised(result(with_telemetry(telemetry(util=20.0, waiting=3.0)), target=LOCAL), DEFAULT)
    assert f.rule == "gpu_underutilised" and f.evidence["utilization_mean_pct"] == 20.0
    assert "--max-num-seqs" in f.advice and "nvidia-smi" in f.advice


def test_idle_gpu_under_high_client_concurrency() -> None:
    busy = {"kind": "concurrency", "concurrency": 32}
    (f,) = gpu_underutilised(result(with_telemetry(telemetry(util=20.0), busy), target=LOCAL), DEFAULT)
    assert f.evidence["client_in_flight"] == 32


def test_gpu_rule_is_silent_when_busy_unloaded_remote_or_unsampled() -> None:
    assert gpu_underutilised(result(with_telemetry(telemetry(util=85.0, waiting=3.0)), target=LOCAL), DEFAULT) == []
    assert gpu_underutilised(result(with_telemetry(telemetry(util=20.0, waiting=0.0)), target=LOCAL), DEFAULT) == []
    remote = {"url": "http://gpu-box.example:8000/v1"}  # this machine's GPUs are not the server's
    assert gpu_underutilised(result(with_telemetry(telemetry(util=20.0, waiting=3.0)), target=remote), DEFAULT) == []
    unsampled = telemetry(util=20.0, waiting=3.0)
    unsampled.gpus[0].utilization_pct = SeriesStats()
    assert gpu_underutilised(result(with_telemetry(unsampled), target=LOCAL), DEFAULT) == []


# unstable -------------------------------------------------------------------------------------
def iterations(itl_ms: tuple[float, ...], ttft_ms: float = 10.0) -> Any:
    records = [rec(100 * k + i, iteration=k + 1, itl_ms=itl, ttft_ms=ttft_ms) for k, itl in enumerate(itl_ms) for i in range(5)]
    return bench(records)


def test_iterations_that_disagree_are_unstable() -> None:
    (f,) = unstable(result(iterations((2.0, 3.0, 2.0))), DEFAULT)
    assert f.rule == "unstable" and f.evidence["iterations"] == 3 and float(f.evidence["e2e_mean_ms_cv"] or 0) > 0.10
    assert "warm-up" in f.advice and "nvidia-smi" in f.advice


def test_iterations_that_agree_or_a_single_one_are_silent() -> None:
    assert unstable(result(iterations((2.0, 2.0, 2.0))), DEFAULT) == []
    assert unstable(result(iterations((2.0,))), DEFAULT) == []


# too_few_samples --------------------------------------------------------------------------------
def test_too_few_samples() -> None:
    (f,) = too_few_samples(result(bench(many(40))), DEFAULT)
    assert f.severity == "warning" and f.evidence["completed"] == 40 and "--requests 100" in f.advice
    assert too_few_samples(result(bench(many(100))), DEFAULT) == []


def test_no_completed_request_is_critical() -> None:
    from diagnosis_builders import failed
    from tokspeed.records import ErrorKind

    (f,) = too_few_samples(result(bench([failed(i, ErrorKind.CONNECT, "refused") for i in range(3)])), DEFAULT)
    assert f.severity == "critical" and f.evidence["errored"] == 3


# ttft_queueing / ttft_prefill ------------------------------------------------------------------
def test_server_queue_from_telemetry() -> None:
    (f,) = ttft_queueing(result(with_telemetry(telemetry(waiting=4.0))), DEFAULT)
    assert f.rule == "ttft_queueing" and f.evidence["server_waiting_mean"] == 4.0 and "--max-num-seqs" in f.advice
    (full,) = ttft_queueing(result(with_telemetry(telemetry(waiting=4.0, kv=97.0))), DEFAULT)
    assert "KV cache" in full.title and "--kv-cache-dtype fp8" in full.advice
    assert ttft_queueing(result(with_telemetry(telemetry(waiting=0.1))), DEFAULT) == []


def load_point(concurrency: int, ttft_ms: float, input_tokens: int = 100) -> Any:
    return bench(many(10, ttft_ms=ttft_ms, input_tokens=input_tokens), {"kind": "concurrency", "concurrency": concurrency})


def test_ttft_growing_with_load_at_equal_prompts_is_queueing() -> None:
    (f,) = ttft_queueing(result(load_point(1, 10.0), load_point(8, 18.0), load_point(32, 60.0)), DEFAULT)
    assert f.benchmark is None and f.evidence["low_load"] == 1 and f.evidence["high_load"] == 32
    assert "6.0×" in f.title and "queueing" in f.title


def test_ttft_growth_is_not_queueing_when_prompts_grew_or_growth_is_small() -> None:
    assert ttft_queueing(result(load_point(1, 10.0, 100), load_point(32, 60.0, 1000)), DEFAULT) == []
    assert ttft_queueing(result(load_point(1, 10.0), load_point(32, 15.0)), DEFAULT) == []
    assert ttft_queueing(result(load_point(4, 10.0), load_point(4, 60.0)), DEFAULT) == []  # one load only


def test_input_length_sweep_fit_is_prefill() -> None:
    points = [bench(many(5, input_tokens=n, ttft_ms=2 + 0.1 * n)) for n in (128, 512, 2048)]
    fit = LinearFit(points=3, slope_ms_per_1k_tokens=100.0, intercept_ms=2.0, r2=0.99)
    (f,) = ttft_prefill_sweep(result(*points, sweep=SweepInfo(dimension="input_tokens", ttft_vs_input_tokens=fit)), DEFAULT)
    assert f.rule == "ttft_prefill" and f.evidence["slope_ms_per_1k_tokens"] == 100.0
    poor = LinearFit(points=3, slope_ms_per_1k_tokens=100.0, intercept_ms=2.0, r2=0.2)
    assert ttft_prefill_sweep(result(*points, sweep=SweepInfo(dimension="input_tokens", ttft_vs_input_tokens=poor)), DEFAULT) == []
    assert ttft_prefill_sweep(result(*points), DEFAULT) == []


def test_ttft_growth_with_an_empty_server_queue_is_not_called_queueing() -> None:
    """Issue 24: 'TTFT dominated by queueing — raise --max-num-seqs' fired while the waiting gauge was 0 throughout."""
    low, high = load_point(1, 10.0), load_point(32, 60.0)
    high.telemetry = telemetry(waiting=0.0)
    (f,) = ttft_queueing(result(low, high), DEFAULT)
    assert f.rule == "ttft_growth" and "--max-num-seqs" not in f.advice.replace("(--max-num-seqs) would not", "")
    assert "not queueing" in f.title and f.evidence["server_waiting_max"] == 0.0
    high.telemetry = telemetry(waiting=3.0)  # the server did queue: both say so
    assert {x.rule for x in ttft_queueing(result(low, high), DEFAULT)} == {"ttft_queueing"}
