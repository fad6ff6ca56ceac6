"""A transformer's architecture numbers (`ModelSpec`) from a Hugging Face `config.json` or a builtin name.

Parameter counts follow the usual decoder layout: token embedding (vocab × hidden), per layer
attention (q and o: hidden × heads·head_dim; k and v: hidden × kv_heads·head_dim), a gated MLP
(3 × hidden × intermediate, once per expert for a mixture of experts, plus a hidden × experts
router), two RMSNorms per layer and a final one, and an LM head unless the embeddings are tied.
Biases (Qwen2's q/k/v) are left out: under 0.01% of the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The numbers that fix a decoder-only transformer's size and its per-token cost."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool = False
    num_experts: int = 1
    experts_per_token: int = 1

    @property
    def embedding_params(self) -> int:
        """Token embedding: vocab × hidden."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection: vocab × hidden, or 0 when it shares the embedding's weights."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def attention_params_per_layer(self) -> int:
        """q, o: hidden × heads·head_dim each; k, v: hidden × kv_heads·head_dim each."""
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return 2 * self.hidden_size * q_dim + 2 * self.hidden_size * kv_dim

    @property
    def expert_params(self) -> int:
        """One gated MLP (gate, up, down): 3 × hidden × intermediate."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.num_experts > 1 else 0

    @property
    def norm_params(self) -> int:
        """Two RMSNorm weight vectors per layer and a final one."""
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def linear_params(self) -> int:
        """Parameters of every layer's matrices (what weight quantization packs), all experts included."""
        per_layer = self.attention_params_per_layer + self.num_experts * self.expert_params
        return self.num_layers * (per_layer + self.router_params_per_layer)

    @property
    def total_params(self) -> int:
        """Every parameter stored: what weight memory is made of."""
        return self.linear_params + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def inactive_expert_params(self) -> int:
        """Expert parameters a token does not use: (experts − experts per token) × expert MLP × layers."""
        return self.num_layers * (self.num_experts - self.experts_per_token) * self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (total less the experts it is not routed to)."""
        return self.total_params - self.inactive_expert_params

    @property
    def matmul_params(self) -> int:
        """Active parameters that cost 2 FLOPs per token: all but the embedding lookup and the norms.

        With tied embeddings the shared matrix still runs once, as the LM head."""
        shared_head = self.embedding_params if self.tied_embeddings else 0
        return self.active_params - self.embedding_params - self.norm_params + shared_head

    @property
    def attention_dim(self) -> int:
        """heads × head_dim: the width of the attention score and value products."""
        return self.num_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1


def _spec(name: str, hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, **kw: Any) -> ModelSpec:
    return ModelSpec(name, hidden, layers, heads, kv, kw.pop("head_dim", hidden // heads), inter, vocab, **kw)


# Architecture numbers copied from each model's config.json on the Hugging Face Hub.
BUILTIN_MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        _spec("llama-2-7b", 4096, 32, 32, 32, 11008, 32000),
        _spec("llama-2-13b", 5120, 40, 40, 40, 13824, 32000),
        _spec("llama-2-70b", 8192, 80, 64, 8, 28672, 32000),
        _spec("llama-3-8b", 4096, 32, 32, 8, 14336, 128256),
        _spec("llama-3-70b", 8192, 80, 64, 8, 28672, 128256),
        _spec("llama-3.1-405b", 16384, 126, 128, 8, 53248, 128256),
        _spec("llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, tied_embeddings=True, head_dim=64),
        _spec("llama-3.2-3b", 3072, 28, 24, 8, 8192, 128256, tied_embeddings=True),
        _spec("qwen2-7b", 3584, 28, 28, 4, 18944, 152064),
        _spec("qwen2-72b", 8192, 80, 64, 8, 29568, 152064),
        _spec("qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, tied_embeddings=True),
        _spec("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064),
        _spec("qwen2.5-14b", 5120, 48, 40, 8, 13824, 152064),
        _spec("qwen2.5-32b", 5120, 64, 40, 8, 27648, 152064),
        _spec("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064),
        _spec("mistral-7b", 4096, 32, 32, 8, 14336, 32000),
        _spec("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, num_experts=8, experts_per_token=2),
        _spec("mixtral-8x22b", 6144, 56, 48, 8, 16384, 32768, num_experts=8, experts_per_token=2),
        _spec("gemma-2-9b", 3584, 42, 16, 8, 14336, 256000, tied_embeddings=True, head_dim=256),
        _spec("gemma-2-27b", 4608, 46, 32, 16, 36864, 256000, tied_embeddings=True, head_dim=128),
    )
}

_ALIASES = {"llama-3.1-8b": "llama-3-8b", "llama-3.1-70b": "llama-3-70b", "llama-3.3-70b": "llama-3-70b"}


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def spec_from_config(cfg: dict[str, Any], name: str = "config.json") -> ModelSpec:
    """Read the architecture from a Hugging Face config dict (Llama, Qwen2, Mistral, Mixtral, Gemma names).

    Raises ConfigError when a size the estimate needs is missing."""
    cfg = cfg.get("text_config", cfg) if "hidden_size" not in cfg else cfg  # multimodal wrappers
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "num_attention_heads", "n_head")
    inter = _first(cfg, "intermediate_size", "ffn_dim", "n_inner")
    vocab = _first(cfg, "vocab_size")
    missing = [k for k, v in {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                              "intermediate_size": inter, "vocab_size": vocab}.items() if v is None]
    if missing:
        raise ConfigError(f"{name} lacks {', '.join(missing)}", hint="pass a decoder model's config.json, or a builtin name")
    return ModelSpec(
        name=str(cfg.get("_name_or_path") or cfg.get("model_type") or name),
        hidden_size=int(hidden),
        num_layers=int(layers),
        num_heads=int(heads),
        num_kv_heads=int(_first(cfg, "num_key_value_heads", "num_kv_heads", default=heads)),
        head_dim=int(_first(cfg, "head_dim", default=int(hidden) // int(heads))),
        intermediate_size=int(inter),
        vocab_size=int(vocab),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1)),
        experts_per_token=int(_first(cfg, "num_experts_per_tok", "moe_topk", default=1)),
    )


def load_model(name_or_path: str) -> ModelSpec:
    """A builtin model by name, or the `config.json` at a path (a file or the directory holding it)."""
    key = name_or_path.strip().lower()
    key = _ALIASES.get(key, key)
    if key in BUILTIN_MODELS:
        return BUILTIN_MODELS[key]
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"unknown model {name_or_path!r}: neither a builtin name nor a config.json",
            hint=f"known models: {', '.join(sorted(BUILTIN_MODELS))}; or pass a path to a Hugging Face config.json",
        )
    try:
        cfg = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", hint="pass a Hugging Face config.json") from exc
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} is not a JSON object", hint="pass a Hugging Face config.json")
    return spec_from_config(cfg, name=str(path))
