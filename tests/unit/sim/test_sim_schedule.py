"""Unit tests for the simulator's pure parts: chunk grouping, deadlines, token text, the gate."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokspeed import sim
from tokspeed.sim.config import SimConfig, describe
from tokspeed.sim.gate import FifoGate
from tokspeed.sim.request import ApiName, SimRequest
from tokspeed.sim.schedule import Chunk, Timing, make_plan, plan_chunks, sleep_until
from tokspeed.sim.vocab import TOKENS, token_text
from tokspeed.workload.tokens import approx_token_count


def _req(api: ApiName = "chat", max_tokens: int | None = None, prompt_tokens: int = 0) -> SimRequest:
    return SimRequest(
        api=api,
        stream=True,
        has_stream_options=False,
        include_usage=False,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
    )


def test_public_names_are_sorted_and_exported() -> None:
    assert sim.__all__ == sorted(sim.__all__)
    assert all(hasattr(sim, name) for name in sim.__all__)


def test_every_token_counts_as_one() -> None:
    assert all(approx_token_count(t) == 1 for t in TOKENS)


@given(st.integers(0, 500), st.integers(0, 300))
def test_joined_tokens_count_exactly(first: int, count: int) -> None:
    assert approx_token_count(token_text(first, count)) == count


def test_plan_chunks_groups_reasoning_and_content_separately() -> None:
    chunks = plan_chunks(reasoning_tokens=3, content_tokens=4, tokens_per_chunk=2)
    assert chunks == (
        Chunk(0, 2, True),
        Chunk(2, 1, True),
        Chunk(3, 2, False),
        Chunk(5, 2, False),
    )
    assert [c.last_token for c in chunks] == [1, 2, 4, 6]


@given(st.integers(0, 50), st.integers(0, 200), st.integers(1, 9))
def test_plan_chunks_covers_every_token_once(reasoning: int, content: int, size: int) -> None:
    chunks = plan_chunks(reasoning, content, size)
    assert sum(c.tokens for c in chunks) == reasoning + content
    assert all(1 <= c.tokens <= size for c in chunks)
    assert [c.first_token for c in chunks] == sorted(c.first_token for c in chunks)
    assert sum(c.tokens for c in chunks if c.reasoning) == reasoning


@given(st.integers(0, 10_000), st.integers(1, 20))
def test_token_text_of_one_token_at_a_time_joins_to_the_text_of_many(first: int, count: int) -> None:
    assert "".join(token_text(i, 1) for i in range(first, first + count)) == token_text(first, count)
    assert token_text(first, 1) == TOKENS[first % len(TOKENS)]


def test_deadlines_are_absolute() -> None:
    timing = Timing(prefill_ns=30_000_000, itl_ns=5_000_000)
    assert timing.due_offset_ns(0) == 30_000_000
    assert timing.due_offset_ns(99) == 30_000_000 + 99 * 5_000_000


def test_make_plan_adds_prefill_per_prompt_token_and_caps_reasoning() -> None:
    cfg = SimConfig(ttft_ms=10, itl_ms=2, per_prompt_token_us=50, reasoning_tokens=8, output_tokens=5)
    plan = make_plan(cfg, _req(prompt_tokens=1000))
    assert plan.timing == Timing(prefill_ns=10_000_000 + 50_000_000, itl_ns=2_000_000)
    assert (plan.total_tokens, plan.reasoning_tokens, plan.content_tokens) == (5, 5, 0)
    assert plan.last_due_offset_ns() == 60_000_000 + 4 * 2_000_000


def test_make_plan_completions_have_no_reasoning_and_honour_max_tokens() -> None:
    plan = make_plan(SimConfig(reasoning_tokens=8), _req(api="completions", max_tokens=17))
    assert (plan.total_tokens, plan.reasoning_tokens) == (17, 0)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        SimConfig(tokens_per_chunk=0)
    with pytest.raises(ValueError):
        SimConfig(itl_ms=-1)
    with pytest.raises(ValueError):
        SimConfig(max_concurrency=0)


def test_describe_mentions_timing() -> None:
    text = describe(SimConfig(ttft_ms=30, itl_ms=5, max_concurrency=4, crlf=True))
    assert "ttft 30 ms" in text and "itl 5 ms" in text and "concurrency 4" in text and "crlf" in text


async def test_sleep_until_never_returns_early() -> None:
    for delay_ns in (0, 200_000, 1_300_000, 3_000_000):
        due = time.perf_counter_ns() + delay_ns
        await sleep_until(due)
        assert time.perf_counter_ns() >= due


async def test_sleep_until_past_deadline_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # "at once" is "without sleeping", not "within 1 ms": a loaded machine can deschedule any process
    # for longer than that between two clock reads
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("tokspeed.sim.schedule.asyncio.sleep", sleep)
    await sleep_until(time.perf_counter_ns() - 1_000_000_000)
    await sleep_until(time.perf_counter_ns())
    assert slept == []
    await sleep_until(time.perf_counter_ns() + 2_000_000)  # and the fake does see a wait that is due
    assert slept


async def test_gate_admits_in_arrival_order() -> None:
    gate = FifoGate(1)
    order: list[int] = []

    async def worker(i: int) -> None:
        await gate.acquire()
        order.append(i)
        await asyncio.sleep(0)
        gate.release()

    await asyncio.gather(*(worker(i) for i in range(6)))
    assert order == list(range(6))
    assert (gate.active, gate.waiting) == (0, 0)


async def test_gate_cancelled_waiter_gives_up_its_place() -> None:
    gate = FifoGate(1)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    assert gate.waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.waiting == 0
    gate.release()
    assert gate.active == 0


async def test_gate_granted_then_cancelled_passes_the_slot_on() -> None:
    gate = FifoGate(1)
    await gate.acquire()
    first = asyncio.create_task(gate.acquire())
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # grants `first`, which is cancelled before it runs
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert gate.active == 1


async def test_unlimited_gate_never_waits() -> None:
    gate = FifoGate(None)
    for _ in range(1000):
        await gate.acquire()
    assert gate.active == 1000
