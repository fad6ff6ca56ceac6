"""Token audit, steady state and the measurement report against the simulator (real HTTP, real subprocesses)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import SimServer, run_cli

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level BPE trained in-process on the simulator's vocabulary (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tokspeed.sim.vocab import token_text

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([token_text(i * 13, 40) for i in range(50)], trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def _run_json(out: Path) -> dict[str, Any]:
    return orjson.loads((out / "run.json").read_bytes())


def test_token_audit_at_run_time(start_sim: Callable[..., SimServer], tmp_path: Path, tokenizer_file: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2")
    out = tmp_path / "audit"
    p = run_cli("run", "--target", sim.url, "-n", "6", "--warmup", "0", "--concurrency", "2", "--max-tokens", "8",
                "--token-audit", "--tokenizer", str(tokenizer_file), "--no-telemetry", "--quiet", "--out", str(out))
    assert p.returncode == 0, p.stderr
    records = [orjson.loads(line) for line in (out / "requests.jsonl").read_bytes().splitlines()]
    assert len(records) == 6 and all(r["output_text"] for r in records)  # every text kept, not only samples
    tok = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    diffs = [len(tok.encode(r["output_text"], add_special_tokens=False).ids) - r["output_tokens"] for r in records]
    audit = _run_json(out)["benchmarks"][0]["token_audit"]
    assert audit["requests"] == 6 and audit["texts"] == 6 and audit["sources"] == {"usage": 6}
    d = audit["discrepancy"]
    assert d["compared"] == 6 and d["exact"] == sum(x == 0 for x in diffs)
    assert d["mean"] == pytest.approx(sum(diffs) / 6) and d["max_abs"] == max(abs(x) for x in diffs)
    assert audit["early_stops"] == {"asked": 6, "short": 0, "short_fraction": 0.0, "short_by_finish_reason": {},
                                    "over": 0, "examples": [], "undercounted": 0}

    shown = run_cli("report", str(out), "--token-audit", "--stats")
    assert shown.returncode == 0, shown.stderr
    assert "Token audit" in shown.stdout and "tokenizer − usage over 6 requests" in shown.stdout
    assert "Measurement statistics" in shown.stdout and "bootstrap" in shown.stdout


def test_without_token_audit_texts_stay_samples_only(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "plain"
    p = run_cli("run", "--target", sim.url, "-n", "8", "--warmup", "0", "--max-tokens", "4", "--no-telemetry",
                "--quiet", "--out", str(out))
    assert p.returncode == 0, p.stderr
    records = [orjson.loads(line) for line in (out / "requests.jsonl").read_bytes().splitlines()]
    assert sum(r["output_text"] is not None for r in records) < 8
    assert _run_json(out)["benchmarks"][0]["token_audit"] is None
    shown = run_cli("report", str(out), "--token-audit")  # computed offline, without a tokenizer
    assert shown.returncode == 0 and "stopped before max_tokens: 0 of 8" in shown.stdout


def test_steady_state_and_the_schedule_view(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """An open loop faster than one stream can serve: latency from the schedule grows, from the send it does not."""
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2")
    out = tmp_path / "open"
    p = run_cli("run", "--target", sim.url, "-n", "30", "--warmup", "0", "--rate", "60", "--arrival", "constant",
                "--max-concurrency", "1", "--max-tokens", "8", "--no-telemetry", "--quiet", "--out", str(out))
    assert p.returncode == 0, p.stderr
    summary = _run_json(out)["benchmarks"][0]["summary"]
    steady = summary["steady_state"]
    assert steady is not None and steady["window_s"] <= steady["full_window_s"]
    assert 0 < steady["requests"] <= summary["requests"]["completed"]
    assert steady["summary"]["requests"]["completed"] == steady["requests"]
    # each request takes ≈ 10 + 7 × 2 = 24 ms but one is due every 16.7 ms: the queue grows
    assert summary["ttft_from_scheduled_ms"]["p99"] > summary["ttft_ms"]["p99"] + 50
    shown = run_cli("report", str(out), "--stats")
    assert shown.returncode == 0 and "coordinated-omission corrected" in shown.stdout
    assert "steady state (mser-5" in shown.stdout
