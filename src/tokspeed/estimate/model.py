"""A transformer's architecture numbers (`ModelSpec`) from a Hugging Face `config.json` or a builtin name.

Parameter counts follow the decoder layout, per layer:

    attention   GQA/MHA: q and o hidden × heads·head_dim each, k and v hidden × kv_heads·head_dim each
                MLA (DeepSeek): q through a rank-r_q bottleneck (hidden·r_q + r_q·heads·(nope + rope)),
                a joint latent hidden·(r_kv + rope), its up-projection r_kv·heads·(nope + v), o heads·v·hidden
    MLP         dense layers: 3 × hidden × intermediate (gate, up, down)
                MoE layers: experts × 3·hidden·moe_intermediate + the shared expert(s)
                3·hidden·shared_intermediate + a hidden × experts router

plus the token embedding (vocab × hidden), an LM head unless the embeddings are tied, and two
RMSNorms per layer and a final one. Which layers are MoE comes from `first_k_dense_replace` and
`moe_layer_freq` (DeepSeek, GLM) or `mlp_only_layers` and `decoder_sparse_step` (Qwen-MoE).
*Active* parameters drop the routed experts a token is not sent to. Biases, attention sinks,
q/k norms and the extra Gemma norms are left out (≤ 0.1% of any model here). DeepSeek's
multi-token-prediction layers (`num_nextn_predict_layers`) are counted apart, in `mtp_params`:
published sizes exclude them and engines load them only for speculative decoding.

Attention may be local: `sliding_window` with `layer_types`, Gemma's local/global pattern, or all
layers (Mistral-style); `use_sliding_window: false` (Qwen) turns it off. `quantization_config`
fixes the stored weight format (quantization.py). The formulas: docs/estimate.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import ConfigError
from tokspeed.estimate.quantization import Quantization, quantization_from_config


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
    moe_intermediate_size: int | None = None  # one routed expert's width (None: intermediate_size)
    shared_expert_intermediate_size: int = 0  # the always-on shared expert(s), total width
    moe_layers: int | None = None  # layers with a MoE MLP (None: all, when there are experts)
    q_lora_rank: int = 0  # MLA (DeepSeek); 0: q projected directly
    kv_lora_rank: int = 0  # MLA's compressed KV latent; 0: not MLA
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers that attend to the last `sliding_window` tokens only
    mtp_layers: int = 0
    quantization: Quantization | None = None

    # --- layer composition -------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        return self.num_layers if self.moe_layers is None else self.moe_layers

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    # --- parameter counts --------------------------------------------------------------------

    @property
    def embedding_params(self) -> int:
        """Token embedding: vocab × hidden."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection: vocab × hidden, or 0 when it shares the embedding's weights."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query·key product: nope + rope for MLA, head_dim otherwise."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return (self.v_head_dim or self.qk_nope_head_dim) if self.is_mla else self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        """GQA: 2·hidden·heads·head_dim + 2·hidden·kv_heads·head_dim. MLA: see the module docstring."""
        h, n = self.hidden_size, self.num_heads
        if not self.is_mla:
            return 2 * h * n * self.head_dim + 2 * h * self.num_kv_heads * self.head_dim
        q = h * self.q_lora_rank + self.q_lora_rank * n * self.qk_head_dim if self.q_lora_rank else h * n * self.qk_head_dim
        kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * n * (self.qk_nope_head_dim + self.value_head_dim)
        return q + kv_down + kv_up + n * self.value_head_dim * h

    @property
    def dense_mlp_params(self) -> int:
        """A dense layer's gated MLP: 3 × hidden × intermediate."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down): 3 × hidden × moe_intermediate."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.is_moe else 0

    @property
    def moe_mlp_params(self) -> int:
        """One MoE layer's MLP: every routed expert, the shared expert(s) and the router."""
        return self.num_experts * self.expert_params + self.shared_expert_params + self.router_params_per_layer

    @property
    def routed_expert_params(self) -> int:
        """Every routed expert of every MoE layer: what a token mostly skips."""
        return self.num_moe_layers * self.num_experts * self.expert_params

    @property
    def norm_params(self) -> int:
        """Two RMSNorm weight vectors per layer and a final one (+ MLA's two latent norms per layer)."""
        mla = self.num_layers * (self.q_lora_rank + self.kv_lora_rank) if self.is_mla else 0
        return (2 * self.num_layers + 1) * self.hidden_size + mla

    @property
    def linear_params(self) -> int:
        """Parameters of every layer's matrices (what weight quantization packs), all experts included."""
        attention = self.num_layers * self.attention_params_per_layer
        mlp = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_mlp_params
        return attention + mlp

    @property
    def total_params(self) -> int:
        """Every parameter stored (MTP layers apart): what weight memory is made of."""
        return self.linear_params + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def inactive_expert_params(self) -> int:
        """Routed experts a token does not use: MoE layers × (experts − experts per token) × expert MLP."""
        if not self.is_moe:
            return 0
        return self.num_moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (total less the experts it is not routed to), embedding included."""
        return self.total_params - self.inactive_expert_params

    @property
    def matmul_params(self) -> int:
        """Active parameters that cost 2 FLOPs per token: all but the embedding lookup and the norms.

        With tied embeddings the shared matrix still runs once, as the LM head."""
        shared_head = self.embedding_params if self.tied_embeddings else 0
        return self.active_params - self.embedding_params - self.norm_params + shared_head

    @property
    def lm_head_matmul_params(self) -> int:
        """The LM head's matrix, tied or not: vocab × hidden (computed only where logits are needed)."""
        return self.vocab_size * self.hidden_size

    @property
    def mtp_params(self) -> int:
        """DeepSeek's multi-token-prediction layers: one MoE decoder layer, the 2·hidden → hidden
        projection and three norms each (they share the embedding and LM head)."""
        h = self.hidden_size
        per = self.attention_params_per_layer + (self.moe_mlp_params if self.is_moe else self.dense_mlp_params)
        return self.mtp_layers * (per + 2 * h * h + 5 * h)

    # --- attention cost ----------------------------------------------------------------------

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached values per token per layer: 2 × kv_heads × head_dim (K and V), or MLA's
        kv_lora_rank + qk_rope_head_dim (the compressed latent and the shared rope key)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def global_layers(self) -> int:
        """Layers attending to the whole context."""
        return self.num_layers - (self.sliding_layers if self.sliding_window else 0)

    @property
    def window_layers(self) -> int:
        return self.sliding_layers if self.sliding_window else 0

    @property
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one query attending to one cached token, per layer: 2 × heads × (qk + v head dims)."""
        return 2 * self.num_heads * (self.qk_head_dim + self.value_head_dim)


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
        # Gemma-2: every other layer (the even ones) attends to a 4096-token window.
        _spec("gemma-2-9b", 3584, 42, 16, 8, 14336, 256000, tied_embeddings=True, head_dim=256,
              sliding_window=4096, sliding_layers=21),
        _spec("gemma-2-27b", 4608, 46, 32, 16, 36864, 256000, tied_embeddings=True, head_dim=128,
              sliding_window=4096, sliding_layers=23),
    )
}

_ALIASES = {"llama-3.1-8b": "llama-3-8b", "llama-3.1-70b": "llama-3-70b", "llama-3.3-70b": "llama-3-70b"}

# transformers' defaults for keys a published config may leave out (it stores non-default values
# only: google/gemma-3-27b-it's text_config has no vocab_size, tie_word_embeddings or pattern).
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True, "vocab_size": 256000, "sliding_window": 4096},
    "gemma3_text": {"tie_word_embeddings": True, "vocab_size": 262208, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "head_dim": 256},
}
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: the file itself, or its nested text config (multimodal wrappers),
    with the wrapper's `quantization_config` and `tie_word_embeddings` where the text config lacks them,
    and transformers' defaults for the model type underneath."""
    text = cfg
    if "hidden_size" not in cfg:
        for key in _TEXT_CONFIG_KEYS:
            if isinstance(cfg.get(key), dict):
                text = {**{k: cfg[k] for k in ("quantization_config", "tie_word_embeddings") if k in cfg}, **cfg[key]}
                break
    model_type = str(text.get("model_type") or cfg.get("model_type") or "")
    if model_type == "gemma3":
        model_type = "gemma3_text"
    return {**_MODEL_TYPE_DEFAULTS.get(model_type, {}), **{k: v for k, v in text.items() if v is not None}}


