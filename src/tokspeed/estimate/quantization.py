"""A checkpoint's stored weight format (`Quantization`) from its `quantization_config`.

Bytes per quantized parameter, scales and zero points included (see docs/estimate.md):

    awq, gptq (bits b, group_size g)   b/8 + (2 + b/8)/g    an FP16 scale and a b-bit zero per group
    fp8, fbgemm_fp8                     1                    block or channel scales ignored (< 0.1%)
    compressed-tensors                  the first config group: 8-bit 1, int b/g as above, NVFP4 0.5 + 1/16
    bitsandbytes                        nf4 0.5 + 4/64 (an fp32 absmax per 64), int8 1
    mxfp4 (gpt-oss)                     0.5 + 1/32, the routed experts only when attention is kept out
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Quantization:
    """A checkpoint's stored weight format, from its `quantization_config`.

    `bytes_per_param` counts the packed weights with their scales and zero points; `compute` is
    the tensor path the matmuls run on (W4A16 formats dequantize to bf16); `experts_only` means
    only the routed experts are quantized (gpt-oss's MXFP4 keeps attention and router in bf16).
    `bytes_per_param` is None for a method tokspeed cannot size."""

    method: str
    label: str
    bytes_per_param: float | None
    compute: str = "bf16"
    experts_only: bool = False


def _int4_like(bits: float, group: int, zero_points: bool = True) -> float:
    """Bytes per weight of a grouped integer format: bits/8 + (an FP16 scale + a packed zero) per group."""
    if group is None or group <= 0:
        return bits / 8  # per output channel: the scales are negligible
    return bits / 8 + (2 + (bits / 8 if zero_points else 0)) / group


def quantization_from_config(cfg: dict[str, Any]) -> Quantization | None:
    """Read `quantization_config` (AWQ, GPTQ, FP8, compressed-tensors, bitsandbytes, MXFP4); None when absent."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or ("bitsandbytes" if "load_in_4bit" in q or "load_in_8bit" in q else "")).lower()
    skipped = " ".join(str(m) for m in q.get("modules_to_not_convert") or q.get("ignore") or [])
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "autoround"):
        bits, group = int(q.get("bits", 4)), int(q.get("group_size", 128) or -1)
        zeros = bool(q.get("zero_point", True)) if method.startswith("awq") else True  # GPTQ packs qzeros even when sym
        return Quantization(method, f"{method} int{bits} g{group}", _int4_like(bits, group, zeros))
    if method in ("fp8", "fbgemm_fp8"):
        return Quantization(method, "fp8", 1.0, compute="fp8")
    if method == "mxfp4":
        experts_only = "attn" in skipped  # gpt-oss keeps attention, router, embeddings and head in bf16
        return Quantization(method, "mxfp4 experts" if experts_only else "mxfp4", 0.5 + 1 / 32, experts_only=experts_only)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return Quantization(method, "bitsandbytes nf4", 0.5 + 4 / 64)  # an fp32 absmax per 64 weights
        return Quantization(method, "bitsandbytes int8", 1.0)
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    return Quantization(method or "unknown", method or "unknown", None)


def _compressed_tensors(q: dict[str, Any]) -> Quantization:
    """compressed-tensors (llm-compressor): the first config group's weight and activation schemes."""
    groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
    weights = (groups[0].get("weights") if groups else None) or {}
    acts = groups[0].get("input_activations") if groups else None
    bits, kind = int(weights.get("num_bits", 8)), str(weights.get("type", "int"))
    group = int(weights.get("group_size") or -1)
    if kind == "float" and bits == 4:  # NVFP4: an FP8 scale per 16 weights
        size, label = 0.5 + 1 / (group if group > 0 else 16), "nvfp4"
    elif bits >= 8:
        size, label = 1.0, f"{'fp' if kind == 'float' else 'int'}8"
    else:
        size, label = _int4_like(bits, group, zero_points=not weights.get("symmetric", True)), f"int{bits} g{group}"
    compute = "bf16"
    if acts and int(acts.get("num_bits", 16)) == 8:  # W8A8
        compute = "fp8" if str(acts.get("type", "int")) == "float" else "int8"
    return Quantization("compressed-tensors", f"compressed-tensors {label}", size, compute=compute)
