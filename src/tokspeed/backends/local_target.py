"""In-process engine targets: `hf:PATH` (transformers) and `vllm:PATH` (vLLM's offline engine).

    engine_kind("hf:./m") -> "hf"          None for URLs and the embedded model
    engine_path("hf:./m") -> "./m"
    normalise_engine_target("hf:./m")      "hf:/abs/m", after checking PATH is a model directory

PATH must be a local model directory (a `config.json` beside the weights and
tokenizer files): tokspeed never downloads a model. Pure path checks; no
engine is imported here.
"""

from __future__ import annotations

from pathlib import Path

from tokspeed.errors import ConfigError

ENGINE_KINDS = ("hf", "vllm")
_DOWNLOAD_HINT = "download it first, e.g. hf download NAME --local-dir DIR, then pass {kind}:DIR"


def engine_kind(target: str | None) -> str | None:
    """`hf` or `vllm` for an in-process engine target, else None."""
    if target is None:
        return None
    prefix, sep, _ = target.partition(":")
    return prefix if sep and prefix in ENGINE_KINDS else None


def engine_path(target: str) -> str:
    """The model directory named by an engine target."""
    if engine_kind(target) is None:
        raise ConfigError(f"{target!r} is not an hf: or vllm: target")
    return target.partition(":")[2]


def normalise_engine_target(target: str) -> str:
    """`KIND:/absolute/path` once PATH is checked to be a model directory; ConfigError otherwise."""
    kind = engine_kind(target)
    if kind is None:
        raise ConfigError(f"{target!r} is not an hf: or vllm: target")
    raw = engine_path(target)
    if not raw:
        raise ConfigError(f"--target {kind}: needs a model directory", hint=f"e.g. --target {kind}:./my-model")
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"--target {target}: no model directory at {raw}",
            hint=_DOWNLOAD_HINT.format(kind=kind),
        )
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"--target {target}: {raw} has no config.json, so it is not a Hugging Face model directory",
            hint=_DOWNLOAD_HINT.format(kind=kind),
        )
    return f"{kind}:{path.resolve()}"
