"""The embedded model for real: torch generation in a worker thread, the CLI default, export and reload.

Skipped without the `embedded` extra (pip install -e '.[embedded,test]').
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from time import perf_counter_ns

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tokspeed.backends.embedded import EmbeddedBackend, export_model, get_size
from tokspeed.backends.embedded.model import build_model
from tokspeed.backends.embedded.tokenizer import format_chat, load_tokenizer
from tokspeed.records import RequestRecord, RequestSpec, Status, TokenSource

pytestmark = pytest.mark.integration

PROMPT = "Explain time to first token in one paragraph. 请用中文再解释一遍。"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def backend(cache_dir: Path) -> Iterator[EmbeddedBackend]:
    """One started tiny model for the module (its worker thread serves every test's event loop)."""
    b = EmbeddedBackend("tiny", cache_dir=cache_dir, keep_text_for=2)
    info = asyncio.run(b.start())
    assert info.kind == "embedded" and info.url is None
    assert info.model == "embedded:tiny (random weights)"
    assert info.extra["parameters"] == get_size("tiny").parameter_count()
    assert info.extra["torch_threads"] >= 1
    yield b
    asyncio.run(b.close())


def _record(index: int) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=perf_counter_ns())


async def test_every_request_gets_exactly_the_tokens_it_asked_for(backend: EmbeddedBackend) -> None:
    for index, n in enumerate((1, 2, 17, 40)):
        record = _record(index)
        await backend.send(RequestSpec(index=index, prompt=PROMPT, max_tokens=n), record)
        assert record.status is Status.OK, record.error
        assert record.output_tokens == n and record.output_tokens_source is TokenSource.ENGINE
        assert len(record.chunk_ns) == n and record.chunk_tokens == [1] * n
        assert all(b > a for a, b in pairwise(record.chunk_ns))
        assert record.first_token_ns is not None and record.first_token_ns > record.sent_ns > 0
        assert record.first_content_ns == record.first_token_ns == record.chunk_ns[0]
        assert record.end_ns is not None and record.end_ns >= record.chunk_ns[-1]
        assert record.finish_reason == "length" and record.max_tokens == n
        assert (record.output_text is not None) == (index < 2)


async def test_input_tokens_are_counted_by_the_real_tokenizer(backend: EmbeddedBackend, cache_dir: Path) -> None:
    tok = load_tokenizer(cache_dir).tokenizer
    chat = _record(5)
    await backend.send(RequestSpec(index=5, prompt=PROMPT, max_tokens=2), chat)
    templated = format_chat([{"role": "user", "content": PROMPT}])
    assert chat.input_tokens == len(tok.encode(templated, add_special_tokens=False).ids)
    assert chat.input_tokens_source is TokenSource.TOKENIZER

    backend.api = "completions"
    try:
        plain = _record(6)
        await backend.send(RequestSpec(index=6, prompt=PROMPT, max_tokens=2), plain)
    finally:
        backend.api = "chat"
    assert plain.input_tokens == len(tok.encode(PROMPT, add_special_tokens=False).ids) < chat.input_tokens


async def test_concurrent_requests_are_served_one_at_a_time_and_queueing_shows_in_ttft(backend: EmbeddedBackend) -> None:
    records = [_record(10 + i) for i in range(3)]
    await asyncio.gather(
        *(backend.send(RequestSpec(index=r.index, prompt=PROMPT, max_tokens=12), r) for r in records)
    )
    assert all(r.ok and r.output_tokens == 12 for r in records)
    spans = sorted((r.chunk_ns[0], r.end_ns or 0) for r in records)
    assert all(later[0] > earlier[1] for earlier, later in pairwise(spans))
    ttfts = sorted((r.first_token_ns or 0) - r.sent_ns for r in records)
    assert ttfts[-1] > ttfts[0] + (spans[0][1] - spans[0][0]) // 2  # the last one waited for the others


async def test_cancelling_a_request_stops_it_and_the_engine_keeps_serving(backend: EmbeddedBackend) -> None:
    record = _record(20)
    task = asyncio.ensure_future(backend.send(RequestSpec(index=20, prompt=PROMPT, max_tokens=3000), record))
    await asyncio.sleep(0.3)  # generation is under way (3000 tokens would take 10+ s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert record.status is Status.INCOMPLETE and 0 < len(record.chunk_ns) < 3000
    after = _record(21)
    t0 = perf_counter_ns()
    await backend.send(RequestSpec(index=21, prompt=PROMPT, max_tokens=4), after)
    assert after.ok and after.output_tokens == 4
    assert perf_counter_ns() - t0 < 5_000_000_000  # not stuck behind the cancelled 3000 tokens


async def test_requests_the_engine_cannot_serve_are_errors_not_exceptions(backend: EmbeddedBackend) -> None:
    too_long = _record(30)
    await backend.send(RequestSpec(index=30, prompt=PROMPT, max_tokens=5000), too_long)
    assert too_long.status is Status.ERROR and "context" in (too_long.error or "")
    assert too_long.end_ns is not None and too_long.sent_ns > 0
    empty = _record(31)
    backend.api = "completions"
    try:
        await backend.send(RequestSpec(index=31, prompt="", max_tokens=4), empty)
    finally:
        backend.api = "chat"
    assert empty.status is Status.ERROR and empty.error == "empty prompt"


def test_built_models_match_the_advertised_sizes_and_seeded_weights(cache_dir: Path) -> None:
    import torch

    tok = load_tokenizer(cache_dir)
    for name in ("tiny", "small"):
        built = build_model(get_size(name), tok, dtype="float32", seed=0)
        assert built.parameters == get_size(name).parameter_count()
    a = build_model(get_size("tiny"), tok, dtype="float32", seed=1).model.state_dict()
    b = build_model(get_size("tiny"), tok, dtype="float32", seed=1).model.state_dict()
    c = build_model(get_size("tiny"), tok, dtype="float32", seed=2).model.state_dict()
    key = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


def test_export_reloads_with_auto_classes_offline(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = export_model(tmp_path / "model", "tiny", cache_dir=cache_dir)
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 8192
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"

    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == get_size("tiny").parameter_count()
    messages = [{"role": "user", "content": PROMPT}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == format_chat(messages)
    reference = build_model(get_size("tiny"), load_tokenizer(cache_dir), dtype="bfloat16", seed=0).model.state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(model.state_dict()[key].to(torch.bfloat16), reference[key])
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    out_ids = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out_ids.shape[1] == ids.shape[1] + 5


def test_cli_runs_the_embedded_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    env.pop("TOKSPEED_TARGET", None)
    cmd = [sys.executable, "-m", "tokspeed", "run", "--target", "embedded:tiny", "--requests", "4",
           "--max-tokens", "16", "--out", str(out), "--plain"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "embedded model tiny" in done.stdout and "random weights" in done.stdout
    run = json.loads((out / "run.json").read_text())
    assert run["target"]["kind"] == "embedded"
    summary = run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == 4 and summary["requests"]["errored"] == 0
    assert summary["output_tokens"]["mean"] == 16
    assert summary["ttft_ms"]["min"] > 0 and summary["itl_ms"]["min"] > 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 5  # one warm-up + four measured
    assert all(json.loads(line)["output_tokens_source"] == "engine" for line in lines)
