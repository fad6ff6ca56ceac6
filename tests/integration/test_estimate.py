"""`tokspeed estimate` and `tokspeed cost` as a user runs them: a subprocess, its stdout, stderr and exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from harness import SimServer, load_json, run_cli

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


def test_estimate_of_a_published_moe_config_as_a_user_runs_it() -> None:
    """Qwen3-30B-A3B's own config.json: 30.5B total, 3.3B active, one H100 holds it (the bug said eight)."""
    config = Path(__file__).parents[1] / "data" / "model_configs" / "qwen3-30b-a3b.json"
    proc = run_cli("estimate", "--model", str(config), "--gpu", "h100-sxm", "--concurrency", "1,16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = orjson.loads(proc.stdout)
    assert round(data["model"]["total_params"] / 1e9, 1) == 30.5 and round(data["model"]["active_params"] / 1e9, 1) == 3.4
    assert data["memory"]["weights_fit"] and data["memory"]["kv_cache_bytes_per_token"] == 2 * 48 * 4 * 128 * 2
    text = run_cli("estimate", "--model", str(config), "--gpu", "h100-sxm")
    assert text.returncode == 0 and "do not fit" not in text.stdout and "3.35B active (8 of 128 experts)" in text.stdout


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


def test_run_prints_its_cost_at_each_price(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--concurrency", "2", "--requests", "10",
                "--max-tokens", "8", "--warmup", "0", "--plain", "--price-per-hour", "2.5", "--price-per-hour", "5",
                "--gpus", "2")
    assert p.returncode == 0, p.stderr
    result = load_json(tmp_path / "r" / "run.json")
    assert result["config"]["price_per_hour"] == [2.5, 5.0] and result["config"]["gpus"] == 2
    tok_s = result["benchmarks"][0]["summary"]["throughput"]["output_tokens_per_s"]
    per_million = 2.5 * 2 / (tok_s * 3600) * 1e6  # two GPUs at 2.5 an hour, for 1M output tokens
    rows = [line.split("│") for line in p.stdout.splitlines() if line.count("│") > 5 and "concurrency 2" in line]
    shown = [float(cells[4].replace(",", "")) for cells in rows]  # the "per 1M output tok" column
    assert "cost at the measured throughput" in p.stdout and len(shown) == 2
    assert abs(shown[0] - per_million) <= 0.01 * per_million and abs(shown[1] - 2 * per_million) <= 0.02 * per_million
