"""Published config.json files → parameters and KV cache, held against the published sizes.

The configs are in tests/data/model_configs/ (SOURCES.md says where each was copied from). Each
published figure below is quoted from the model card or report named beside it; each KV figure is
worked by hand in its comment, never taken from the code under test. Parameters must come within
2% of the published size."""

from __future__ import annotations

import pytest

from locations import MODEL_CONFIGS
from tokspeed.errors import ConfigError
from tokspeed.estimate.bounds import (
    kv_bytes_per_token,
    kv_profile,
    memory_plan,
    weight_bytes,
    weight_format,
)
from tokspeed.estimate.hardware import GIB, load_gpu
from tokspeed.estimate.model import load_model, spec_from_config


def _model(name: str):
    return load_model(str(MODEL_CONFIGS / f"{name}.json"))


# (config, published total, published active, where the figures are published)
PUBLISHED = [
    ("llama-3.1-8b", 8.03e9, 8.03e9, "Hugging Face model page: 8.03B params"),
    ("llama-3.1-70b", 70.6e9, 70.6e9, "Hugging Face model page: 70.6B params"),
    ("qwen2.5-7b", 7.61e9, 7.61e9, "Qwen2.5-7B card: 7.61B parameters (6.53B non-embedding)"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, "Qwen3-30B-A3B card: 30.5B in total, 3.3B activated"),
    ("qwen3-235b-a22b", 235e9, 22e9, "Qwen3-235B-A22B card: 235B in total, 22B activated"),
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, "Qwen1.5-MoE-A2.7B card: 14.3B in total, 2.7B activated"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "Mistral's Mixtral announcement: 46.7B total, 12.9B per token"),
    ("deepseek-v3", 671e9, 37e9, "DeepSeek-V3 card: 671B total, 37B activated per token"),
    ("gemma-3-27b-it", 27.016e9, 27.016e9, "Gemma 3 report, table 1: 1,416M embedding + 25,600M non-embedding"),
    ("mistral-nemo-instruct-2407", 12.2e9, 12.2e9, "Hugging Face model page: 12.2B params (the card rounds to 12B)"),
]


