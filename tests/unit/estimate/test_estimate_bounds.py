"""Bounds by hand: weight and KV bytes, memory sizing, decode and prefill lower bounds."""

from __future__ import annotations

import pytest

from locations import MODEL_CONFIGS
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
    head = 128256 * 4096  # the LM head runs for the last prompt token only
    body = LLAMA.matmul_params - head
    assert prefill_flops(LLAMA, n) == 2 * body * n + 2 * head + 2 * n * n * 4096 * 32
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
    """Two GPUs halve the memory and compute time and add the all-reduces; GB/s × s = bytes."""
    one = engine_step(LLAMA, H100, weights="bf16", kv="fp16", decode_sequences=4, context_tokens=512)
    two = engine_step(LLAMA, H100, weights="bf16", kv="fp16", gpus=2, decode_sequences=4, context_tokens=512)
    # 2 all-reduces × 32 layers, each 1 µs + 2·(2−1)/2 × 4 tokens × 4096 × 2 B over NVLink's 450 GB/s a direction
    allreduce = 64 * (1e-6 + 1 * 4 * 4096 * 2 / 450e9)
    assert one.comm_s == 0 and two.comm_s == pytest.approx(allreduce)
    assert two.seconds == pytest.approx(one.seconds / 2 + allreduce)
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


def test_prefill_charges_the_lm_head_once_so_it_stays_a_lower_bound() -> None:
    """Engines compute logits for the last prompt token only. Llama-3.2-1B at 512 tokens, by hand:
    body 2·(16·(2·2048·2048 + 2·2048·512 + 3·2048·8192)) = 2·973,078,528 FLOPs per token; head 2·128256·2048;
    attention 2·512²·(32·64)·16. Charging the head for all 512 tokens was 26% too high."""
    small = load_model("llama-3.2-1b")
    n, head = 512, 128256 * 2048
    body = 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192)
    attention = 2 * n * n * 32 * 64 * 16
    right = 2 * body * n + 2 * head + attention
    assert prefill_flops(small, n) == right
    every_token = 2 * (body + head) * n + attention  # the old formula
    assert every_token / right == pytest.approx(1.26, abs=0.01)


def test_interconnect_bandwidth_per_gpu_model() -> None:
    """Datasheet GPU-to-GPU bandwidth, both directions summed: NVLink on SXM parts, the PCIe slot on PCIe cards."""
    table = {g: (load_gpu(g).interconnect, load_gpu(g).interconnect_gb_s)
             for g in ("h100-sxm", "h200", "b200", "a100-80gb", "h100-pcie", "l40s", "rtx4090", "mi300x")}
    assert table == {
        "h100-sxm": ("NVLink 4", 900), "h200": ("NVLink 4", 900), "b200": ("NVLink 5", 1800),
        "a100-80gb": ("NVLink 3", 600), "h100-pcie": ("PCIe 5.0 x16", 128), "l40s": ("PCIe 4.0 x16", 64),
        "rtx4090": ("PCIe 4.0 x16", 64), "mi300x": ("Infinity Fabric", 896),
    }
    assert load_gpu("h100", interconnect_gb_s=400).interconnect_gb_s == 400
    with pytest.raises(ConfigError, match="--interconnect-gb-s"):
        load_gpu("h100", interconnect_gb_s=0)


def test_tensor_parallel_decode_pays_the_all_reduces() -> None:
    """Llama-3-8B at TP 8, batch 1 on H100 SXM: 15.0 GB streamed ÷ (8 × 3.35 TB/s) = 0.56 ms (the issue's
    useless bound) plus 64 all-reduces of 1 token × 4096 × 2 B: 64 × (1 µs + 2·7/8 × 8192 B ÷ 450 GB/s)."""
    step = engine_step(LLAMA, H100, weights="bf16", kv="fp16", gpus=8, decode_sequences=1, context_tokens=0)
    streamed = weight_bytes(LLAMA, "bf16") - 2 * LLAMA.embedding_params
    assert step.memory_s == pytest.approx(streamed / (8 * 3.35e12))
    allreduce = 64 * (1e-6 + 2 * 7 / 8 * 8192 / 450e9)
    assert step.comm_s == pytest.approx(allreduce)
    assert step.comm_bytes == 64 * 2 * 7 / 8 * 8192
    assert step.seconds == pytest.approx(streamed / (8 * 3.35e12) + allreduce)


def test_tensor_parallel_prefill_over_pcie_is_interconnect_bound() -> None:
    """A 4,096-token prefill of Llama-3-8B on 8 GPUs: 64 all-reduces of 4,096 × 4,096 × 2 B = 33.6 MB, each
    moving 2·7/8 of it: 1.84 ms at PCIe 4.0's 32 GB/s a direction (117 ms in all, 15× the 7.5 ms of
    compute on 8 × H100), 0.13 ms at NVLink 4's 450 GB/s (8.4 ms: an 8B model at TP 8 is still
    all-reduce-bound in prefill)."""
    l40s = load_gpu("l40s")
    pcie = engine_step(LLAMA, l40s, weights="bf16", kv="fp16", gpus=8, prompt_tokens=4096)
    nvlink = engine_step(LLAMA, H100, weights="bf16", kv="fp16", gpus=8, prompt_tokens=4096)
    message = 4096 * 4096 * 2
    assert pcie.comm_s == pytest.approx(64 * (1e-6 + 2 * 7 / 8 * message / 32e9))
    assert nvlink.comm_s == pytest.approx(64 * (1e-6 + 2 * 7 / 8 * message / 450e9))
    assert nvlink.compute_s == pytest.approx(7.5e-3, rel=0.05)
    assert pcie.bound == nvlink.bound == "interconnect"
    one = engine_step(LLAMA, l40s, weights="bf16", kv="fp16", prompt_tokens=4096)
    assert one.comm_s == 0.0 and one.bound == "compute"


def test_sliding_window_decode_reads_at_most_the_window() -> None:
    """gpt-oss-20b-shaped decode at 8,192 tokens: 12 global layers read 8,192 tokens of 2,048 B, 12 local
    layers 128 tokens; attention FLOPs the same way (2 × 64 heads × (64 + 64) per pair and layer)."""
    oss = load_model(str(MODEL_CONFIGS / "gpt-oss-20b.json"))
    a = engine_step(oss, H100, weights="auto", kv="bf16", decode_sequences=1, context_tokens=8192)
    b = engine_step(oss, H100, weights="auto", kv="bf16", decode_sequences=1, context_tokens=0)
    assert a.bytes - b.bytes == 12 * 2048 * 8192 + 12 * 2048 * 128
    assert a.flops - b.flops == 2 * 64 * 128 * (12 * 8192 + 12 * 128)
