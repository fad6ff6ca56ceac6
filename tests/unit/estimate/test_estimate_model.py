"""ModelSpec: parameter counts by hand, and config.json parsing of each family."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tokspeed.errors import ConfigError
from tokspeed.estimate.model import BUILTIN_MODELS, load_model, spec_from_config

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "tie_word_embeddings": False,
}
QWEN2_7B = {
    "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
}
MISTRAL_7B = {
    "model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "sliding_window": 4096,
}
MIXTRAL = {**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
GEMMA2_9B = {
    "model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
    "tie_word_embeddings": True,
}


def test_llama3_8b_parameters_by_hand() -> None:
    m = load_model("llama-3-8b")
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024  # q, o; k, v (8 KV heads × 128)
    mlp = 3 * 4096 * 14336
    embeddings = 2 * 128256 * 4096  # untied: embedding + LM head
    norms = (2 * 32 + 1) * 4096
    assert m.total_params == 32 * (attention + mlp) + embeddings + norms == 8_030_261_248
    assert m.active_params == m.total_params


def test_mixtral_total_and_active_parameters() -> None:
    m = load_model("mixtral-8x7b")
    assert m.total_params == pytest.approx(46.7e9, rel=0.005)
    assert m.active_params == pytest.approx(12.9e9, rel=0.005)
    assert m.total_params - m.active_params == 32 * 6 * 3 * 4096 * 14336  # six idle experts per layer


def test_matmul_params_skip_the_embedding_lookup_but_keep_a_tied_head() -> None:
    untied, tied = load_model("llama-3-8b"), load_model("llama-3.2-1b")
    assert untied.matmul_params == untied.active_params - untied.embedding_params - untied.norm_params
    assert tied.matmul_params == tied.active_params - tied.norm_params


@pytest.mark.parametrize(
    ("cfg", "builtin"),
    [(LLAMA3_8B, "llama-3-8b"), (QWEN2_7B, "qwen2-7b"), (MISTRAL_7B, "mistral-7b"), (MIXTRAL, "mixtral-8x7b"), (GEMMA2_9B, "gemma-2-9b")],
)
def test_config_json_of_each_family_matches_the_builtin(cfg: dict[str, object], builtin: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(orjson.dumps(cfg))
    for where in (tmp_path, tmp_path / "config.json"):  # a directory or the file
        spec = load_model(str(where))
        ref = BUILTIN_MODELS[builtin]
        assert (spec.total_params, spec.active_params, spec.head_dim, spec.num_kv_heads) == (
            ref.total_params, ref.active_params, ref.head_dim, ref.num_kv_heads
        )


def test_missing_kv_heads_means_multi_head_attention() -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    assert spec_from_config(cfg).num_kv_heads == 32


def test_multimodal_wrapper_reads_text_config() -> None:
    assert spec_from_config({"model_type": "llava", "text_config": LLAMA3_8B}).total_params == 8_030_261_248


def test_bad_models_raise_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_model("no-such-model")
    assert "llama-3-8b" in (exc.value.hint or "")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError):
        load_model(str(tmp_path))
    with pytest.raises(ConfigError, match="intermediate_size"):
        spec_from_config({k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"})


def test_names_are_case_insensitive_and_aliased() -> None:
    assert load_model("Llama-3.1-8B") == load_model("llama-3-8b")
