"""Load a local transformers causal LM for an `hf:` target: choose device and dtype, load tokenizer and model.

Device `auto` is the first CUDA GPU when torch sees one, else the CPU; `cuda`
without a GPU is a ConfigError, never a silent fall-back. Dtype `auto` is, on
a GPU, the checkpoint's own half-precision dtype (an fp32 checkpoint runs in
bf16 where the GPU supports it, else fp16, as vLLM does); on the CPU it is
bf16 where the CPU has native bf16 (avx512_bf16/AMX), else fp32 (emulated bf16
is often slower than fp32). torch and transformers are imported lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from tokspeed.backends.embedded.hardware import choose_dtype
from tokspeed.errors import ConfigError

HALF = ("bfloat16", "float16")


@dataclass(frozen=True)
class LoadedModel:
    """The tokenizer and the model in eval mode, where and how it runs."""

    tokenizer: Any
    model: Any
    device: str
    dtype: str
    parameters: int
    architecture: str
    max_context: int | None
    seconds: float


def resolve_device(requested: str, cuda_available: bool, torch_version: str = "", cuda_build: str | None = None) -> str:
    """`cpu` or `cuda[:N]` for the requested `auto`, `cpu` or `cuda[:N]`."""
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    if requested.startswith("cuda") and not cuda_available:
        build = "a CPU-only build" if cuda_build is None else f"built for CUDA {cuda_build}"
        raise ConfigError(
            f"--device {requested} was asked for, but torch {torch_version} ({build}) sees no CUDA GPU",
            hint="use --device cpu here, or run on a machine with a GPU and a CUDA build of torch",
        )
    return requested


def resolve_dtype(requested: str, device: str, checkpoint: str | None, *, cpu_choice: str, gpu_bf16: bool) -> str:
    """The torch dtype name to run in for the requested `auto`, `bfloat16`, `float16` or `float32`."""
    if requested != "auto":
        return requested
    if device == "cpu":
        return cpu_choice
    if checkpoint in HALF:
        return checkpoint
    return "bfloat16" if gpu_bf16 else "float16"


def checkpoint_dtype(path: Path) -> str | None:
    """The dtype config.json records for the weights (`dtype`, or the older `torch_dtype`), if any."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value) if value else None


def choose(path: Path, device_request: str, dtype_request: str) -> tuple[str, str]:
    """(device, dtype) for this machine; ConfigError for a GPU that is not there."""
    import torch

    cuda = torch.cuda.is_available()
    device = resolve_device(device_request, cuda, torch.__version__, torch.version.cuda)
    gpu_bf16 = bool(cuda and device != "cpu" and torch.cuda.is_bf16_supported())
    dtype = resolve_dtype(dtype_request, device, checkpoint_dtype(path), cpu_choice=choose_dtype(), gpu_bf16=gpu_bf16)
    return device, dtype


def load_model(path: Path, *, device: str, dtype: str, trust_remote_code: bool, extra: dict[str, Any]) -> LoadedModel:
    """Tokenizer and model from `path` (local files only), moved to `device` and put in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code, local_files_only=True)
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=getattr(torch, dtype),
        trust_remote_code=trust_remote_code,
        local_files_only=True,
        **extra,
    )
    model = model.to(torch.device(device)).eval()
    config = model.config
    context = getattr(config, "max_position_embeddings", None)
    return LoadedModel(
        tokenizer=tokenizer,
        model=model,
        device=device,
        dtype=dtype,
        parameters=sum(p.numel() for p in model.parameters()),
        architecture=(getattr(config, "architectures", None) or [type(model).__name__])[0],
        max_context=int(context) if isinstance(context, int) else None,
        seconds=perf_counter() - t0,
    )
