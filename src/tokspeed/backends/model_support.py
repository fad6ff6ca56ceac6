"""Can the chosen engine load this architecture: transformers' causal-LM mapping, vLLM's model registry.

    remote_code(config, tokenizer_config, directory) -> RemoteCode   what auto_map asks for
    transformers_support(model_type, architectures) -> Support        from the installed transformers
    vllm_support(architectures) -> Support                            from vLLM's registry, if vLLM imports

Answers come from the engine installed here (imported lazily); when it is not
installed the answer is "unknown" (`supported=None`), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RemoteCode:
    """The custom code a directory's auto_map points at (config.json and tokenizer_config.json)."""

    entries: dict[str, str] = field(default_factory=dict)  # e.g. AutoModelForCausalLM -> modeling_x.XForCausalLM
    missing_files: tuple[str, ...] = ()  # modules auto_map names that are not in the directory
    other_repo: tuple[str, ...] = ()  # entries that point at another Hub repository ("repo--module.Class")

    @property
    def needed(self) -> bool:
        return bool(self.entries)


@dataclass(frozen=True)
class Support:
    """Whether an engine has an implementation for the model; None when that cannot be told here."""

    supported: bool | None
    source: str  # which engine and version answered, or why none could
    engine_class: str | None = None  # the class the engine would load
    known_model_type: bool | None = None  # transformers knows the config's model_type


def remote_code(config: dict[str, Any], tokenizer_config: dict[str, Any], directory: Path) -> RemoteCode:
    """What auto_map asks for and which of the modules it names are missing."""
    entries: dict[str, str] = {}
    for source in (config, tokenizer_config):
        auto_map = source.get("auto_map")
        if isinstance(auto_map, dict):
            for key, value in auto_map.items():
                refs = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
                if refs:
                    entries.setdefault(str(key), refs[0])
                    entries.update({f"{key}[{i}]": r for i, r in enumerate(refs[1:], 1)})
    missing: set[str] = set()
    other: set[str] = set()
    for ref in entries.values():
        if "--" in ref:
            other.add(ref)
            continue
        module = ref.rpartition(".")[0]
        if module and not (directory / f"{module.replace('.', '/')}.py").is_file():
            missing.add(f"{module}.py")
    return RemoteCode(entries=entries, missing_files=tuple(sorted(missing)), other_repo=tuple(sorted(other)))


def transformers_support(model_type: str | None, architectures: list[str]) -> Support:
    """Whether the installed transformers' AutoModelForCausalLM has a class for this model_type."""
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )
    except ImportError:
        return Support(None, "transformers is not installed here")
    source = f"transformers {transformers.__version__}"
    if not model_type:
        return Support(None, source)
    known = model_type in CONFIG_MAPPING_NAMES
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    return Support(causal is not None, source, engine_class=str(causal) if causal else None, known_model_type=known)


def vllm_support(architectures: list[str]) -> Support:
    """Whether vLLM's model registry has any of the architectures (None when vLLM does not import here)."""
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
        from vllm import ModelRegistry  # type: ignore[import-not-found, unused-ignore]

        supported = set(ModelRegistry.get_supported_archs())
    except Exception:  # noqa: BLE001 - not installed, or a build that cannot import on this machine
        return Support(None, "vLLM is not importable here")
    source = f"vLLM {vllm.__version__}"
    if not architectures:
        return Support(None, source)
    hit = next((a for a in architectures if a in supported), None)
    return Support(hit is not None, source, engine_class=hit)
