"""Pure lower-bound formulas: bytes of weights and KV cache, memory sizing, and the time of one engine step.

Conventions: bytes are bytes, GB = 1e9 bytes, GPU memory comes in GiB as vendors label it.
Weight formats, bytes per parameter of the layers' matrices (embeddings, LM head and norms stay
16-bit, as AWQ, GPTQ and vLLM's FP8 keep them):

    bf16, fp16   2
    fp8, int8    1            (per-tensor or per-channel scales: < 0.1%, ignored)
    int4         0.5 + 2.5/128 = 0.5195   (AWQ/GPTQ: groups of 128 weights, each with an FP16
                                           scale and a 4-bit zero point)

KV cache counts every layer at full attention: sliding-window layers (Mistral's, Gemma-2's local
layers) hold less, so for those models the KV figures are an upper bound on memory.

A step is bounded by whichever is slower: moving its bytes through memory (bytes ÷ bandwidth)
or doing its FLOPs (FLOPs ÷ dense peak); real engines run slower, never faster. Tensor
parallelism over N GPUs multiplies memory, bandwidth and compute by N and ignores the
all-reduce traffic (so it stays a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokspeed.estimate.hardware import GPUSpec
from tokspeed.estimate.model import ModelSpec

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
KVDtype = Literal["bf16", "fp16", "fp8"]

INT4_GROUP_SIZE = 128
INT4_GROUP_OVERHEAD_BYTES = 2.5  # FP16 scale + packed 4-bit zero point per group
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + INT4_GROUP_OVERHEAD_BYTES / INT4_GROUP_SIZE,
}
UNQUANTIZED_BYTES = 2.0  # embeddings, LM head, norms
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# The tensor-core path the matmuls run on: W8A8 formats use their own, W4A16 dequantizes to BF16.
COMPUTE_DTYPE: dict[str, str] = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16"}
RESERVE_GIB_PER_GPU = 2.0  # activations at the engine's token budget, CUDA graphs, NCCL/cuBLAS workspaces


def weight_bytes(model: ModelSpec, weights: str) -> float:
    """Bytes of every stored weight: linear_params × WEIGHT_BYTES[weights] + the rest × 2."""
    rest = model.embedding_params + model.lm_head_params + model.norm_params
    return model.linear_params * WEIGHT_BYTES[weights] + rest * UNQUANTIZED_BYTES


def experts_touched_fraction(model: ModelSpec, tokens: int) -> float:
    """Expected share of a layer's experts that `tokens` tokens route to: 1 − (1 − k/E)^tokens (1 when dense)."""
    if not model.is_moe:
        return 1.0
    return 1.0 - (1.0 - model.experts_per_token / model.num_experts) ** max(tokens, 1)


def weight_bytes_read(model: ModelSpec, weights: str, tokens: int) -> float:
    """Weight bytes one step reads for `tokens` tokens: all but the embedding table (a lookup reads
    only its rows) and, for a mixture of experts, only the experts those tokens route to."""
    table = 0 if model.tied_embeddings else model.embedding_params * UNQUANTIZED_BYTES
    experts = model.num_layers * model.num_experts * model.expert_params * WEIGHT_BYTES[weights]
    untouched = experts * (1.0 - experts_touched_fraction(model, tokens))
    return weight_bytes(model, weights) - table - untouched


def kv_bytes_per_token(model: ModelSpec, kv: str) -> float:
    """KV cache per token: 2 (K and V) × layers × kv_heads × head_dim × KV_BYTES[kv]."""
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * KV_BYTES[kv]


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How the GPU memory divides: usable = memory × utilization; KV budget = usable − weights − reserve."""

    memory_bytes: float
    usable_bytes: float
    weights_bytes: float
    reserve_bytes: float
    kv_bytes_per_token: float

    @property
    def kv_budget_bytes(self) -> float:
        return max(self.usable_bytes - self.weights_bytes - self.reserve_bytes, 0.0)

    @property
    def weights_fit(self) -> bool:
        return self.weights_bytes + self.reserve_bytes <= self.usable_bytes

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens the KV cache holds: floor(KV budget ÷ KV bytes per token)."""
        return int(self.kv_budget_bytes // self.kv_bytes_per_token)

    def max_sequences(self, tokens_per_sequence: int) -> int:
        """Sequences of this length that fit at once: floor(KV cache tokens ÷ tokens per sequence)."""
        return self.kv_cache_tokens // max(tokens_per_sequence, 1)


def memory_plan(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    weights: str,
    kv: str,
    gpus: int = 1,
    utilization: float = 0.9,
    reserve_gib_per_gpu: float = RESERVE_GIB_PER_GPU,
) -> MemoryPlan:
    """Size the KV cache as vLLM does: of memory × gpu_memory_utilization, what weights and the reserve leave."""
    memory = gpu.memory_bytes * gpus
    return MemoryPlan(
        memory_bytes=memory,
        usable_bytes=memory * utilization,
        weights_bytes=weight_bytes(model, weights),
        reserve_bytes=reserve_gib_per_gpu * (1 << 30) * gpus,
        kv_bytes_per_token=kv_bytes_per_token(model, kv),
    )


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step's work and its lower-bound time: max(bytes ÷ bandwidth, FLOPs ÷ peak)."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> Literal["memory", "compute"]:
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def flops_per_byte(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def prefill_flops(model: ModelSpec, prompt_tokens: int) -> float:
    """2 × matmul params × n + causal attention 2 × n² × heads·head_dim × layers (QKᵀ and AV, half masked)."""
    n = prompt_tokens
    return 2.0 * model.matmul_params * n + 2.0 * n * n * model.attention_dim * model.num_layers


def decode_flops(model: ModelSpec, sequences: float, context_tokens: float) -> float:
    """Per decode step: sequences × (2 × matmul params + 4 × context × heads·head_dim × layers)."""
    attention = 4.0 * context_tokens * model.attention_dim * model.num_layers
    return sequences * (2.0 * model.matmul_params + attention)


def engine_step(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    weights: str,
    kv: str,
    gpus: int = 1,
    prompt_tokens: int = 0,
    decode_sequences: float = 0,
    context_tokens: float = 0.0,
) -> Step:
    """A step that prefills one prompt of `prompt_tokens` and decodes `decode_sequences` sequences at
    `context_tokens` each. Bytes: the weights read once + KV read by the decodes + KV written by the prompt."""
    kv_token = kv_bytes_per_token(model, kv)
    tokens = prompt_tokens + round(decode_sequences)
    flops = prefill_flops(model, prompt_tokens) + decode_flops(model, decode_sequences, context_tokens)
    moved = (
        weight_bytes_read(model, weights, tokens)
        + decode_sequences * context_tokens * kv_token
        + prompt_tokens * kv_token
    )
    return Step(
        flops=flops,
        bytes=moved,
        compute_s=flops / (gpu.peak_flops(COMPUTE_DTYPE[weights]) * gpus),
        memory_s=moved / (gpu.bandwidth_bytes_per_s * gpus),
    )


def ridge_flops_per_byte(gpu: GPUSpec, weights: str) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ bytes/s. A step doing fewer FLOPs per byte is memory-bound."""
    return gpu.peak_flops(COMPUTE_DTYPE[weights]) / gpu.bandwidth_bytes_per_s
