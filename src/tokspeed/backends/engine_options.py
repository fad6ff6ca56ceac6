"""Engine flags for in-process targets: what `--dtype`, `--device`, `--tensor-parallel-size`, ... ask for.

    EngineOptions(dtype="bf16", max_num_seqs=16)     the flags as given (None: not given)
    options.check("vllm")                            ConfigError for a flag the target does not take
    options.given() -> {"--dtype": "bf16", ...}       for run.json and messages
    parse_engine_args(["enforce_eager=true"])        --engine-arg KEY=VALUE -> {"enforce_eager": True}

Which target takes which flag:

| flag | hf: | vllm: |
|---|---|---|
| --dtype auto/bf16/fp16/fp32 | yes | yes |
| --device auto/cpu/cuda[:N] | yes | no (vLLM picks its platform) |
| --trust-remote-code | yes | yes |
| --engine-arg KEY=VALUE | from_pretrained() | LLM() |
| --tensor-parallel-size, --gpu-memory-utilization, --max-num-seqs, --max-model-len, --enforce-eager, --quantization, --kv-cache-dtype, --load-format | no | yes |

A server (`--target URL`) and the embedded model take none of them: a server
was configured when it was started.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from tokspeed.errors import ConfigError

DTYPES = {"auto": "auto", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
          "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}
DEVICES = ("auto", "cpu", "cuda")

# flag name -> the field of EngineOptions it sets
FLAGS = {
    "--dtype": "dtype",
    "--device": "device",
    "--trust-remote-code": "trust_remote_code",
    "--engine-arg": "engine_args",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--max-num-seqs": "max_num_seqs",
    "--max-model-len": "max_model_len",
    "--enforce-eager": "enforce_eager",
    "--quantization": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--load-format": "load_format",
}
_HF_FLAGS = frozenset({"--dtype", "--device", "--trust-remote-code", "--engine-arg"})
_VLLM_FLAGS = frozenset(FLAGS) - {"--device"}
ACCEPTS = {"hf": _HF_FLAGS, "vllm": _VLLM_FLAGS}


@dataclass(frozen=True)
class EngineOptions:
    """Engine flags as the user gave them; None (or False, or empty) means "not given: engine default"."""

    dtype: str | None = None
    device: str | None = None
    trust_remote_code: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    enforce_eager: bool = False
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    load_format: str | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype.lower() not in DTYPES:
            raise ConfigError(f"--dtype {self.dtype!r} is not one of auto, bf16, fp16, fp32")
        if self.device is not None and not _valid_device(self.device):
            raise ConfigError(f"--device {self.device!r} is not one of auto, cpu, cuda (or cuda:N)")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], not {self.gpu_memory_utilization}")

    @property
    def torch_dtype(self) -> str:
        """`auto`, `bfloat16`, `float16` or `float32`."""
        return DTYPES[(self.dtype or "auto").lower()]

    @property
    def device_name(self) -> str:
        return (self.device or "auto").lower()

    def given(self) -> dict[str, Any]:
        """{flag: value} for every flag that was given."""
        out: dict[str, Any] = {}
        for flag, name in FLAGS.items():
            value = getattr(self, name)
            if value not in (None, False, {}):
                out[flag] = value
        return out

    def check(self, kind: str | None) -> None:
        """ConfigError when a flag was given that the target `kind` (hf, vllm, or None) does not take."""
        accepted = ACCEPTS.get(kind or "", frozenset())
        refused = [flag for flag in self.given() if flag not in accepted]
        if not refused:
            return
        names = ", ".join(refused)
        if kind is None:
            raise ConfigError(
                f"{names} {'applies' if len(refused) == 1 else 'apply'} only to in-process engines (--target hf:PATH or vllm:PATH)",
                hint="a server's dtype, device and batch limits are set when the server is started",
            )
        takers = [k for k, flags in ACCEPTS.items() if all(f in flags for f in refused)]
        where = f"; {' and '.join(k + ':' for k in takers)} targets take it" if takers else ""
        raise ConfigError(f"--target {kind}: does not take {names}{where}")


    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "scenario engine") -> EngineOptions:
        """Options from a scenario file's `engine:` mapping (keys as the flags, `-` or `_`)."""
        names = {f.name for f in fields(cls)}
        known = sorted(names | {"engine_arg"})
        options: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name == "engine_arg":  # the flag's spelling: a mapping or KEY=VALUE strings
                name = "engine_args"
                value = value if isinstance(value, dict) else parse_engine_args(list(value or ()))
            if name not in names:
                raise ConfigError(f"{where}: unknown option {key!r}", hint=f"known: {', '.join(known)}")
            options[name] = value
        return cls(**options)

    def over(self, base: EngineOptions) -> EngineOptions:
        """These options where given, `base`'s elsewhere (flags win over a scenario file)."""
        merged = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in merged.items():
            if value in (None, False, {}):
                merged[name] = getattr(base, name)
        if base.engine_args and self.engine_args:
            merged["engine_args"] = {**base.engine_args, **self.engine_args}
        return EngineOptions(**merged)

    def as_mapping(self) -> dict[str, Any]:
        """The given options by name, for run.json's config."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) not in (None, False, {})}


def _valid_device(device: str) -> bool:
    name, _, number = device.lower().partition(":")
    return name in DEVICES and (not number or (name == "cuda" and number.isdigit()))


def parse_engine_args(items: list[str] | None) -> dict[str, Any]:
    """`--engine-arg KEY=VALUE` (repeatable): VALUE is parsed as JSON when it is JSON, else kept as text."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--engine-arg {item!r} is not KEY=VALUE", hint="e.g. --engine-arg enable_prefix_caching=false")
        try:
            out[key] = orjson.loads(text)
        except orjson.JSONDecodeError:
            out[key] = text
    return out
