"""Pure lower-bound formulas: bytes of weights and KV cache, memory sizing, and the time of one engine step.

Conventions: bytes are bytes, GB = 1e9 bytes, GPU memory comes in GiB as vendors label it.
Weight formats, bytes per parameter of the quantized matrices (embeddings, LM head and norms stay
16-bit, as AWQ, GPTQ, FP8 and MXFP4 checkpoints keep them):

    bf16, fp16   2
    fp8, int8    1            (per-tensor, per-channel or 128×128-block scales: < 0.1%, ignored)
    int4         0.5 + 2.5/128 = 0.5195   (AWQ/GPTQ: groups of 128 weights, each with an FP16
                                           scale and a 4-bit zero point)
    mxfp4        0.5 + 1/32 = 0.53125     (gpt-oss: 4-bit weights, an 8-bit scale per 32; experts only)
    auto         the checkpoint's own `quantization_config` (see model.py), else bf16

KV cache per sequence of L tokens, with g = bytes per token of the global-attention layers and
s = bytes per token of the sliding-window layers (window W):

    KV(L) = g × L + s × min(L, W)            bytes per token at L = KV(L) ÷ L
    per layer and token: 2 × kv_heads × head_dim × KV bytes   (GQA/MHA: K and V)
                         (kv_lora_rank + qk_rope_head_dim) × KV bytes   (MLA: the latent, no heads)

Under tensor parallelism over N GPUs the cache is split by KV head, and a head is copied when there
are fewer heads than GPUs: the GPUs together hold N × max(1, kv_heads ÷ N) heads (vLLM's rule), so
copies = N × max(1, kv_heads ÷ N) ÷ kv_heads. MLA's latent has no heads: every GPU holds all of it,
copies = N. The memory plan and each step's KV reads count every copy.

A step is bounded by whichever is slower: moving its bytes through memory (bytes ÷ bandwidth)
or doing its FLOPs (FLOPs ÷ dense peak); real engines run slower, never faster. Tensor
parallelism over N GPUs multiplies memory, bandwidth and compute by N and adds the all-reduces
(two per layer, after attention and after the MLP, of tokens × hidden × 2 bytes each, by a ring):

    all-reduce time = 2 × layers × (α + 2(N − 1)/N × tokens × hidden × 2 B ÷ link bandwidth per direction)

with α = 1 µs, a floor below any measured NCCL or custom all-reduce, and the link bandwidth per
direction half the bidirectional figure the GPU table carries. The all-reduces sit between
dependent matmuls, so they add to the step rather than overlap it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokspeed.errors import ConfigError
from tokspeed.estimate.hardware import GPUSpec
from tokspeed.estimate.model import ModelSpec

WeightDtype = Literal["auto", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4"]
KVDtype = Literal["bf16", "fp16", "fp8"]

INT4_GROUP_SIZE = 128
INT4_GROUP_OVERHEAD_BYTES = 2.5  # FP16 scale + packed 4-bit zero point per group
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + INT4_GROUP_OVERHEAD_BYTES / INT4_GROUP_SIZE,
    "mxfp4": 0.5 + 1 / 32,
}
UNQUANTIZED_BYTES = 2.0  # embeddings, LM head, norms
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# The tensor-core path the matmuls run on: W8A8 formats use their own, W4A16 dequantizes to BF16.
COMPUTE_DTYPE: dict[str, str] = {
    "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16", "mxfp4": "bf16",
}
RESERVE_GIB_PER_GPU = 2.0  # activations at the engine's token budget, CUDA graphs, NCCL/cuBLAS workspaces
ACTIVATION_BYTES = 2.0  # bf16 activations on the wire
ALLREDUCE_LATENCY_S = 1e-6  # α: per all-reduce floor


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """The weight format a step reads: bytes per quantized parameter, its matmul path, what it covers."""

    name: str
    bytes_per_param: float
    compute: str
    experts_only: bool = False
    source: Literal["--weights", "quantization_config", "default"] = "--weights"


def weight_format(model: ModelSpec, weights: str) -> WeightFormat:
    """`weights` as a format: a name from WEIGHT_BYTES, or `auto` for the checkpoint's quantization_config
    (bf16 without one). Raises ConfigError for an unknown name or a quantization tokspeed cannot size."""
    if weights != "auto":
        if weights not in WEIGHT_BYTES:
            raise ConfigError(f"unknown weight format {weights!r}", hint=f"one of auto, {', '.join(WEIGHT_BYTES)}")
        experts_only = weights == "mxfp4" and model.is_moe  # MXFP4 as gpt-oss ships it; a dense model: every layer
        return WeightFormat(weights, WEIGHT_BYTES[weights], COMPUTE_DTYPE[weights], experts_only=experts_only)
    q = model.quantization
    if q is None:
        return WeightFormat("bf16", WEIGHT_BYTES["bf16"], "bf16", source="default")
    if q.bytes_per_param is None:
        raise ConfigError(f"the config's quantization_config ({q.method!r}) is not one tokspeed can size",
                          hint=f"give the format with --weights ({', '.join(WEIGHT_BYTES)})")
    return WeightFormat(q.label, q.bytes_per_param, q.compute, q.experts_only, source="quantization_config")


def compute_dtype(model: ModelSpec, weights: str) -> str:
    """The matmul path of `weights` for this model (bf16, fp8 or int8)."""
    return weight_format(model, weights).compute


def quantized_params(model: ModelSpec, fmt: WeightFormat) -> int:
    """Parameters stored in `fmt`: the routed experts for experts-only formats, else every layer matrix."""
    return model.routed_expert_params if fmt.experts_only else model.linear_params


def weight_bytes(model: ModelSpec, weights: str) -> float:
    """Bytes of every stored weight: quantized params × bytes per param + the rest × 2."""
    fmt = weight_format(model, weights)
    quantized = quantized_params(model, fmt)
    return quantized * fmt.bytes_per_param + (model.total_params - quantized) * UNQUANTIZED_BYTES


def experts_touched_fraction(model: ModelSpec, tokens: int) -> float:
    """Expected share of a layer's experts that `tokens` tokens route to: 1 − (1 − k/E)^tokens (1 when dense)."""
    if not model.is_moe:
        return 1.0
    return 1.0 - (1.0 - model.experts_per_token / model.num_experts) ** max(tokens, 1)


