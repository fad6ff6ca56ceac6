"""The speed-of-light estimate of a workload: memory sizing and, per concurrency, TTFT, ITL and tokens/s.

At concurrency C in steady state (continuous batching, every slot busy):
- ITL = one decode step of C sequences at the mean context (input + output/2);
  output tokens/s = C ÷ ITL; each user sees 1 ÷ ITL.
- TTFT = one step that prefills a prompt while the other C − 1 sequences decode;
  prefill_ms is the same prompt alone.
- E2E = TTFT + (output − 1) × ITL.
- Memory: the KV cache holds ⌊budget ÷ KV(input + output)⌋ sequences, KV(L) as in bounds.py
  (sliding-window layers hold at most their window).
- With --gpus N > 1 every step also pays tensor parallelism's all-reduces (bounds.allreduce_seconds).
Every figure is a lower bound on time (an upper bound on speed): no real engine beats it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokspeed.errors import ConfigError
from tokspeed.estimate.bounds import (
    KV_BYTES,
    RESERVE_GIB_PER_GPU,
    WEIGHT_BYTES,
    MemoryPlan,
    Step,
    engine_step,
    memory_plan,
    ridge_flops_per_byte,
    weight_format,
)
from tokspeed.estimate.hardware import GPUSpec
from tokspeed.estimate.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Workload:
    """What the estimate is for: the hardware setup and the request shape."""

    weights: str = "auto"
    kv: str = "fp16"
    gpus: int = 1
    input_tokens: int = 512
    output_tokens: int = 256
    max_model_len: int | None = None
    utilization: float = 0.9
    reserve_gib_per_gpu: float = RESERVE_GIB_PER_GPU

    def check(self) -> None:
        """Raise ConfigError for a value no estimate can use."""
        if self.weights != "auto" and self.weights not in WEIGHT_BYTES:
            raise ConfigError(f"unknown weight format {self.weights!r}", hint=f"one of auto, {', '.join(WEIGHT_BYTES)}")
        if self.kv not in KV_BYTES:
            raise ConfigError(f"unknown KV-cache format {self.kv!r}", hint=f"one of {', '.join(KV_BYTES)}")
        if not 0 < self.utilization <= 1:
            raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {self.utilization:g}")
        if self.gpus < 1 or self.input_tokens < 1 or self.output_tokens < 1:
            raise ConfigError("--gpus, --input-tokens and --output-tokens must be at least 1")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError("--max-model-len must be at least 1")

    @property
    def sequence_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def mean_context_tokens(self) -> float:
        """Mean context a decode step attends to: input + output ÷ 2."""
        return self.input_tokens + self.output_tokens / 2


@dataclass(frozen=True, slots=True)
class Point:
    """The bounds at one concurrency."""

    concurrency: int
    decode: Step
    ttft_step: Step
    prefill: Step
    output_tokens: int
    fits: bool

    @property
    def itl_ms(self) -> float:
        return self.decode.seconds * 1e3

    @property
    def ttft_ms(self) -> float:
        return self.ttft_step.seconds * 1e3

    @property
    def decode_tokens_per_s(self) -> float:
        return self.concurrency / self.decode.seconds

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + (self.output_tokens - 1) * self.itl_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "fits_in_kv_cache": self.fits,
            "prefill_ms": self.prefill.seconds * 1e3,
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "e2e_ms": self.e2e_ms,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "per_user_tokens_per_s": 1.0 / self.decode.seconds,
            "decode_step_bytes": self.decode.bytes,
            "decode_step_flops": self.decode.flops,
            "decode_flops_per_byte": self.decode.flops_per_byte,
            "bound": self.decode.bound,
            "prefill_bound": self.prefill.bound,
            "decode_allreduce_ms": self.decode.comm_s * 1e3,
            "prefill_allreduce_ms": self.prefill.comm_s * 1e3,
        }


@dataclass(frozen=True, slots=True)
class Estimate:
    model: ModelSpec
    gpu: GPUSpec
    workload: Workload
    memory: MemoryPlan
    points: list[Point]

    @property
    def ridge_flops_per_byte(self) -> float:
        return ridge_flops_per_byte(self.gpu, self.workload.weights, self.model)

    @property
    def max_concurrent_sequences(self) -> int:
        return self.memory.max_sequences(self.workload.sequence_tokens)

    def why(self, point: Point) -> str:
        """One line: which bound applies to decode at this point, and why."""
        ratio, ridge = point.decode.flops_per_byte, self.ridge_flops_per_byte
        side = "below" if ratio < ridge else "above"
        if point.decode.bound == "interconnect":
            return (f"decode at concurrency {point.concurrency} spends {point.decode.comm_s * 1e3:.3f} ms in "
                    f"tensor-parallel all-reduces over {self.gpu.interconnect or 'the interconnect'}, more than "
                    f"its memory or compute time, so the interconnect bounds it")
        limit = "memory bandwidth" if point.decode.bound == "memory" else "compute"
        return (
            f"decode at concurrency {point.concurrency} does {ratio:,.0f} FLOP per byte moved, {side} the "
            f"{self.gpu.name}'s ridge point of {ridge:,.0f} FLOP/byte, so {limit} bounds it"
        )

    def to_json(self) -> dict[str, Any]:
        m, w, mem = self.model, self.workload, self.memory
        fmt = weight_format(m, w.weights)
        kv = mem.kv
        return {
            "schema": "tokspeed.estimate/1",
            "model": {
                "name": m.name, "total_params": m.total_params, "active_params": m.active_params,
                "hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
                "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "intermediate_size": m.intermediate_size,
                "vocab_size": m.vocab_size, "tied_embeddings": m.tied_embeddings,
                "num_experts": m.num_experts, "experts_per_token": m.experts_per_token,
                "moe_intermediate_size": m.expert_intermediate_size if m.is_moe else None,
                "shared_expert_intermediate_size": m.shared_expert_intermediate_size,
                "moe_layers": m.num_moe_layers,
                "kv_lora_rank": m.kv_lora_rank or None, "qk_rope_head_dim": m.qk_rope_head_dim or None,
                "sliding_window": m.sliding_window, "sliding_window_layers": m.window_layers,
                "mtp_params": m.mtp_params,
                "quantization": m.quantization.label if m.quantization else None,
            },
            "gpu": {
                "name": self.gpu.name, "count": w.gpus, "memory_gib": self.gpu.memory_gib,
                "bandwidth_gb_s": self.gpu.bandwidth_gb_s,
                "peak_tflops": self.gpu.peak_flops(fmt.compute) / 1e12,
                "compute_dtype": self.gpu.compute_path(fmt.compute),
                "ridge_flops_per_byte": self.ridge_flops_per_byte,
                "interconnect": self.gpu.interconnect or None,
                "interconnect_gb_s": self.gpu.interconnect_gb_s,
            },
            "weights": fmt.name, "weights_source": fmt.source, "weight_bytes_per_param": fmt.bytes_per_param,
            "kv": w.kv, "input_tokens": w.input_tokens, "output_tokens": w.output_tokens,
            "gpu_memory_utilization": w.utilization,
            "memory": {
                "gpu_memory_gb": mem.memory_bytes / 1e9,
                "usable_gb": mem.usable_bytes / 1e9,
                "weights_gb": mem.weights_bytes / 1e9,
                "reserve_gb": mem.reserve_bytes / 1e9,
                "kv_cache_gb": mem.kv_budget_bytes / 1e9,
                "weights_fit": mem.weights_fit,
                "kv_cache_bytes_per_token": mem.kv_bytes_per_token / mem.kv_copies,
                "kv_cache_copies": mem.kv_copies,
                "kv_cache_bytes_per_token_full": (kv.full_bytes_per_token if kv else mem.kv_bytes_per_token) / mem.kv_copies,
                "kv_cache_global_bytes_per_token": (kv.global_bytes_per_token if kv else mem.kv_bytes_per_token) / mem.kv_copies,
                "kv_cache_window_bytes_per_token": (kv.window_bytes_per_token if kv else 0.0) / mem.kv_copies,
                "kv_cache_tokens": mem.kv_cache_tokens,
                "max_concurrent_sequences": self.max_concurrent_sequences,
                "max_model_len": w.max_model_len,
                "max_concurrent_sequences_at_max_model_len": (
                    mem.max_sequences(w.max_model_len) if w.max_model_len else None
                ),
            },
            "points": [p.to_json() for p in self.points],
        }


def estimate(model: ModelSpec, gpu: GPUSpec, workload: Workload, concurrencies: list[int]) -> Estimate:
    """Size the memory and bound every concurrency's speed. Raises ConfigError for unusable inputs."""
    workload.check()
    if not concurrencies or min(concurrencies) < 1:
        raise ConfigError("--concurrency takes positive integers, e.g. 1,8,32")
    mem = memory_plan(
        model, gpu, weights=workload.weights, kv=workload.kv, gpus=workload.gpus,
        utilization=workload.utilization, reserve_gib_per_gpu=workload.reserve_gib_per_gpu,
        sequence_tokens=workload.sequence_tokens,
    )
    capacity = mem.max_sequences(workload.sequence_tokens)
    return Estimate(model, gpu, workload, mem, [_point(model, gpu, workload, c, c <= capacity) for c in concurrencies])


def _point(model: ModelSpec, gpu: GPUSpec, w: Workload, concurrency: int, fits: bool) -> Point:
    def step(prompt: int, decoding: int) -> Step:
        return engine_step(model, gpu, weights=w.weights, kv=w.kv, gpus=w.gpus, prompt_tokens=prompt,
                           decode_sequences=decoding, context_tokens=w.mean_context_tokens)

    decode, ttft, prefill = step(0, concurrency), step(w.input_tokens, concurrency - 1), step(w.input_tokens, 0)
    return Point(concurrency, decode, ttft, prefill, w.output_tokens, fits)
