"""Bounds by hand: weight and KV bytes, memory sizing, decode and prefill lower bounds."""

from __future__ import annotations

import pytest

from tokspeed.errors import ConfigError
from tokspeed.estimate.bounds import (
    engine_step,
    experts_touched_fraction,
    kv_bytes_per_token,
    memory_plan,
    prefill_flops,
    weight_bytes,
    weight_bytes_read,
)
from tokspeed.estimate.hardware import GIB, load_gpu
from tokspeed.estimate.model import load_model
from tokspeed.estimate.speed_of_light import Workload, estimate

LLAMA = load_model("llama-3-8b")
H100 = load_gpu("h100-sxm")


def test_llama3_8b_bf16_weights_are_about_16_gb() -> None:
    assert weight_bytes(LLAMA, "bf16") == 8_030_261_248 * 2
    assert weight_bytes(LLAMA, "bf16") / 1e9 == pytest.approx(16.06, abs=0.01)


def test_int4_is_about_four_times_smaller_plus_scales() -> None:
    linear = LLAMA.linear_params
    rest = 2 * (LLAMA.total_params - linear)  # embeddings, head, norms stay 16-bit
    int4 = weight_bytes(LLAMA, "int4")
    assert int4 == pytest.approx(linear * (0.5 + 2.5 / 128) + rest)
    assert (weight_bytes(LLAMA, "bf16") - rest) / (int4 - rest) == pytest.approx(2 / 0.51953125)  # 3.85×
    assert weight_bytes(LLAMA, "fp8") == weight_bytes(LLAMA, "int8") == linear + rest


def test_gqa_kv_bytes_per_token() -> None:
    assert kv_bytes_per_token(LLAMA, "fp16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_token(LLAMA, "fp8") == 65_536
    assert kv_bytes_per_token(load_model("llama-2-7b"), "fp16") == 2 * 32 * 32 * 128 * 2  # MHA: 4× Llama-3's


def test_decode_bound_at_batch_one_is_bandwidth_over_weight_bytes() -> None:
    step = engine_step(LLAMA, H100, weights="bf16", kv="fp16", decode_sequences=1, context_tokens=0)
    streamed = weight_bytes(LLAMA, "bf16") - 2 * LLAMA.embedding_params  # the lookup table is not streamed
    assert step.bytes == streamed
    assert 1 / step.seconds == pytest.approx(3.35e12 / streamed)
    assert 1 / step.seconds == pytest.approx(3.35e12 / 16.06e9, rel=0.08)  # the ≈ 209 tok/s rule of thumb
    assert step.bound == "memory"


def test_kv_read_grows_the_decode_step() -> None:
    a = engine_step(LLAMA, H100, weights="bf16", kv="fp16", decode_sequences=8, context_tokens=1000)
    b = engine_step(LLAMA, H100, weights="bf16", kv="fp16", decode_sequences=8, context_tokens=2000)
    assert b.bytes - a.bytes == 8 * 1000 * 131_072


def test_prefill_flops_and_compute_bound() -> None:
    n = 1000
    assert prefill_flops(LLAMA, n) == 2 * LLAMA.matmul_params * n + 2 * n * n * 4096 * 32
    step = engine_step(LLAMA, H100, weights="bf16", kv="fp16", prompt_tokens=n)
    assert step.bound == "compute"
    assert step.seconds == pytest.approx(prefill_flops(LLAMA, n) / 989e12)


def test_memory_plan_and_max_sequences() -> None:
    plan = memory_plan(LLAMA, H100, weights="bf16", kv="fp16", utilization=0.9)
    budget = 80 * GIB * 0.9 - 2 * 8_030_261_248 - 2 * GIB
    assert plan.kv_budget_bytes == pytest.approx(budget)
    assert plan.kv_cache_tokens == int(budget // 131_072)
    assert plan.max_sequences(8192) == plan.kv_cache_tokens // 8192
    fp8 = memory_plan(LLAMA, H100, weights="bf16", kv="fp8")
    assert fp8.kv_cache_tokens == pytest.approx(2 * plan.kv_cache_tokens, abs=1)  # FP8 KV doubles concurrency


def test_weights_that_do_not_fit() -> None:
    plan = memory_plan(load_model("llama-3-70b"), load_gpu("rtx4090"), weights="bf16", kv="fp16")
    assert not plan.weights_fit and plan.kv_budget_bytes == 0 and plan.max_sequences(100) == 0


def test_moe_reads_only_routed_experts_at_batch_one() -> None:
    mix = load_model("mixtral-8x7b")
    assert experts_touched_fraction(mix, 1) == pytest.approx(2 / 8)
    assert experts_touched_fraction(mix, 10_000) == pytest.approx(1.0)
    one = weight_bytes_read(mix, "bf16", 1)
    assert one == pytest.approx(2 * (mix.active_params - mix.embedding_params))


def test_units_are_consistent_across_gpus() -> None:
    """Two GPUs halve the step time and double the memory; GB/s × s = bytes."""
    one = engine_step(LLAMA, H100, weights="bf16", kv="fp16", decode_sequences=4, context_tokens=512)
    two = engine_step(LLAMA, H100, weights="bf16", kv="fp16", gpus=2, decode_sequences=4, context_tokens=512)
    assert two.seconds == pytest.approx(one.seconds / 2)
    assert one.memory_s * H100.bandwidth_gb_s * 1e9 == pytest.approx(one.bytes)
    est = estimate(LLAMA, H100, Workload(input_tokens=512, output_tokens=256), [1, 32])
    p = est.points[1]
    assert p.decode_tokens_per_s == pytest.approx(32 / (p.itl_ms / 1e3))
    assert p.e2e_ms == pytest.approx(p.ttft_ms + 255 * p.itl_ms)
    assert est.to_json()["memory"]["weights_gb"] == pytest.approx(16.06, abs=0.01)


def test_batching_turns_decode_compute_bound() -> None:
    est = estimate(LLAMA, H100, Workload(input_tokens=128, output_tokens=128), [1, 4096])
    assert [p.decode.bound for p in est.points] == ["memory", "compute"]
    assert "ridge point" in est.why(est.points[0])


def test_gpu_table_overrides_and_errors() -> None:
    assert load_gpu("H100").name == "h100-sxm"
    g = load_gpu("rtx4090", memory_gb=48, bandwidth_gb_s=1000, tflops=100)
    assert (g.memory_gib, g.bandwidth_gb_s, g.peak_flops("fp8")) == (48, 1000, 100e12)
    assert load_gpu("a100-80gb").peak_flops("fp8") == 312e12  # no FP8 path: BF16
    assert load_gpu("cpu", bandwidth_gb_s=80).bandwidth_gb_s == 80
    with pytest.raises(ConfigError, match="bandwidth"):
        load_gpu("cpu")
    with pytest.raises(ConfigError) as exc:
        load_gpu("tpu-v5")
    assert "h100-sxm" in (exc.value.hint or "") and "mi300x" in (exc.value.hint or "")
    with pytest.raises(ConfigError):
        load_gpu("h100", bandwidth_gb_s=-1)


def test_bad_workloads() -> None:
    with pytest.raises(ConfigError):
        estimate(LLAMA, H100, Workload(utilization=1.5), [1])
    with pytest.raises(ConfigError):
        estimate(LLAMA, H100, Workload(), [0])