@pytest.mark.parametrize(("name", "total", "active", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_total_and_active_parameters_match_the_published_sizes(name: str, total: float, active: float, source: str) -> None:
    m = _model(name)
    assert m.total_params == pytest.approx(total, rel=0.02), source
    assert m.active_params == pytest.approx(active, rel=0.02), source


@pytest.mark.parametrize(("name", "total", "active"), [("gpt-oss-20b", 20.91e9, 3.61e9), ("gpt-oss-120b", 116.83e9, 5.13e9)])
def test_gpt_oss_parameters_match_the_model_card(name: str, total: float, active: float) -> None:
    """OpenAI's gpt-oss model card, table 1: 20.91B total / 3.61B active and 116.83B / 5.13B. Its active
    count leaves out the embedding table (a token reads one row of it); the LM head is in."""
    m = _model(name)
    assert m.total_params == pytest.approx(total, rel=0.02)
    assert m.active_params - m.embedding_params == pytest.approx(active, rel=0.02)


def test_deepseek_counts_activated_parameters_without_the_input_embedding() -> None:
    """DeepSeek-V3's weight notes (as quoted in tenstorrent/tt-metal's README_WEIGHTS.md): 36.6B activated,
    "including 0.9B for the output Head", i.e. without the 0.9B input embedding. DeepSeek-V2-Lite (the
    V2 paper): 15.7B total, 2.4B activated; by hand 27 × 13.76M attention + one dense MLP 67.2M + 26 MoE
    layers × (6 routed + 2 shared) × 8.65M + the 0.21B head = 2.45B, which the paper gives to 0.1B."""
    v3 = _model("deepseek-v3")
    assert v3.active_params - v3.embedding_params == pytest.approx(36.6e9, rel=0.01)
    lite = _model("deepseek-v2-lite")  # MLA without a q bottleneck (no q_lora_rank)
    assert lite.total_params == pytest.approx(15.7e9, rel=0.02)
    assert lite.attention_params_per_layer == 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    assert lite.active_params - lite.embedding_params == pytest.approx(2.45e9, rel=0.01)


def test_the_issue_s_wrong_moe_sizes_are_gone() -> None:
    """Issue 24: Qwen3-30B-A3B came out 233.5B / 16.0B (it read intermediate_size for the experts) and
    Qwen1.5-MoE-A2.7B 50.9B; DeepSeek-V3 6,204B."""
    assert _model("qwen3-30b-a3b").total_params < 31e9
    assert _model("qwen3-30b-a3b").active_params < 3.4e9
    assert _model("qwen1.5-moe-a2.7b").total_params < 14.6e9
    assert _model("deepseek-v3").total_params < 680e9


def test_qwen3_30b_a3b_fits_on_one_h100() -> None:
    """30.5B × 2 B = 61.1 GB of bf16 weights in 80 GiB × 0.9 − 2 GiB = 75.2 GB: one GPU, not eight. The
    14.1 GB left holds 35 sequences of 4,096 tokens at 98,304 B a token (402.7 MB each)."""
    plan = memory_plan(_model("qwen3-30b-a3b"), load_gpu("h100-sxm"), weights="auto", kv="bf16")
    assert plan.weights_bytes / 1e9 == pytest.approx(61.1, abs=0.1)
    assert plan.weights_fit and plan.max_sequences(4096) == 35


# (config, KV bytes per token within any window, worked by hand with 2-byte KV)
KV_FULL = [
    ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),  # 131,072
    ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),  # 327,680
    ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),  # 57,344 (use_sliding_window: false)
    ("qwen3-30b-a3b", 2 * 48 * 4 * 128 * 2),  # 98,304
    ("qwen3-235b-a22b", 2 * 94 * 4 * 128 * 2),  # 192,512
    ("mixtral-8x7b", 2 * 32 * 8 * 128 * 2),  # 131,072
    ("deepseek-v3", (512 + 64) * 61 * 2),  # 70,272: MLA caches the latent and the rope key, no heads
    ("deepseek-v2-lite", (512 + 64) * 27 * 2),  # 31,104
    ("gpt-oss-20b", 2 * 24 * 8 * 64 * 2),  # 49,152
    ("gpt-oss-120b", 2 * 36 * 8 * 64 * 2),  # 73,728
    ("gemma-3-27b-it", 2 * 62 * 16 * 128 * 2),  # 507,904
    ("mistral-nemo-instruct-2407", 2 * 40 * 8 * 128 * 2),  # 163,840: head_dim 128, not 5120 / 32 = 160
]


@pytest.mark.parametrize(("name", "per_token"), KV_FULL, ids=[k[0] for k in KV_FULL])
def test_kv_bytes_per_token_by_hand(name: str, per_token: int) -> None:
    m = _model(name)
    assert kv_bytes_per_token(m, "bf16") == per_token
    assert kv_bytes_per_token(m, "fp8") == per_token / 2


def test_deepseek_v3_kv_is_the_compressed_latent() -> None:
    """The issue's 1,748,992 B/token was 2 × 61 × 128 heads × 56 × 2: full K and V per head."""
    assert kv_bytes_per_token(_model("deepseek-v3"), "bf16", context_tokens=32768) == 70_272


