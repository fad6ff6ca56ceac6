"""`--target hf:PATH`: a local transformers model in-process, on the embedded `tiny` model exported to disk.

Skipped without torch and transformers (the `hf`/`embedded` extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from time import perf_counter_ns

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from harness import load_json, run_cli
from real_servers import check_sane, exported_model, measured  # noqa: F401
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.backends.hf import HFBackend
from tokspeed.errors import ConfigError
from tokspeed.records import RequestRecord, RequestSpec, Status, TokenSource

pytestmark = pytest.mark.integration

PROMPT = "Explain time to first token in one paragraph. 请用中文再解释一遍。"


@pytest.fixture(scope="module")
def exact(exported_model: Path) -> Iterator[HFBackend]:
    """A started backend told to ignore EOS (exactly max_tokens tokens), for the module."""
    b = HFBackend(exported_model, extra_body={"ignore_eos": True}, keep_text_for=2)
    info = asyncio.run(b.start())
    assert info.kind == "hf" and info.url is None and info.model == str(exported_model)
    assert info.extra["architecture"] == "LlamaForCausalLM" and info.extra["device"] == "cpu"
    assert "one request at a time" in info.notes[0]
    yield b
    asyncio.run(b.close())


def _record(index: int) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=perf_counter_ns())


async def test_ignore_eos_gives_exactly_the_tokens_asked_for(exact: HFBackend) -> None:
    for index, n in enumerate((1, 3, 20)):
        record = _record(index)
        await exact.send(RequestSpec(index=index, prompt=PROMPT, max_tokens=n), record)
        assert record.status is Status.OK, record.error
        assert record.output_tokens == n and record.output_tokens_source is TokenSource.ENGINE
        assert record.chunk_tokens == [1] * n and all(b > a for a, b in pairwise(record.chunk_ns))
        assert record.first_token_ns == record.chunk_ns[0] > record.sent_ns
        assert record.end_ns >= record.chunk_ns[-1] and record.finish_reason == "length"
        assert (record.output_text is not None) == (index < 2)


async def test_chat_prompts_go_through_the_models_chat_template(exact: HFBackend, exported_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(exported_model), local_files_only=True)
    record = _record(5)
    await exact.send(RequestSpec(index=5, messages=({"role": "user", "content": PROMPT},), max_tokens=2), record)
    text = tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True)
    assert record.input_tokens == len(tok.encode(text, add_special_tokens=False))
    assert record.input_tokens_source is TokenSource.TOKENIZER


async def test_requests_are_served_one_at_a_time(exact: HFBackend) -> None:
    """No batching: the token streams of concurrent requests never interleave; the wait is in TTFT."""
    recs = [_record(10 + i) for i in range(3)]
    await asyncio.gather(*(exact.send(RequestSpec(index=r.index, prompt=PROMPT, max_tokens=8), r) for r in recs))
    spans = sorted((r.chunk_ns[0], r.chunk_ns[-1]) for r in recs)
    assert all(a[1] < b[0] for a, b in pairwise(spans))
    ttfts = sorted(r.first_token_ns - r.sent_ns for r in recs)
    assert ttfts[-1] > ttfts[0]


async def test_cancelling_leaves_an_incomplete_record_and_the_engine_serving(exact: HFBackend) -> None:
    record = _record(20)
    task = asyncio.ensure_future(exact.send(RequestSpec(index=20, prompt=PROMPT, max_tokens=3000), record))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert record.status is Status.INCOMPLETE
    after = _record(21)
    await exact.send(RequestSpec(index=21, prompt=PROMPT, max_tokens=2), after)
    assert after.status is Status.OK and after.output_tokens == 2


async def test_too_long_a_request_is_an_error_record(exact: HFBackend) -> None:
    record = _record(30)
    await exact.send(RequestSpec(index=30, prompt=PROMPT, max_tokens=5000), record)
    assert record.status is Status.ERROR and "context" in (record.error or "")


async def test_by_default_generation_stops_at_the_models_end_of_sequence(exported_model: Path) -> None:
    b = HFBackend(exported_model, api="completions", sampling={"temperature": 0.0}, options=EngineOptions(dtype="fp32"))
    info = await b.start()
    try:
        assert info.extra["dtype"] == "float32" and info.extra["ignore_eos"] is False
        record = _record(0)
        await b.send(RequestSpec(index=0, prompt=PROMPT, max_tokens=64), record)
        assert record.status is Status.OK and 1 <= record.output_tokens <= 64
        assert record.finish_reason == ("length" if record.output_tokens == 64 else "stop")
    finally:
        await b.close()


def test_cuda_without_a_gpu_is_a_usage_error(exported_model: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="sees no CUDA GPU"):
        HFBackend(exported_model, options=EngineOptions(device="cuda"))


def test_the_cli_benchmarks_an_hf_model(exported_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    p = run_cli("run", "--target", f"hf:{exported_model}", "--requests", "6", "--concurrency", "2", "--max-tokens", "12",
                "--extra-body", '{"ignore_eos": true}', "--dtype", "auto", "--out", str(out), "--plain", timeout=300)
    assert p.returncode == 0, p.stderr
    assert "in-process with transformers" in p.stdout and "one request at a time" in p.stdout
    check_sane(out, requests=6, max_tokens=12, exact=True)
    run = load_json(out / "run.json")
    assert run["target"]["kind"] == "hf" and run["config"]["target"] == f"hf:{exported_model.resolve()}"
    assert all(r["input_tokens_source"] == "tokenizer" for r in measured(out))
