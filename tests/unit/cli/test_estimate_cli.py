"""`tokspeed estimate`, `efficiency` and `cost` through the CLI's main(): output, JSON fields, errors, exit codes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from locations import DOCS, MODEL_CONFIGS, RUN_V1
from tokspeed.cli import main


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return orjson.loads(capsys.readouterr().out)


def test_estimate_json_fields_carry_units(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--concurrency", "1,8,32",
                 "--max-model-len", "8192", "--json")
    assert data["schema"] == "tokspeed.estimate/1"
    mem = data["memory"]
    assert mem["weights_gb"] == pytest.approx(16.06, abs=0.01) and mem["kv_cache_bytes_per_token"] == 131072
    assert mem["max_concurrent_sequences"] > mem["max_concurrent_sequences_at_max_model_len"] > 0
    assert [p["concurrency"] for p in data["points"]] == [1, 8, 32]
    first = data["points"][0]
    assert {"prefill_ms", "ttft_ms", "itl_ms", "decode_tokens_per_s", "bound"} <= set(first)
    assert first["bound"] == "memory" and 200 < first["decode_tokens_per_s"] < 230


def test_estimate_table_says_which_bound_applies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}
    (tmp_path / "config.json").write_bytes(orjson.dumps(cfg))
    assert main(["estimate", "--model", str(tmp_path / "config.json"), "--gpu", "rtx4090", "--weights", "int4",
                 "--input-tokens", "512", "--output-tokens", "256", "--concurrency", "1,8,32"]) == 0
    out = capsys.readouterr().out
    assert "concurrent sequences" in out and "ridge point" in out and "memory bandwidth bounds it" in out


def test_fp8_kv_doubles_the_sequences_that_fit(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["estimate", "--model", "qwen2-7b", "--gpu", "l4", "--json"]
    fp16 = _json(capsys, *base, "--kv", "fp16")["memory"]["kv_cache_tokens"]
    fp8 = _json(capsys, *base, "--kv", "fp8")["memory"]["kv_cache_tokens"]
    assert fp8 == pytest.approx(2 * fp16, abs=1)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "llama-3-8b", "--gpu", "tpu"], "known GPUs: a100-40gb"),
        (["--model", "nope", "--gpu", "h100"], "known models:"),
        (["--model", "llama-3-8b", "--gpu", "cpu"], "--bandwidth-gb-s"),
        (["--model", "llama-3-8b", "--gpu", "h100", "--concurrency", "1,x"], "--concurrency"),
    ],
)
def test_estimate_bad_inputs_exit_2_with_a_hint(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and needle in err


def test_bad_weight_format_is_a_usage_error() -> None:
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h100", "--weights", "int3"]) == 2


def test_cost_of_a_saved_run(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "cost", str(RUN_V1), "--price-per-hour", "2.5", "--price-per-hour", "4.1", "--json")
    rows = data["costs"]
    assert [r["price_per_gpu_hour"] for r in rows] == [2.5, 4.1]
    tps = rows[0]["output_tokens_per_s"]
    assert rows[0]["cost_per_1m_output_tokens"] == pytest.approx(2.5 / (tps * 3600) * 1e6)
    assert main(["cost", str(RUN_V1), "--price-per-hour", "2.5"]) == 0
    assert "per 1M output tok" in capsys.readouterr().out


def test_cost_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["cost", str(RUN_V1), "--price-per-hour", "0"]) == 2
    assert main(["cost", str(RUN_V1)]) == 2  # the price is required
    assert main(["cost", str(tmp_path / "missing"), "--price-per-hour", "1"]) == 1


def test_efficiency_of_a_saved_run(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "efficiency", str(RUN_V1), "--model", "llama-3-8b", "--gpu", "h100-sxm", "--json")
    point = data["points"][0]
    assert data["schema"] == "tokspeed.efficiency/1" and point["concurrency"] == 1
    assert point["mbu"] is not None and point["prefill_mfu"] is not None
    assert main(["efficiency", str(RUN_V1), "--model", "llama-3-8b", "--gpu", "h100-sxm"]) == 0
    assert "MBU" in capsys.readouterr().out


def test_weights_that_do_not_fit_are_called_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--model", "llama-3-70b", "--gpu", "rtx4090"]) == 0
    assert "do not fit" in capsys.readouterr().out


def test_the_readme_example_is_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/estimate-cost.md's `tokspeed estimate` example is what the command prints today."""
    readme = (DOCS / "estimate-cost.md").read_text(encoding="utf-8")
    command = "$ tokspeed estimate --model qwen2-7b --gpu rtx4090 --weights int4"
    block = readme.split(command, 1)[1].split("```", 1)[0]
    argv = (command + block.splitlines()[0]).split()[2:]
    assert main(argv) == 0
    printed = {line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()}
    shown = {line.strip() for line in block.splitlines()[1:] if line.strip()}
    assert shown == printed