@pytest.mark.parametrize(
    ("name", "context", "per_token"),
    [
        # 12 global layers × 2,048 B + 12 local layers × 2,048 B × 128 / 8,192
        ("gpt-oss-20b", 8192, 12 * 2048 + 12 * 2048 * 128 / 8192),  # 24,960
        ("gpt-oss-120b", 8192, 18 * 2048 + 18 * 2048 * 128 / 8192),  # 37,440
        # Gemma 3: every 6th layer global (10 of 62); 8,192 B a layer; 1,024-token window
        ("gemma-3-27b-it", 32768, 10 * 8192 + 52 * 8192 * 1024 / 32768),  # 95,232
        ("gemma-3-27b-it", 1024, 62 * 8192),  # within the window every layer holds every token
        ("llama-3.1-8b", 32768, 131_072),  # no window: constant
    ],
)
def test_kv_per_token_falls_with_context_on_sliding_window_models(name: str, context: int, per_token: float) -> None:
    assert kv_bytes_per_token(_model(name), "bf16", context_tokens=context) == pytest.approx(per_token)


def test_sliding_window_layers_come_from_each_config_s_own_field() -> None:
    oss, gemma = _model("gpt-oss-20b"), _model("gemma-3-27b-it")
    assert (oss.sliding_window, oss.window_layers) == (128, 12)  # layer_types: alternating
    assert (gemma.sliding_window, gemma.window_layers) == (1024, 52)  # Gemma 3's default 5 local : 1 global
    assert _model("qwen2.5-7b").sliding_window is None  # sliding_window 131072 but use_sliding_window false
    assert _model("mistral-nemo-instruct-2407").sliding_window is None
    mistral_v01 = spec_from_config({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                                    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                                    "vocab_size": 32000, "sliding_window": 4096})
    assert mistral_v01.window_layers == 32  # Mistral 7B v0.1: every layer
    assert kv_bytes_per_token(mistral_v01, "bf16", context_tokens=8192) == 131_072 / 2


