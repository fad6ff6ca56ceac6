"""`tokspeed run`'s engine flags (for `--target hf:PATH` and `vllm:PATH`), declared once.

Each flag is an annotated type for `run()`'s signature; `engine_options(...)`
turns their values into `EngineOptions`, which says which target takes which
flag (see `tokspeed.backends.engine_options`).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from tokspeed.backends.engine_options import EngineOptions, parse_engine_args

ENGINE = "Engine (in-process targets hf:PATH, vllm:PATH)"


def _opt(*names: str, help: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=ENGINE, **kw)


Dtype = Annotated[Optional[str], _opt("--dtype", help="Weights and compute dtype: auto, bf16, fp16 or fp32. [default: auto: the checkpoint's half dtype on a GPU; bf16 on a CPU with native bf16, else fp32; vLLM's own choice for vllm:]")]
Device = Annotated[Optional[str], _opt("--device", help="hf: only: auto, cpu or cuda[:N]; cuda without a GPU is an error. [default: auto: cuda when torch sees a GPU]")]
TrustRemoteCode = Annotated[bool, _opt("--trust-remote-code", help="Let the model directory run its own Python code (custom architectures).")]
EngineArg = Annotated[Optional[list[str]], _opt("--engine-arg", help="Any other engine keyword, KEY=VALUE (JSON value), repeatable: vllm.LLM(...) for vllm:, from_pretrained(...) for hf:, e.g. enable_prefix_caching=false. [default: none]")]
TensorParallel = Annotated[Optional[int], _opt("--tensor-parallel-size", help="vllm: GPUs to shard the model over. [default: 1]", min=1)]
GpuMemory = Annotated[Optional[float], _opt("--gpu-memory-utilization", help="vllm: fraction of GPU memory for weights and KV cache (0-1]. [default: vLLM's 0.92]")]
MaxNumSeqs = Annotated[Optional[int], _opt("--max-num-seqs", help="vllm: most sequences batched at once (limits throughput). [default: vLLM's]", min=1)]
MaxModelLen = Annotated[Optional[int], _opt("--max-model-len", help="vllm: context length (prompt + output) to size the KV cache for. [default: the model's]", min=1)]
EnforceEager = Annotated[bool, _opt("--enforce-eager", help="vllm: no CUDA graphs / compilation (faster start, slower decode).")]
Quantization = Annotated[Optional[str], _opt("--quantization", help="vllm: quantization method, e.g. awq, gptq, fp8. [default: from the checkpoint]")]
KvCacheDtype = Annotated[Optional[str], _opt("--kv-cache-dtype", help="vllm: KV cache dtype, e.g. auto, fp8. [default: vLLM's (auto)]")]
LoadFormat = Annotated[Optional[str], _opt("--load-format", help="vllm: how to load weights, e.g. auto, safetensors, dummy (random weights: speed without a checkpoint). [default: vLLM's (auto)]")]


def engine_options(
    *,
    dtype: str | None,
    device: str | None,
    trust_remote_code: bool,
    engine_arg: list[str] | None,
    tensor_parallel_size: int | None,
    gpu_memory_utilization: float | None,
    max_num_seqs: int | None,
    max_model_len: int | None,
    enforce_eager: bool,
    quantization: str | None,
    kv_cache_dtype: str | None,
    load_format: str | None,
) -> EngineOptions:
    """The engine flags as given; ConfigError for a value out of range."""
    return EngineOptions(
        dtype=dtype,
        device=device,
        trust_remote_code=trust_remote_code,
        engine_args=parse_engine_args(engine_arg),
        tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        enforce_eager=enforce_eager,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        load_format=load_format,
    )
