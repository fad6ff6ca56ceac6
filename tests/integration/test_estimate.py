"""`tokspeed estimate` and `tokspeed cost` as a user runs them: a subprocess, its stdout, stderr and exit code."""

from __future__ import annotations

from pathlib import Path

import orjson
from harness import run_cli

RUN_V1 = Path(__file__).parents[1] / "data" / "run-v1"


def test_estimate_json_from_a_config_directory(tmp_path: Path) -> None:
    cfg = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
           "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_bytes(orjson.dumps(cfg))
    proc = run_cli("estimate", "--model", str(tmp_path), "--gpu", "h100-sxm", "--gpus", "2", "--weights", "fp8",
                   "--kv", "fp8", "--concurrency", "1,64", "--json")
    assert proc.returncode == 0, proc.stderr
    data = orjson.loads(proc.stdout)
    assert round(data["model"]["total_params"] / 1e9, 1) == 46.7 and round(data["model"]["active_params"] / 1e9, 1) == 12.9
    assert data["memory"]["kv_cache_bytes_per_token"] == 2 * 32 * 8 * 128 * 1
    assert [p["concurrency"] for p in data["points"]] == [1, 64]


def test_unknown_gpu_lists_the_known_ones() -> None:
    proc = run_cli("estimate", "--model", "llama-3-8b", "--gpu", "v100")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Error: unknown GPU 'v100'" in proc.stderr and "Hint: known GPUs: a100-40gb" in proc.stderr


def test_cost_of_the_sample_run() -> None:
    proc = run_cli("cost", str(RUN_V1), "--price-per-hour", "2.5", "--gpus", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    row = orjson.loads(proc.stdout)["costs"][0]
    assert row["cost_per_hour"] == 5.0
    assert row["output_tokens_per_currency_unit"] == row["output_tokens_per_s"] * 3600 / 5.0