def test_memory_plan_sizes_sliding_window_sequences_by_their_real_kv() -> None:
    """KV(L) = g·L + s·min(L, W): a 32k-token Gemma-3 sequence holds 32,768 × 95,232 B, not 32,768 × 507,904 B."""
    gemma = _model("gemma-3-27b-it")
    plan = memory_plan(gemma, load_gpu("h200"), weights="bf16", kv="bf16", sequence_tokens=32768)
    per_sequence = 10 * 8192 * 32768 + 52 * 8192 * 1024
    assert plan.kv.sequence_bytes(32768) == per_sequence
    assert plan.max_sequences(32768) == int(plan.kv_budget_bytes // per_sequence)
    assert plan.kv_bytes_per_token == pytest.approx(95_232)


def test_gemma3_text_config_nested_in_the_multimodal_config_uses_transformers_defaults() -> None:
    """google/gemma-3-27b-it's text_config has no vocab_size or tie_word_embeddings: Gemma3TextConfig's
    defaults are 262,208 and tied, so the embedding (262,208 × 5,376 = 1.41B) is counted once."""
    m = _model("gemma-3-27b-it")
    assert (m.vocab_size, m.tied_embeddings, m.head_dim, m.hidden_size) == (262_208, True, 128, 5376)
    assert m.lm_head_params == 0 and m.embedding_params == 262_208 * 5376


def test_moe_layer_composition() -> None:
    """DeepSeek-V3: 3 dense layers (18,432 wide) then 58 MoE layers of 256 experts + 1 shared (2,048 wide)."""
    ds = _model("deepseek-v3")
    assert (ds.num_dense_layers, ds.num_moe_layers) == (3, 58)
    assert ds.dense_mlp_params == 3 * 7168 * 18432
    assert ds.moe_mlp_params == 256 * 3 * 7168 * 2048 + 3 * 7168 * 2048 + 7168 * 256
    # 58 MoE layers × (8 routed + 1 shared) experts of 3 × 7,168 × 2,048 active
    assert ds.inactive_expert_params == 58 * 248 * 3 * 7168 * 2048
    assert ds.mtp_params == pytest.approx(11.5e9, rel=0.02)  # tenstorrent's DeepSeek-V3 weight notes: 11.5B unique
    qwen15 = _model("qwen1.5-moe-a2.7b")  # a 5,632-wide shared expert beside 60 routed experts of 1,408
    assert qwen15.shared_expert_params == 3 * 2048 * 5632


def test_qwen_moe_dense_layers_from_mlp_only_layers_and_decoder_sparse_step() -> None:
    base = {"model_type": "qwen3_moe", "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 3072, "moe_intermediate_size": 256,
            "num_experts": 16, "num_experts_per_tok": 2, "vocab_size": 1000}
    # MoE where (i + 1) % 2 == 0 and i ∉ {3}: layers 1, 5, 7
    m = spec_from_config({**base, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    assert (m.num_moe_layers, m.num_dense_layers) == (3, 5)
    attention = 2 * 1024 * 8 * 128 + 2 * 1024 * 2 * 128
    moe = 16 * 3 * 1024 * 256 + 1024 * 16
    assert m.linear_params == 8 * attention + 5 * 3 * 1024 * 3072 + 3 * moe
    assert m.inactive_expert_params == 3 * 14 * 3 * 1024 * 256


def test_quantization_config_sizes_the_weights_without_weights_flag() -> None:
    """Issue 24: Qwen2-7B-AWQ sized 15.23 GB as bf16; AWQ int4 with groups of 128 gives 5.57 GB."""
    awq = _model("qwen2-7b-instruct-awq")
    fmt = weight_format(awq, "auto")
    assert (fmt.name, fmt.source, fmt.compute) == ("awq int4 g128", "quantization_config", "bf16")
    assert fmt.bytes_per_param == 0.5 + 2.5 / 128
    assert weight_bytes(awq, "auto") / 1e9 == pytest.approx(5.57, abs=0.01)
    assert weight_bytes(awq, "bf16") / 1e9 == pytest.approx(15.23, abs=0.01)  # an explicit --weights wins


@pytest.mark.parametrize(("name", "gib"), [("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)])
def test_mxfp4_experts_give_the_published_checkpoint_size(name: str, gib: float) -> None:
    """gpt-oss model card, table 1: checkpoints of 12.8 GiB and 60.8 GiB. MXFP4 (4 bits + an 8-bit scale
    per 32 = 0.53125 B) covers the experts only; attention, router, embedding and head stay bf16."""
    m = _model(name)
    fmt = weight_format(m, "auto")
    assert fmt.experts_only and fmt.bytes_per_param == 0.53125
    assert weight_bytes(m, "auto") / GIB == pytest.approx(gib, rel=0.02)


def test_fp8_checkpoints_read_one_byte_and_run_on_the_fp8_path() -> None:
    ds = _model("deepseek-v3")
    fmt = weight_format(ds, "auto")
    assert (fmt.name, fmt.bytes_per_param, fmt.compute) == ("fp8", 1.0, "fp8")
    rest = ds.total_params - ds.linear_params  # embedding, head and norms stay bf16
    assert weight_bytes(ds, "auto") == ds.linear_params + 2 * rest


LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


@pytest.mark.parametrize(
    ("qcfg", "name", "per_param", "compute"),
    [
        # llm-compressor W4A16 (as RedHat's Llama-3.1-8B-Instruct-quantized.w4a16): symmetric int4, groups of 128
        ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                        "weights": {"num_bits": 4, "type": "int", "group_size": 128,
                                                    "strategy": "group", "symmetric": True}}}},
         "compressed-tensors int4 g128", 0.5 + 2 / 128, "bf16"),
        # FP8 dynamic W8A8 (as RedHat's Llama-3.1-8B-Instruct-FP8-dynamic)
        ({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"],
                                        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
                                        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}},
         "compressed-tensors fp8", 1.0, "fp8"),
        # INT8 W8A8
        ({"quant_method": "compressed-tensors", "format": "int-quantized",
          "config_groups": {"group_0": {"input_activations": {"num_bits": 8, "type": "int"},
                                        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}},
         "compressed-tensors int8", 1.0, "int8"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False, "sym": True},
         "gptq int8 g128", 1 + 3 / 128, "bf16"),  # GPTQ stores qzeros even when symmetric
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
         "bitsandbytes nf4", 0.5 + 4 / 64, "bf16"),
    ],
)
def test_quantization_config_formats(qcfg: dict, name: str, per_param: float, compute: str) -> None:
    m = spec_from_config({**LLAMA_8B, "quantization_config": qcfg})
    fmt = weight_format(m, "auto")
    assert (fmt.name, fmt.compute, fmt.experts_only) == (name, compute, False)
    assert fmt.bytes_per_param == pytest.approx(per_param)
    rest = 2 * (m.total_params - m.linear_params)
    assert weight_bytes(m, "auto") == pytest.approx(m.linear_params * per_param + rest)


