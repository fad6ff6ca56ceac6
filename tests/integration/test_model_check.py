"""Model-directory checks before an in-process load, and cold start recorded apart from warm inference.

On the embedded `tiny` model exported to disk (real transformers loads, real
subprocesses): a broken copy makes `tokspeed run --target hf:DIR` stop before
loading with the precise problem; a good one records target.extra.cold_start,
whose phases add up and whose first-request and warm figures agree with
requests.jsonl and the run's own summary. Skipped without torch and transformers.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from statistics import median
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from harness import load_json, records, run_cli
from real_servers import exported_model  # noqa: F401

pytestmark = pytest.mark.integration

ROUNDING = 2e-4  # start phases are kept to 0.1 ms; request figures to 1 µs


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _refused(target: str, out: Path, *extra: str, within_s: float = 60) -> str:
    t0 = time.monotonic()
    p = run_cli("run", "--target", target, "--requests", "2", "--max-tokens", "4", "--out", str(out), "--plain", *extra, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Loading weights" not in p.stderr + p.stdout  # refused before transformers loads anything
    assert not out.exists()  # nor is a results directory made
    assert time.monotonic() - t0 < within_s
    return p.stderr


def test_a_truncated_download_is_refused_before_loading(exported_model: Path, tmp_path: Path) -> None:
    broken = _copy(exported_model, tmp_path / "broken")
    weights = broken / "model.safetensors"
    full = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(full - 4096)
    err = _refused(f"hf:{broken}", tmp_path / "r", within_s=20)  # a file error: refused without importing transformers
    assert f"model.safetensors is truncated: its header declares {full:,} bytes, the file has {full - 4096:,}" in err
    assert "Hint: download the model again" in err


def test_missing_shard_and_custom_code_are_named(exported_model: Path, tmp_path: Path) -> None:
    broken = _copy(exported_model, tmp_path / "sharded")
    (broken / "model.safetensors").rename(broken / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    err = _refused(f"hf:{broken}", tmp_path / "r1")
    assert "model.safetensors.index.json names 2 shard files; 1 is missing: model-00002-of-00002.safetensors" in err

    custom = _copy(exported_model, tmp_path / "custom")
    config = json.loads((custom / "config.json").read_text())
    config.update(model_type="tokspeed_secret", auto_map={"AutoModelForCausalLM": "modeling_secret.SecretLM"})
    (custom / "config.json").write_text(json.dumps(config))
    err = _refused(f"hf:{custom}", tmp_path / "r2")
    assert "it needs --trust-remote-code: its auto_map maps AutoModelForCausalLM -> modeling_secret.SecretLM" in err


def test_check_model_command_reports_a_good_directory(exported_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tokspeed.cli import main

    assert main(["check-model", str(exported_model), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["architectures"] == ["LlamaForCausalLM"] and report["checkpoint_dtype"] == "bfloat16"
    assert report["support"]["supported"] is True and report["tokenizer"]["chat_template"] == "chat_template.jinja"
    assert report["weights"]["format"] == "safetensors" and report["parameters_exact"]


def _check_cold_start(out: Path, n: int, warmup: int) -> dict[str, Any]:
    """The phases add up; first-request and warm figures agree with requests.jsonl and the summary."""
    run = load_json(out / "run.json")
    cold = run["target"]["extra"]["cold_start"]
    assert run["benchmarks"][0]["target"]["extra"]["cold_start"] == cold
    assert cold["load_s"] > 0 and cold["other_s"] >= 0
    parts = cold["load_s"] + (cold["warmup_s"] or 0) + cold["other_s"]
    assert abs(parts - cold["start_s"]) <= ROUNDING, cold
    rows = records(out)
    first = min(rows, key=lambda r: r["sent_ns"])
    fc = cold["first_request"]
    assert fc["index"] == first["index"] and fc["warmup"] == (warmup > 0)
    assert abs(fc["ttft_s"] - (first["first_token_ns"] - first["sent_ns"]) / 1e9) <= 2e-6
    assert abs(fc["e2e_s"] - (first["end_ns"] - first["sent_ns"]) / 1e9) <= 2e-6
    # the first request goes out after start() ended, and its first token after that
    assert cold["start_s"] - ROUNDING <= fc["after_start_s"] < cold["start_s"] + 5
    assert abs(cold["first_token_after_s"] - (fc["after_start_s"] + fc["ttft_s"])) <= 3e-6
    warm = [r for r in rows if r is not first and not r["warmup"] and r["status"] == "ok"]
    assert cold["warm"]["requests"] == len(warm) == (n if warmup else n - 1)
    ttft = median((r["first_token_ns"] - r["sent_ns"]) / 1e9 for r in warm)
    assert abs(cold["warm"]["ttft_p50_s"] - ttft) <= 2e-6
    if warmup:  # the warm set is then exactly the measured requests: the summary's own p50 agrees
        assert abs(cold["warm"]["ttft_p50_s"] * 1000 - run["benchmarks"][0]["summary"]["ttft_ms"]["p50"]) <= 2e-3
    assert abs(cold["first_ttft_excess_s"] - (fc["ttft_s"] - cold["warm"]["ttft_p50_s"])) <= 3e-6
    return cold


def test_an_hf_run_records_cold_start_apart_from_warm_requests(exported_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    t0 = time.monotonic()
    p = run_cli("run", "--target", f"hf:{exported_model}", "--requests", "5", "--max-tokens", "8", "--warmup", "1",
                "--out", str(out), "--plain", timeout=300)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    cold = _check_cold_start(out, n=5, warmup=1)
    assert cold["warmup_s"] > 0
    assert cold["first_token_after_s"] < wall  # all inside the process's own lifetime
    assert p.stdout.count("Cold start  model load") == 2  # when the target is ready, and in the final printout
    assert "first request (a warm-up request) TTFT" in p.stdout
    extra = load_json(out / "run.json")["target"]["extra"]
    assert extra["model_check"]["ok"] is True and extra["model_check"]["engine"] == "hf"


def test_the_embedded_model_without_warmup(tmp_path: Path) -> None:
    out = tmp_path / "r"
    p = run_cli("run", "--target", "embedded:tiny", "--requests", "4", "--max-tokens", "6", "--warmup", "0",
                "--out", str(out), "--plain", timeout=300)
    assert p.returncode == 0, p.stderr
    cold = _check_cold_start(out, n=4, warmup=0)
    extra = load_json(out / "run.json")["target"]["extra"]
    assert abs(cold["load_s"] - (extra["tokenizer_s"] + extra["model_build_s"])) <= 2e-3
    assert "first request (a measured request)" in p.stdout


def test_a_load_failure_the_check_cannot_foresee_repeats_its_warnings(exported_model: Path, tmp_path: Path) -> None:
    import asyncio

    from tokspeed.backends.hf import HFBackend
    from tokspeed.errors import TargetError

    odd = _copy(exported_model, tmp_path / "odd")
    (odd / "chat_template.jinja").unlink()
    config = json.loads((odd / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (odd / "tokenizer_config.json").write_text(json.dumps(config))
    (odd / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "NoSuchModel"}}))
    backend = HFBackend(odd, api="completions")  # passes the check, with a warning
    assert [p.code for p in backend.model_check.warnings] == ["no_chat_template"]
    with pytest.raises(TargetError) as info:
        asyncio.run(backend.start())
    assert str(info.value).endswith("(the model check had warned: the tokenizer has no chat template: only --api completions will work)")
    asyncio.run(backend.close())
