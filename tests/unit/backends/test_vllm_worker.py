"""The vLLM worker's step loop against a stand-in engine (no vLLM needed).

The stand-in behaves like vLLM's `LLMEngine` in the ways the worker relies on:
`add_request` queues a request, each `step()` gives every running request one
token (DELTA: that token; FINAL_ONLY: nothing until the request finishes),
`abort_request` drops requests, and a finished output carries metrics with a
monotonic `first_token_ts`.
"""

from __future__ import annotations

import enum
import threading
import time
from concurrent.futures import wait
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from tokspeed.backends.vllm_offline.engine import VJob, VLLMWorker
from tokspeed.records import RequestSpec


class Kind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class Params:
    max_tokens: int
    output_kind: Kind
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_optional(cls, max_tokens: int, output_kind: Kind, **extra: Any) -> Params:
        if max_tokens > 1000:
            raise ValueError("max_tokens too large for this model")
        return cls(max_tokens, output_kind, extra)


class FakeEngine:
    def __init__(self, fail_at_step: int | None = None) -> None:
        self.running: dict[str, dict[str, Any]] = {}
        self.batch_sizes: list[int] = []
        self.aborted: list[str] = []
        self.fail_at_step = fail_at_step

    def add_request(self, rid: str, prompt: Any, params: Params) -> str:
        self.running[rid] = {"params": params, "done": 0, "prompt": prompt, "first": None}
        return rid

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def abort_request(self, rids: list[str]) -> None:
        for rid in rids:
            self.aborted.append(rid)
            self.running.pop(rid, None)

    def step(self) -> list[Any]:
        if self.fail_at_step is not None and len(self.batch_sizes) == self.fail_at_step:
            raise RuntimeError("engine core died")
        self.batch_sizes.append(len(self.running))
        time.sleep(0.002)
        outs = []
        for rid, req in list(self.running.items()):
            req["done"] += 1
            if req["first"] is None:
                req["first"] = time.monotonic()
            params: Params = req["params"]
            finished = req["done"] >= params.max_tokens
            delta = params.output_kind is Kind.DELTA
            if not delta and not finished:
                continue
            ids = [7] if delta else [7] * req["done"]
            outs.append(SimpleNamespace(
                request_id=rid, prompt_token_ids=[1, 2, 3], finished=finished,
                outputs=[SimpleNamespace(token_ids=ids, text="x" * len(ids), finish_reason="length" if finished else None)],
                metrics=SimpleNamespace(first_token_ts=req["first"]),
            ))
            if finished:
                del self.running[rid]
        return outs


class FakeLLM:
    def __init__(self, engine: FakeEngine) -> None:
        self.llm_engine = engine

    def _preprocess_cmpl_one(self, prompt: str) -> dict[str, Any]:
        return {"prompt": prompt}


def _worker(engine: FakeEngine, stream: bool = True) -> VLLMWorker:
    w = VLLMWorker(lambda: FakeLLM(engine), api="completions", stream=stream, sampling_types=lambda: (Kind, Params))
    w.start().result(5)
    return w


def _job(i: int, n: int, keep: bool = False) -> VJob:
    return VJob(spec=RequestSpec(index=i, prompt=f"p{i}", max_tokens=n), sampling={"max_tokens": n}, keep_text=keep)


def test_requests_handed_over_together_are_batched_and_streamed_per_step() -> None:
    engine = FakeEngine()
    w = _worker(engine)
    try:
        gate = threading.Event()
        engine_step = engine.step
        engine.step = lambda: (gate.wait(5), engine_step())[1]  # type: ignore[method-assign]
        jobs = [_job(i, 5, keep=i == 0) for i in range(4)]
        for j in jobs:
            w.submit(j)
        time.sleep(0.05)
        gate.set()
        wait([j.future for j in jobs], timeout=5)
        assert engine.batch_sizes[0] == 4  # all four were added before the first step, as llm.generate does
        for j in jobs:
            assert j.error is None and j.output_tokens == 5 and j.chunk_tokens == [1] * 5
            assert j.chunk_ns == sorted(j.chunk_ns) and len(set(j.chunk_ns)) == 5
            assert j.prompt_tokens == 3 and j.finish_reason == "length" and j.end_ns == j.chunk_ns[-1]
        assert "".join(jobs[0].text) == "xxxxx" and jobs[1].text == []
    finally:
        w.close()


def test_final_only_mode_takes_the_first_token_time_from_the_engines_metrics() -> None:
    w = _worker(FakeEngine(), stream=False)
    try:
        job = _job(0, 6)
        w.submit(job)
        job.future.result(5)
        assert job.chunk_ns == [] and job.output_tokens == 6
        assert job.first_token_ns is not None and job.first_token_ns < job.end_ns  # type: ignore[operator]
    finally:
        w.close()


def test_cancelled_requests_are_aborted_in_the_engine() -> None:
    engine = FakeEngine()
    w = _worker(engine)
    try:
        long, short = _job(0, 900), _job(1, 3)
        w.submit(long)
        w.submit(short)
        short.future.result(5)
        w.cancel(long)
        long.future.result(5)
        assert long.error == "cancelled" and engine.aborted == [long.request_id]
        again = _job(2, 2)
        w.submit(again)
        assert again.future.result(5).output_tokens == 2
    finally:
        w.close()


def test_a_refused_request_is_an_error_and_a_dead_engine_fails_everything_after() -> None:
    engine = FakeEngine(fail_at_step=3)
    w = _worker(engine)
    try:
        refused = _job(0, 5000)
        w.submit(refused)
        assert "max_tokens too large" in (refused.future.result(5).error or "")
        doomed = _job(1, 50)
        w.submit(doomed)
        assert "engine core died" in (doomed.future.result(5).error or "")
        later = _job(2, 2)
        w.submit(later)
        assert "engine core died" in (later.future.result(5).error or "")
    finally:
        w.close()


def test_a_load_failure_reaches_start() -> None:
    def broken() -> Any:
        raise OSError("no such model")

    w = VLLMWorker(broken, api="completions", stream=True, sampling_types=lambda: (Kind, Params))
    with pytest.raises(OSError, match="no such model"):
        w.start().result(5)