def _moe_layer_count(cfg: dict[str, Any], layers: int) -> int:
    """Layers whose MLP is a mixture of experts.

    DeepSeek/GLM: layer i ≥ first_k_dense_replace with i % moe_layer_freq == 0.
    Qwen-MoE: i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    first_dense = int(cfg.get("first_k_dense_replace") or 0)
    freq = int(cfg.get("moe_layer_freq") or 1)
    step = int(cfg.get("decoder_sparse_step") or 1)
    dense_only = {int(i) for i in cfg.get("mlp_only_layers") or []}
    return sum(
        1 for i in range(layers)
        if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
    )


def _sliding_layer_count(cfg: dict[str, Any], layers: int) -> int:
    """Layers with local attention: from `layer_types`, Gemma's pattern, Qwen's max_window_layers, or all."""
    if cfg.get("use_sliding_window") is False or not cfg.get("sliding_window"):
        return 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types[:layers] if t in ("sliding_attention", "local_attention", "chunked_attention"))
    model_type = str(cfg.get("model_type") or "")
    pattern = _first(cfg, "sliding_window_pattern", "_sliding_window_pattern")
    if model_type.startswith("gemma3") or pattern:
        every = int(pattern or 6)  # every `every`-th layer is global, the rest local
        return sum(1 for i in range(layers) if (i + 1) % every != 0)
    if model_type.startswith("gemma2"):
        return sum(1 for i in range(layers) if i % 2 == 0)
    if cfg.get("use_sliding_window") and cfg.get("max_window_layers") is not None:
        return max(layers - int(cfg["max_window_layers"]), 0)  # Qwen2: layers from max_window_layers on
    return layers  # Mistral-style: every layer


def spec_from_config(cfg: dict[str, Any], name: str = "config.json") -> ModelSpec:
    """Read the architecture from a Hugging Face config dict.

    Reads Llama, Qwen2/2.5/3 (dense and MoE), Mistral, Mixtral, Gemma 1-3, DeepSeek-V2/V3 (MLA),
    gpt-oss and multimodal wrappers of them. Raises ConfigError when a size the estimate needs is missing."""
    text = _text_config(cfg)
    hidden = _first(text, "hidden_size", "n_embd", "d_model")
    layers = _first(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(text, "num_attention_heads", "n_head")
    inter = _first(text, "intermediate_size", "ffn_dim", "n_inner", "moe_intermediate_size")
    vocab = _first(text, "vocab_size")
    missing = [k for k, v in {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                              "intermediate_size": inter, "vocab_size": vocab}.items() if v is None]
    if missing:
        raise ConfigError(f"{name} lacks {', '.join(missing)}", hint="pass a decoder model's config.json, or a builtin name")
    hidden, layers, heads = int(hidden), int(layers), int(heads)
    experts = max(int(_first(text, "num_local_experts", "num_experts", "n_routed_experts", default=1)), 1)
    shared = int(_first(text, "shared_expert_intermediate_size", default=0))
    moe_inter = _first(text, "moe_intermediate_size")
    if not shared and text.get("n_shared_experts"):
        shared = int(text["n_shared_experts"]) * int(moe_inter or inter)
    window = _first(text, "sliding_window")
    sliding = _sliding_layer_count(text, layers)
    return ModelSpec(
        name=str(cfg.get("_name_or_path") or text.get("_name_or_path") or cfg.get("model_type") or name),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(_first(text, "num_key_value_heads", "num_kv_heads", default=heads)),
        head_dim=int(_first(text, "head_dim", default=hidden // heads)),
        intermediate_size=int(inter),
        vocab_size=int(vocab),
        tied_embeddings=bool(text.get("tie_word_embeddings", False)),
        num_experts=experts,
        experts_per_token=int(_first(text, "num_experts_per_tok", "experts_per_token", "moe_topk", default=1)),
        moe_intermediate_size=int(moe_inter) if moe_inter else None,
        shared_expert_intermediate_size=shared if experts > 1 else 0,
        moe_layers=_moe_layer_count(text, layers) if experts > 1 else None,
        q_lora_rank=int(text.get("q_lora_rank") or 0),
        kv_lora_rank=int(text.get("kv_lora_rank") or 0),
        qk_nope_head_dim=int(text.get("qk_nope_head_dim") or 0),
        qk_rope_head_dim=int(text.get("qk_rope_head_dim") or 0),
        v_head_dim=int(text.get("v_head_dim") or 0),
        sliding_window=int(window) if sliding and window else None,
        sliding_layers=sliding if window else 0,
        mtp_layers=int(text.get("num_nextn_predict_layers") or 0),
        quantization=quantization_from_config(text),
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
