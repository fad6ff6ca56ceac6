"""Accelerator datasheet numbers (`GPUSpec`): memory, memory bandwidth and dense tensor throughput.

Throughput is *dense* (no 2:4 sparsity) with FP32 accumulation where the vendor states both
(GeForce cards run BF16 at half rate with FP32 accumulate). Memory is as vendors label it, in
GiB; bandwidth in GB/s (1e9 bytes/s), throughput in TFLOPS (1e12/s); None where the chip has
no such tensor path. Sources (vendor datasheets and whitepapers):

- RTX 3090: NVIDIA Ampere GA102 whitepaper, table 9 (BF16 71 dense FP32-acc, INT8 284).
- RTX 4090: NVIDIA Ada Lovelace architecture whitepaper, appendix table (BF16 165.2, FP8 330.3, INT8 660.6).
- L4: NVIDIA L4 datasheet (BF16 242, FP8 485, INT8 485 TOPS, all with sparsity; halved here).
- L40S: NVIDIA L40S datasheet (BF16 362, FP8 733, INT8 733 dense).
- A10G: AWS does not publish it; NVIDIA A10 datasheet figures (BF16 125, INT8 250 dense), 600 GB/s.
- A100 40/80: NVIDIA A100 datasheet, SXM (BF16 312, INT8 624; 1,555 and 2,039 GB/s).
- H100 PCIe/SXM: NVIDIA H100 datasheet (PCIe: BF16 756, FP8 1,513, 2.0 TB/s; SXM: 989, 1,979, 3.35 TB/s).
- H200: NVIDIA H200 datasheet (SXM: 141 GB, 4.8 TB/s; H100 SXM compute).
- B200: NVIDIA HGX B200 datasheet (per GPU: 180 GB, 8 TB/s, FP8 4.5 PF and BF16 2.25 PF dense).
- MI300X: AMD Instinct MI300X datasheet (192 GB, 5.3 TB/s, BF16 1,307.4, FP8/INT8 2,614.9 dense).

Interconnect: the GPU-to-GPU bandwidth tensor parallelism's all-reduces use, in GB/s summed over
both directions as datasheets state it (the all-reduce formula in bounds.py uses half, per
direction): NVLink 3 600 (A100 SXM), NVLink 4 900 (H100 SXM, H200), NVLink 5 1,800 (B200),
Infinity Fabric 896 (MI300X: 7 links × 128), and for PCIe cards their slot: PCIe 5.0 x16 128
(H100 PCIe, without the optional NVLink bridge), PCIe 4.0 x16 64 (L4, L40S, A10G, RTX 3090/4090).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokspeed.errors import ConfigError

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator's datasheet: memory (GiB), bandwidth (GB/s), dense TFLOPS by input dtype."""

    name: str
    memory_gib: float
    bandwidth_gb_s: float
    bf16_tflops: float
    fp8_tflops: float | None = None
    int8_tops: float | None = None
    interconnect: str = ""
    interconnect_gb_s: float | None = None  # GPU to GPU, both directions summed

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gb_s * 1e9

    def compute_path(self, compute: str) -> str:
        """The tensor path matmuls in `compute` run on: itself, or bf16 where the chip lacks it (FP8 on an A100)."""
        tflops = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "int8": self.int8_tops}[compute]
        return compute if tflops is not None else "bf16"

    def peak_flops(self, compute: str) -> float:
        """Dense FLOP/s for matmuls in `compute` (bf16, fp8 or int8), on the path `compute_path` names."""
        path = self.compute_path(compute)
        return {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "int8": self.int8_tops}[path] * 1e12  # type: ignore[operator]


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("rtx3090", 24, 936, 71, None, 284, "PCIe 4.0 x16", 64),
        GPUSpec("rtx4090", 24, 1008, 165.2, 330.3, 660.6, "PCIe 4.0 x16", 64),
        GPUSpec("l4", 24, 300, 121, 242.5, 242.5, "PCIe 4.0 x16", 64),
        GPUSpec("l40s", 48, 864, 362, 733, 733, "PCIe 4.0 x16", 64),
        GPUSpec("a10g", 24, 600, 125, None, 250, "PCIe 4.0 x16", 64),
        GPUSpec("a100-40gb", 40, 1555, 312, None, 624, "NVLink 3", 600),
        GPUSpec("a100-80gb", 80, 2039, 312, None, 624, "NVLink 3", 600),
        GPUSpec("h100-pcie", 80, 2000, 756, 1513, 1513, "PCIe 5.0 x16", 128),
        GPUSpec("h100-sxm", 80, 3350, 989, 1979, 1979, "NVLink 4", 900),
        GPUSpec("h200", 141, 4800, 989, 1979, 1979, "NVLink 4", 900),
        GPUSpec("b200", 180, 8000, 2250, 4500, 4500, "NVLink 5", 1800),
        GPUSpec("mi300x", 192, 5300, 1307.4, 2614.9, 2614.9, "Infinity Fabric", 896),
    )
}

_ALIASES = {"4090": "rtx4090", "3090": "rtx3090", "a100": "a100-80gb", "h100": "h100-sxm", "a10": "a10g"}

# The CPU entry: its numbers are the machine's, so bandwidth must be given; these are placeholders
# for a desktop (dual-channel DDR5 ≈ 80 GB/s, ~1 TFLOPS BF16 with AVX-512/AMX at best).
CPU = GPUSpec("cpu", 64, 0, 1.0)


def known_gpus() -> list[str]:
    return sorted([*GPUS, "cpu"])


def load_gpu(
    name: str,
    memory_gb: float | None = None,
    bandwidth_gb_s: float | None = None,
    tflops: float | None = None,
    interconnect_gb_s: float | None = None,
) -> GPUSpec:
    """The named accelerator with any datasheet number overridden (`tflops` sets every dtype's peak).

    Raises ConfigError for an unknown name (the hint lists the known ones), and for `cpu`
    without a bandwidth."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key == "cpu":
        if bandwidth_gb_s is None:
            raise ConfigError("the cpu entry needs its memory bandwidth", hint="pass --bandwidth-gb-s (dual-channel DDR5 ≈ 80)")
        spec = CPU
    elif key in GPUS:
        spec = GPUS[key]
    else:
        raise ConfigError(f"unknown GPU {name!r}", hint=f"known GPUs: {', '.join(known_gpus())}; or override with --bandwidth-gb-s, --tflops, --gpu-memory-gb")
    overrides = (("--gpu-memory-gb", memory_gb), ("--bandwidth-gb-s", bandwidth_gb_s), ("--tflops", tflops),
                 ("--interconnect-gb-s", interconnect_gb_s))
    for label, value in overrides:
        if value is not None and value <= 0:
            raise ConfigError(f"{label} must be positive, got {value:g}")
    if memory_gb is not None:
        spec = replace(spec, memory_gib=memory_gb)
    if bandwidth_gb_s is not None:
        spec = replace(spec, bandwidth_gb_s=bandwidth_gb_s)
    if tflops is not None:
        spec = replace(spec, bf16_tflops=tflops, fp8_tflops=tflops, int8_tops=tflops)
    if interconnect_gb_s is not None:
        spec = replace(spec, interconnect="--interconnect-gb-s", interconnect_gb_s=interconnect_gb_s)
    return spec