def test_an_unknown_quantization_asks_for_weights_and_an_explicit_format_still_works() -> None:
    m = spec_from_config({**LLAMA_8B, "quantization_config": {"quant_method": "hqq"}})
    with pytest.raises(ConfigError, match="hqq") as exc:
        weight_bytes(m, "auto")
    assert "--weights" in (exc.value.hint or "")
    assert weight_bytes(m, "int4") > 0


def test_a_multimodal_wrapper_passes_its_quantization_and_tied_flag_to_the_text_config() -> None:
    cfg = {"model_type": "llava", "tie_word_embeddings": True, "text_config": LLAMA_8B,
           "quantization_config": {"quant_method": "fp8"}}
    m = spec_from_config(cfg)
    assert m.tied_embeddings and m.quantization is not None and m.quantization.method == "fp8"
    assert kv_profile(m, "bf16").full_bytes_per_token == 131_072


def test_an_explicit_mxfp4_covers_every_layer_of_a_dense_model() -> None:
    """MXFP4 on the experts only is how gpt-oss ships; a dense model has no experts, so --weights mxfp4
    packs every layer matrix (it sized Llama-3.1-8B as bf16, 16.06 GB, before)."""
    llama = _model("llama-3.1-8b")
    rest = llama.total_params - llama.linear_params
    assert weight_bytes(llama, "mxfp4") == pytest.approx(llama.linear_params * 0.53125 + 2 * rest)
    oss = _model("gpt-oss-20b")
    assert weight_bytes(oss, "mxfp4") == weight_bytes(oss, "auto")


def test_tensor_parallel_kv_copies_when_gpus_outnumber_kv_heads_and_for_mla() -> None:
    """vLLM splits the cache by KV head and copies a head when there are fewer heads than GPUs:
    N × max(1, kv_heads ÷ N) heads in all. MLA's latent has no heads: each GPU holds all of it."""
    from tokspeed.estimate.bounds import kv_copies

    qwen3, llama, ds = _model("qwen3-30b-a3b"), _model("llama-3.1-8b"), _model("deepseek-v3")
    assert [kv_copies(qwen3, n) for n in (1, 2, 4, 8)] == [1, 1, 1, 2]  # 4 KV heads: 8 GPUs hold 8
    assert [kv_copies(llama, n) for n in (1, 8)] == [1, 1]  # 8 KV heads: one each
    assert kv_copies(ds, 8) == 8
    # DeepSeek-V3 on 8 × H200: the 400 GB budget holds each token 8 times over (70,272 B a copy)
    plan = memory_plan(ds, load_gpu("h200"), weights="auto", kv="bf16", gpus=8, sequence_tokens=4096)
    assert plan.max_sequences(4096) == int(plan.kv_budget_bytes // (8 * 70_272 * 4096))
    assert plan.kv_cache_tokens == int(plan.kv_budget_bytes // (8 * 70_272))


def test_the_weight_format_is_named_in_the_header() -> None:
    assert weight_format(_model("gpt-oss-120b"), "auto").name == "mxfp4 experts"
