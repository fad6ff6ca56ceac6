"""The shipped model architectures: Llama-style configs for the `tiny` and `small` sizes.

Pure data and arithmetic (no torch): the parameter count is computed from the
shapes, so it can be shown before the model is built and checked in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokspeed.errors import ConfigError

VOCAB_SIZE = 8192  # the locally trained byte-level BPE (see tokenizer.py)
MAX_CONTEXT = 4096  # prompt + output tokens per request
DEFAULT_SIZE = "small"


@dataclass(frozen=True, slots=True)
class ModelSize:
    """One architecture: Llama layers with grouped-query attention and a SwiGLU MLP."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int = VOCAB_SIZE
    max_position_embeddings: int = MAX_CONTEXT

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def parameter_count(self) -> int:
        """Weights of the model: embeddings, layers, final norm and an untied LM head."""
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attention = 2 * h * h + 2 * h * kv  # q, o and k, v projections (no biases)
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        layer = attention + mlp + 2 * h  # two RMSNorm weights
        return 2 * self.vocab_size * h + self.num_layers * layer + h

    def llama_config(self, *, bos_token_id: int | None, eos_token_id: int | list[int], pad_token_id: int) -> dict[str, Any]:
        """Keyword arguments for `transformers.LlamaConfig` (and the keys of config.json)."""
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "initializer_range": 0.02,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": bos_token_id,
            "eos_token_id": eos_token_id,
            "pad_token_id": pad_token_id,
        }


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize("tiny", hidden_size=384, intermediate_size=1024, num_layers=9, num_heads=6, num_kv_heads=2),
    "small": ModelSize("small", hidden_size=640, intermediate_size=1792, num_layers=11, num_heads=10, num_kv_heads=2),
}


def get_size(name: str) -> ModelSize:
    """The size called `name`; ConfigError naming the choices otherwise."""
    try:
        return SIZES[name]
    except KeyError:
        choices = ", ".join(f"embedded:{n}" for n in SIZES)
        raise ConfigError(f"unknown embedded model size {name!r}", hint=f"use one of: {choices}") from None
