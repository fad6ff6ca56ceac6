"""`tokspeed estimate`: the speed of light of a model on a GPU, and how its memory divides.

Also holds the hardware flags `tokspeed efficiency` shares (`--gpu`, `--gpus`, overrides).
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated

import orjson
import typer

from tokspeed.errors import ConfigError
from tokspeed.estimate.hardware import GPUSpec

HELP = """Estimate from first principles what a model can do on a GPU: memory sizing and speed of light.

Sizes the weights and the KV cache (how many concurrent sequences fit before an
OOM), and bounds TTFT, ITL and output tokens/s per concurrency by bytes ÷
bandwidth and FLOPs ÷ peak compute, saying which bound applies. No GPU needed.

  tokspeed estimate --model llama-3-8b --gpu h100-sxm --concurrency 1,8,32

  tokspeed estimate --model ./Qwen3-30B-A3B/config.json --gpu h100-sxm --input-tokens 2048

  tokspeed estimate --model ./Qwen2-7B-Instruct/config.json --gpu rtx4090 --weights int4 --kv fp16

  tokspeed estimate --model mixtral-8x7b --gpu a100-80gb --gpus 2 --json
"""


class WeightFormat(str, Enum):
    auto = "auto"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"
    mxfp4 = "mxfp4"


class KVFormat(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"


ModelOpt = Annotated[str, typer.Option("--model", "-m", metavar="NAME|PATH", help="A builtin model name (llama-3-8b, qwen2-7b, mixtral-8x7b, …) or a Hugging Face config.json (or the directory holding it). [default: required]")]
GpuOpt = Annotated[str, typer.Option("--gpu", metavar="NAME", help="Accelerator: rtx3090, rtx4090, l4, l40s, a10g, a100-40gb, a100-80gb, h100-pcie, h100-sxm, h200, b200, mi300x, or cpu (with --bandwidth-gb-s). [default: required]")]
GpusOpt = Annotated[int, typer.Option("--gpus", min=1, help="GPUs serving the model (tensor parallel): memory, bandwidth and compute scale by it, and each step pays two all-reduces per layer over the interconnect.")]
WeightsOpt = Annotated[WeightFormat, typer.Option("--weights", help="Weight format: auto (the config's quantization_config, else bf16), bf16, fp16, fp8, int8 (W8A8), int4 (AWQ/GPTQ, groups of 128) or mxfp4 (experts only, as gpt-oss).")]
KVOpt = Annotated[KVFormat, typer.Option("--kv", help="KV-cache format: fp16, bf16 or fp8.")]
MemOpt = Annotated[float | None, typer.Option("--gpu-memory-gb", metavar="GIB", help="Override the memory per GPU, in GiB as vendors label it (an 80GB H100 is 80). [default: the GPU table's]")]
BwOpt = Annotated[float | None, typer.Option("--bandwidth-gb-s", metavar="GB/S", help="Override the memory bandwidth per GPU, in GB/s (required for --gpu cpu). [default: the GPU table's]")]
TflopsOpt = Annotated[float | None, typer.Option("--tflops", metavar="TFLOPS", help="Override the dense peak per GPU, in TFLOPS (used for every format). [default: the GPU table's]")]
InterconnectOpt = Annotated[float | None, typer.Option("--interconnect-gb-s", metavar="GB/S", help="Override the GPU-to-GPU bandwidth tensor parallelism's all-reduces use, in GB/s both directions summed (NVLink 4: 900). [default: the GPU table's]")]


def load_hardware(
    gpu: str, memory_gb: float | None, bandwidth_gb_s: float | None, tflops: float | None,
    interconnect_gb_s: float | None = None,
) -> GPUSpec:
    from tokspeed.estimate.hardware import load_gpu

    return load_gpu(gpu, memory_gb=memory_gb, bandwidth_gb_s=bandwidth_gb_s, tflops=tflops,
                    interconnect_gb_s=interconnect_gb_s)


def parse_concurrency(text: str) -> list[int]:
    """'1,8,32' → [1, 8, 32]; ConfigError for anything but positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ConfigError(f"--concurrency {text!r} is not a list of positive integers", hint="e.g. --concurrency 1,8,32")
    return values


def estimate(
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt = 1,
    weights: WeightsOpt = WeightFormat.auto,
    kv: KVOpt = KVFormat.fp16,
    input_tokens: Annotated[int, typer.Option("--input-tokens", min=1, help="Prompt tokens per request.")] = 512,
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=1, help="Generated tokens per request.")] = 256,
    concurrency: Annotated[str, typer.Option("--concurrency", "-c", metavar="N[,N...]", help="Sequences decoding at once, comma-separated: one row each.")] = "1,8,32",
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", min=1, help="Also size the KV cache for sequences of this many tokens (the engine's context limit). [default: none: not sized]")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization", min=0.01, max=1.0, help="Share of GPU memory the engine may use, as vLLM's flag.")] = 0.9,
    reserve_gb: Annotated[float, typer.Option("--reserve-gb", min=0.0, metavar="GIB", help="Memory per GPU held back for activations, CUDA graphs and workspaces, in GiB.")] = 2.0,
    gpu_memory_gb: MemOpt = None,
    bandwidth_gb_s: BwOpt = None,
    tflops: TflopsOpt = None,
    interconnect_gb_s: InterconnectOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the estimate as JSON (schema tokspeed.estimate/1); field names carry units.")] = False,
) -> int:
    from rich.console import Console

    from tokspeed.estimate.model import load_model
    from tokspeed.estimate.speed_of_light import Workload
    from tokspeed.estimate.speed_of_light import estimate as run_estimate
    from tokspeed.reports.estimate_text import render_estimate

    spec = load_model(model)
    hw = load_hardware(gpu, gpu_memory_gb, bandwidth_gb_s, tflops, interconnect_gb_s)
    workload = Workload(
        weights=weights.value, kv=kv.value, gpus=gpus, input_tokens=input_tokens, output_tokens=output_tokens,
        max_model_len=max_model_len, utilization=gpu_memory_utilization, reserve_gib_per_gpu=reserve_gb,
    )
    est = run_estimate(spec, hw, workload, parse_concurrency(concurrency))
    if json_out:
        print(orjson.dumps(est.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        Console(highlight=False, width=None if sys.stdout.isatty() else 140).print(render_estimate(est))
    return 0