def test_a_quantized_config_is_sized_from_its_quantization_config(capsys: pytest.CaptureFixture[str]) -> None:
    """No --weights: the AWQ checkpoint is 5.57 GB, not the 15.23 GB of bf16 (issue 24)."""
    data = _json(capsys, "estimate", "--model", str(MODEL_CONFIGS / "qwen2-7b-instruct-awq.json"), "--gpu", "rtx4090", "--json")
    assert (data["weights"], data["weights_source"]) == ("awq int4 g128", "quantization_config")
    assert data["memory"]["weights_gb"] == pytest.approx(5.57, abs=0.01)
    assert main(["estimate", "--model", str(MODEL_CONFIGS / "qwen2-7b-instruct-awq.json"), "--gpu", "rtx4090"]) == 0
    assert "weights awq int4 g128 (quantization_config)" in capsys.readouterr().out
    bf16 = _json(capsys, "estimate", "--model", str(MODEL_CONFIGS / "qwen2-7b-instruct-awq.json"), "--gpu", "rtx4090",
                 "--weights", "bf16", "--json")
    assert bf16["memory"]["weights_gb"] == pytest.approx(15.23, abs=0.01) and bf16["weights_source"] == "--weights"


def test_estimate_json_of_deepseek_v3_on_eight_h200(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "estimate", "--model", str(MODEL_CONFIGS / "deepseek-v3.json"), "--gpu", "h200", "--gpus", "8",
                 "--concurrency", "1", "--json")
    assert data["model"]["kv_lora_rank"] == 512 and data["model"]["moe_layers"] == 58
    assert data["memory"]["kv_cache_bytes_per_token"] == 70_272 and data["weights"] == "fp8"
    assert data["gpu"]["interconnect_gb_s"] == 900 and data["gpu"]["compute_dtype"] == "fp8"
    point = data["points"][0]
    assert point["decode_allreduce_ms"] == pytest.approx(2 * 61 * (1e-6 + 2 * 7 / 8 * 7168 * 2 / 450e9) * 1e3)


def test_sliding_window_memory_line_and_interconnect_override(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--model", str(MODEL_CONFIGS / "gemma-3-27b-it.json"), "--gpu", "h100-sxm", "--gpus", "2",
            "--input-tokens", "30000", "--output-tokens", "2768"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "95,232 bytes/token at 32,768 tokens (507,904 within the 1,024-token window of 52 of 62 layers)" in out
    slow = _json(capsys, *argv, "--interconnect-gb-s", "64", "--concurrency", "1", "--json")
    fast = _json(capsys, *argv, "--concurrency", "1", "--json")
    assert slow["points"][0]["prefill_allreduce_ms"] > 10 * fast["points"][0]["prefill_allreduce_ms"]


def test_efficiency_reads_the_weight_format_from_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "efficiency", str(RUN_V1), "--model", str(MODEL_CONFIGS / "qwen2-7b-instruct-awq.json"),
                 "--gpu", "rtx4090", "--json")
    assert (data["weights"], data["weights_source"]) == ("awq int4 g128", "quantization_config")