def weight_bytes_read(model: ModelSpec, weights: str, tokens: int) -> float:
    """Weight bytes one step reads for `tokens` tokens: all but the embedding table (a lookup reads
    only its rows) and, for a mixture of experts, only the routed experts those tokens go to."""
    fmt = weight_format(model, weights)
    table = 0 if model.tied_embeddings else model.embedding_params * UNQUANTIZED_BYTES
    experts = model.routed_expert_params * fmt.bytes_per_param
    untouched = experts * (1.0 - experts_touched_fraction(model, tokens))
    return weight_bytes(model, weights) - table - untouched


@dataclass(frozen=True, slots=True)
class KVProfile:
    """KV bytes per token of the global layers (g) and of the sliding-window layers (s, window W)."""

    global_bytes_per_token: float
    window_bytes_per_token: float = 0.0
    window: int | None = None

    @property
    def full_bytes_per_token(self) -> float:
        """Bytes per token while the sequence is within the window: every layer holds it (g + s)."""
        return self.global_bytes_per_token + self.window_bytes_per_token

    def sequence_bytes(self, tokens: float) -> float:
        """KV(L) = g × L + s × min(L, W)."""
        windowed = min(tokens, self.window) if self.window else tokens
        return self.global_bytes_per_token * tokens + self.window_bytes_per_token * windowed

    def bytes_per_token(self, tokens: float) -> float:
        """The mean per token of a sequence of `tokens`: KV(L) ÷ L."""
        return self.sequence_bytes(tokens) / tokens if tokens > 0 else self.full_bytes_per_token


