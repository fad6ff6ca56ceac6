"""Cost per token and per request, and MBU/MFU of a saved run, from hand-built results."""

from __future__ import annotations

import pytest

from tokspeed.estimate.bounds import engine_step, prefill_flops
from tokspeed.estimate.cost import Cost, Rates, costs, measured_rates
from tokspeed.estimate.efficiency import efficiency, run_concurrency
from tokspeed.estimate.hardware import load_gpu
from tokspeed.estimate.model import load_model
from tokspeed.metrics.schema import Summary, Throughput
from tokspeed.results import Benchmark, CapacityProbe, CapacityResult, RunResult
from tokspeed.stats.distribution import Distribution


def _summary(rps: float, out_tps: float, total_tps: float, **kw: Distribution) -> Summary:
    return Summary(throughput=Throughput(requests_per_s=rps, output_tokens_per_s=out_tps, total_tokens_per_s=total_tps), **kw)


def test_cost_formulas_by_hand() -> None:
    c = Cost(Rates("c8", requests_per_s=2.0, output_tokens_per_s=1000.0, total_tokens_per_s=4000.0), 2.5, 2)
    assert c.cost_per_hour == 5.0
    assert c.per_1m_output_tokens == pytest.approx(5.0 / 3.6e6 * 1e6)  # 3.6M tokens an hour → 1.389
    assert c.per_1m_total_tokens == pytest.approx(5.0 / 14.4e6 * 1e6)
    assert c.output_tokens_per_unit == pytest.approx(3.6e6 / 5.0)
    assert c.per_1k_requests == pytest.approx(5.0 / 7200 * 1000)
    assert Cost(Rates("none", None, 0.0, None), 2.5, 1).to_json()["cost_per_1m_output_tokens"] is None


def test_capacity_row_scales_tokens_per_request() -> None:
    probes = [CapacityProbe(value=4, passed=True, benchmark=0), CapacityProbe(value=8, passed=False, benchmark=1)]
    cap = CapacityResult(by="rate", requests_per_s=3.0, value=4, low=4, high=8, uncertainty=2, precision=1, slos=[], probes=probes)
    result = RunResult(
        started_at="2026-01-01T00:00:00Z",
        benchmarks=[
            Benchmark(name="rate 4/s", profile={"kind": "rate"}, summary=_summary(4.0, 400.0, 2400.0)),
            Benchmark(name="rate 8/s", profile={"kind": "rate"}, summary=_summary(5.0, 500.0, 3000.0)),
        ],
        capacity=cap,
    )
    rates = measured_rates(result)
    assert [r.label for r in rates][:2] == ["rate 4/s", "rate 8/s"] and rates[2].label.startswith("capacity")
    assert (rates[2].requests_per_s, rates[2].output_tokens_per_s, rates[2].total_tokens_per_s) == (3.0, 300.0, 1800.0)
    rows = costs(rates, [2.5, 4.1], 1)
    assert len(rows) == 6 and [r.price_per_gpu_hour for r in rows[:2]] == [2.5, 4.1]


def test_efficiency_by_hand() -> None:
    llama, h100 = load_model("llama-3-8b"), load_gpu("h100-sxm")
    summary = _summary(
        1.0, 800.0, 2000.0,
        itl_ms=Distribution(count=10, mean=10.0), ttft_ms=Distribution(count=10, p50=50.0),
        input_tokens=Distribution(count=10, mean=1000.0), output_tokens=Distribution(count=10, mean=200.0),
    )
    e = efficiency("c8", {"kind": "concurrency", "concurrency": 8}, summary, llama, h100, weights="bf16", kv="fp16")
    step = engine_step(llama, h100, weights="bf16", kv="fp16", decode_sequences=8, context_tokens=1100)
    assert e.concurrency == 8
    assert e.mbu == pytest.approx(step.bytes / 0.010 / 3.35e12)
    assert e.achieved_decode_gb_s == pytest.approx(step.bytes / 0.010 / 1e9)
    assert e.prefill_mfu == pytest.approx(prefill_flops(llama, 1000) / 0.050 / 989e12)
    assert e.fraction_of_speed_of_light == pytest.approx(800.0 / (8 / step.seconds))
    assert 0 < e.mbu < 1


def test_open_loop_concurrency_by_littles_law_and_missing_data() -> None:
    s = _summary(4.0, 100.0, 200.0, e2e_ms=Distribution(count=5, mean=2500.0))
    assert run_concurrency({"kind": "rate", "rate": 4}, s) == pytest.approx(10.0)
    e = efficiency("empty", {"kind": "rate"}, Summary(), load_model("qwen2-7b"), load_gpu("l4"), weights="int4", kv="fp8")
    assert (e.mbu, e.prefill_mfu, e.fraction_of_speed_of_light) == (None, None, None)
