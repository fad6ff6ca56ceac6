"""How close a measured run came to the hardware: MBU and MFU of its decode and prefill.

For one saved load point with concurrency C (the profile's, or by Little's law
requests/s × mean E2E for open-loop runs), mean input I and mean output O tokens:

    decode step bytes  = weights read + C × (I + O/2) × KV bytes per token      (as the estimate)
    MBU                = decode step bytes ÷ mean ITL ÷ (peak bandwidth × GPUs)
    decode MFU         = decode step FLOPs ÷ mean ITL ÷ (peak FLOP/s × GPUs)
    prefill MFU        = prefill FLOPs(I) ÷ median TTFT ÷ (peak FLOP/s × GPUs)
                         (prefill FLOPs count the LM head for the last prompt token only, as engines do)
    of speed of light  = measured output tokens/s ÷ the estimate's bound at C

TTFT includes the network and any queueing, so prefill MFU is a lower bound on the engine's.
`weights` is a format name or `auto` (the checkpoint's quantization_config); with GPUs > 1 the
speed of light includes tensor parallelism's all-reduces (bounds.allreduce_seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokspeed.estimate.bounds import compute_dtype, engine_step, prefill_flops
from tokspeed.estimate.hardware import GPUSpec
from tokspeed.estimate.model import ModelSpec
from tokspeed.metrics.schema import Summary


@dataclass(frozen=True, slots=True)
class Efficiency:
    """One load point's achieved rates and their share of the peaks; None where the run lacks the data."""

    name: str
    concurrency: float | None
    achieved_decode_gb_s: float | None
    mbu: float | None
    decode_mfu: float | None
    prefill_mfu: float | None
    output_tokens_per_s: float | None
    speed_of_light_output_tokens_per_s: float | None

    @property
    def fraction_of_speed_of_light(self) -> float | None:
        if self.output_tokens_per_s is None or not self.speed_of_light_output_tokens_per_s:
            return None
        return self.output_tokens_per_s / self.speed_of_light_output_tokens_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.name,
            "concurrency": self.concurrency,
            "achieved_decode_gb_s": self.achieved_decode_gb_s,
            "mbu": self.mbu,
            "decode_mfu": self.decode_mfu,
            "prefill_mfu": self.prefill_mfu,
            "output_tokens_per_s": self.output_tokens_per_s,
            "speed_of_light_output_tokens_per_s": self.speed_of_light_output_tokens_per_s,
            "fraction_of_speed_of_light": self.fraction_of_speed_of_light,
        }


def run_concurrency(profile: dict[str, Any], summary: Summary) -> float | None:
    """Sequences in flight: the profile's concurrency for closed loops, else requests/s × mean E2E (Little's law)."""
    if profile.get("kind") in ("synchronous", "concurrency") and profile.get("concurrency"):
        return float(profile["concurrency"])
    rps, e2e = summary.throughput.requests_per_s, summary.e2e_ms.mean
    return rps * e2e / 1e3 if rps and e2e else None


def efficiency(
    name: str,
    profile: dict[str, Any],
    summary: Summary,
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    weights: str,
    kv: str,
    gpus: int = 1,
) -> Efficiency:
    """MBU and MFU of one saved load point (see the module docstring for the formulas)."""
    conc = run_concurrency(profile, summary)
    itl, ttft = summary.itl_ms.mean, summary.ttft_ms.p50
    inp, out = summary.input_tokens.mean, summary.output_tokens.mean
    peak_flops = gpu.peak_flops(compute_dtype(model, weights)) * gpus
    peak_bytes = gpu.bandwidth_bytes_per_s * gpus
    mbu = decode_mfu = gb_s = sol = None
    if conc and itl and inp is not None and out is not None:
        step = engine_step(model, gpu, weights=weights, kv=kv, gpus=gpus, decode_sequences=conc,
                           context_tokens=inp + out / 2)
        gb_s = step.bytes / (itl / 1e3) / 1e9
        mbu = gb_s * 1e9 / peak_bytes
        decode_mfu = step.flops / (itl / 1e3) / peak_flops
        sol = conc / step.seconds
    prefill_mfu = None
    if ttft and inp:
        prefill_mfu = prefill_flops(model, round(inp)) / (ttft / 1e3) / peak_flops
    return Efficiency(name, conc, gb_s, mbu, decode_mfu, prefill_mfu, summary.throughput.output_tokens_per_s, sol)