def kv_copies(model: ModelSpec, gpus: int) -> float:
    """How many copies of each token's KV N tensor-parallel GPUs hold: N × max(1, kv_heads ÷ N) ÷ kv_heads
    (1 while every GPU has its own heads), N for MLA."""
    if gpus <= 1:
        return 1.0
    if model.is_mla:
        return float(gpus)
    return gpus * max(1, model.num_kv_heads // gpus) / model.num_kv_heads


def kv_profile(model: ModelSpec, kv: str, gpus: int = 1) -> KVProfile:
    """Each layer's cached bytes per token (see the module docstring), split into global and windowed
    layers, summed over the copies `gpus` tensor-parallel GPUs hold."""
    per_layer = model.kv_elements_per_token_per_layer * KV_BYTES[kv] * kv_copies(model, gpus)
    return KVProfile(per_layer * model.global_layers, per_layer * model.window_layers, model.sliding_window)


def kv_bytes_per_token(model: ModelSpec, kv: str, context_tokens: float | None = None) -> float:
    """KV cache per token: every layer's when `context_tokens` is None (or within the window), else the
    mean over a sequence of that length, KV(L) ÷ L. GQA: 2 × layers × kv_heads × head_dim × KV_BYTES[kv]."""
    profile = kv_profile(model, kv)
    return profile.full_bytes_per_token if context_tokens is None else profile.bytes_per_token(context_tokens)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How the GPU memory divides: usable = memory × utilization; KV budget = usable − weights − reserve.

    `kv_bytes_per_token` is the mean over a sequence of `sequence_tokens` (the workload's), which for
    sliding-window models falls as sequences grow, and counts every tensor-parallel copy (`kv_copies`)."""

    memory_bytes: float
    usable_bytes: float
    weights_bytes: float
    reserve_bytes: float
    kv_bytes_per_token: float
    kv: KVProfile | None = None
    sequence_tokens: int = 0
    kv_copies: float = 1.0

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
        """Sequences of this length that fit at once: floor(KV budget ÷ KV(tokens per sequence))."""
        tokens = max(tokens_per_sequence, 1)
        if self.kv is None:
            return self.kv_cache_tokens // tokens
        return int(self.kv_budget_bytes // self.kv.sequence_bytes(tokens))


def memory_plan(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    weights: str,
    kv: str,
    gpus: int = 1,
    utilization: float = 0.9,
    reserve_gib_per_gpu: float = RESERVE_GIB_PER_GPU,
    sequence_tokens: int | None = None,
) -> MemoryPlan:
    """Size the KV cache as vLLM does: of memory × gpu_memory_utilization, what weights and the reserve leave."""
    memory = gpu.memory_bytes * gpus
    profile = kv_profile(model, kv, gpus)
    return MemoryPlan(
        memory_bytes=memory,
        usable_bytes=memory * utilization,
        weights_bytes=weight_bytes(model, weights),
        reserve_bytes=reserve_gib_per_gpu * (1 << 30) * gpus,
        kv_bytes_per_token=profile.bytes_per_token(sequence_tokens) if sequence_tokens else profile.full_bytes_per_token,
        kv=profile,
        sequence_tokens=sequence_tokens or 0,
        kv_copies=kv_copies(model, gpus),
    )


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step's work and its lower-bound time: max(bytes ÷ bandwidth, FLOPs ÷ peak) + all-reduces."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float = 0.0
    comm_bytes: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s

    @property
    def bound(self) -> Literal["memory", "compute", "interconnect"]:
        if self.comm_s > max(self.compute_s, self.memory_s):
            return "interconnect"
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def flops_per_byte(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def _attention_pairs(model: ModelSpec, query_tokens: float, context: float, causal: bool) -> float:
    """(query, key) pairs summed over layers: global layers see the whole context, window layers at most W.

    Causal prefill of n tokens: n²/2 pairs a global layer, W²/2 + (n − W)·W a window layer when n > W.
    Decode: `query_tokens` sequences, each at `context` tokens."""
    w = model.sliding_window
    if causal:
        n = context
        full = n * n / 2
        windowed = full if not w or n <= w else w * w / 2 + (n - w) * w
    else:
        full = query_tokens * context
        windowed = query_tokens * (min(context, w) if w else context)
    return model.global_layers * full + model.window_layers * windowed


def prefill_flops(model: ModelSpec, prompt_tokens: int) -> float:
    """2 × (matmul params − LM head) × n + 2 × LM head (the last token's logits only) + causal attention:
    attention FLOPs per pair × pairs (n²/2 a global layer; see _attention_pairs)."""
    n = prompt_tokens
    if n <= 0:
        return 0.0
    body = model.matmul_params - model.lm_head_matmul_params
    attention = model.attention_flops_per_pair * _attention_pairs(model, n, n, causal=True)
    return 2.0 * body * n + 2.0 * model.lm_head_matmul_params + attention


def decode_flops(model: ModelSpec, sequences: float, context_tokens: float) -> float:
    """Per decode step: sequences × 2 × matmul params + attention FLOPs per pair × sequences × context
    (per layer; window layers at most W). GQA/MHA: 4 × heads·head_dim FLOPs per pair."""
    attention = model.attention_flops_per_pair * _attention_pairs(model, sequences, context_tokens, causal=False)
    return sequences * 2.0 * model.matmul_params + attention


def allreduce_seconds(model: ModelSpec, gpu: GPUSpec, gpus: int, tokens: int) -> tuple[float, float]:
    """Tensor parallelism's all-reduces in one step of `tokens` tokens: (seconds, bytes each GPU sends).

    2 × layers × (α + 2(N − 1)/N × tokens × hidden × 2 B ÷ per-direction link bandwidth); 0 for one GPU
    or a device with no interconnect figure."""
    if gpus <= 1 or tokens <= 0 or not gpu.interconnect_gb_s:
        return 0.0, 0.0
    collectives = 2 * model.num_layers
    message = tokens * model.hidden_size * ACTIVATION_BYTES
    sent = collectives * 2 * (gpus - 1) / gpus * message
    per_direction = gpu.interconnect_gb_s / 2 * 1e9
    return collectives * ALLREDUCE_LATENCY_S + sent / per_direction, sent


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
    `context_tokens` each. Bytes: the weights read once + KV read by the decodes + KV written by the prompt
    (every tensor-parallel copy of it)."""
    profile = kv_profile(model, kv, gpus)
    tokens = prompt_tokens + round(decode_sequences)
    flops = prefill_flops(model, prompt_tokens) + decode_flops(model, decode_sequences, context_tokens)
    moved = (
        weight_bytes_read(model, weights, tokens)
        + decode_sequences * profile.sequence_bytes(context_tokens)
        + profile.sequence_bytes(prompt_tokens)
    )
    comm_s, comm_bytes = allreduce_seconds(model, gpu, gpus, tokens)
    return Step(
        flops=flops,
        bytes=moved,
        compute_s=flops / (gpu.peak_flops(compute_dtype(model, weights)) * gpus),
        memory_s=moved / (gpu.bandwidth_bytes_per_s * gpus),
        comm_s=comm_s,
        comm_bytes=comm_bytes,
    )


def ridge_flops_per_byte(gpu: GPUSpec, weights: str, model: ModelSpec | None = None) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ bytes/s. A step doing fewer FLOPs per byte is memory-bound."""
    compute = compute_dtype(model, weights) if model is not None else COMPUTE_DTYPE.get(weights, "bf16")
    return gpu.peak_flops(compute) / gpu.bandwidth_bytes_per_s
