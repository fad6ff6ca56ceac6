"""When each part of a simulated response is due, and waiting until then.

All deadlines are absolute offsets from the moment service starts: generated token i (over
reasoning and content tokens together, 0-based) is due at `prefill_ns + i * itl_ns`, and a
chunk goes out when its last token is due. Lateness of one chunk therefore never delays the
next one's deadline (no accumulated jitter).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

from tokspeed.sim.config import SimConfig
from tokspeed.sim.request import SimRequest
from tokspeed.sim.vocab import token_text

MIN_SLEEP_S = 0.001  # the event loops' timer granularity; shorter waits would busy-poll


@dataclass(frozen=True, slots=True)
class Chunk:
    """One token-bearing chunk: tokens `first_token` .. `first_token + tokens - 1`."""

    first_token: int
    tokens: int
    reasoning: bool

    @property
    def last_token(self) -> int:
        return self.first_token + self.tokens - 1


@dataclass(frozen=True, slots=True)
class Timing:
    """A response's schedule in integer nanoseconds after service start."""

    prefill_ns: int  # time to first token: base TTFT plus per-prompt-token prefill
    itl_ns: int  # interval between consecutive tokens

    def due_offset_ns(self, token_index: int) -> int:
        """When token `token_index` (0-based) is due, relative to service start."""
        return self.prefill_ns + token_index * self.itl_ns


def make_plan(cfg: SimConfig, req: SimRequest, cached_tokens: int = 0) -> ResponsePlan:
    """The response a request gets: max_tokens (else the default) tokens, reasoning first (chat only).

    `cached_tokens` prompt tokens (found in the prefix cache) skip the per-prompt-token prefill.
    """
    total = req.max_tokens if req.max_tokens is not None else cfg.output_tokens
    reasoning = min(cfg.reasoning_tokens, total) if req.api == "chat" else 0
    computed = req.prompt_tokens - cached_tokens
    prefill_ns = round(cfg.ttft_ms * 1_000_000 + computed * cfg.per_prompt_token_us * 1_000)
    timing = Timing(prefill_ns=prefill_ns, itl_ns=round(cfg.itl_ms * 1_000_000))
    return ResponsePlan(timing=timing, total_tokens=total, reasoning_tokens=reasoning)


@functools.lru_cache(maxsize=256)
def plan_chunks(reasoning_tokens: int, content_tokens: int, tokens_per_chunk: int) -> tuple[Chunk, ...]:
    """Group the generated tokens into chunks of `tokens_per_chunk`.

    Reasoning tokens come first and are grouped on their own, so no chunk mixes reasoning
    and content: the last reasoning chunk and the last content chunk may carry fewer tokens.
    Cached (the chunks are immutable): a load's requests mostly ask for the same few lengths, and
    building a chunk object per token was a tenth of the simulator's CPU per streamed request.
    """
    chunks = _group(0, reasoning_tokens, tokens_per_chunk, reasoning=True)
    chunks += _group(reasoning_tokens, content_tokens, tokens_per_chunk, reasoning=False)
    return tuple(chunks)


def _group(first: int, count: int, size: int, *, reasoning: bool) -> list[Chunk]:
    return [
        Chunk(first_token=start, tokens=min(size, first + count - start), reasoning=reasoning)
        for start in range(first, first + count, size)
    ]


async def sleep_until(due_ns: int) -> None:
    """Wait until `time.perf_counter_ns() >= due_ns`; never returns early, at once if past.

    Event-loop timers have millisecond granularity and libuv's may fire early, so the wait
    repeats until the deadline has truly passed. A remainder under `MIN_SLEEP_S` is slept as
    `MIN_SLEEP_S` rather than polled, so waiting never spins the CPU (at the cost of being up
    to about a millisecond late; every send time is logged).
    """
    while (remaining_ns := due_ns - time.perf_counter_ns()) > 0:
        await asyncio.sleep(max(remaining_ns / 1e9, MIN_SLEEP_S))


@dataclass(frozen=True, slots=True)
class ResponsePlan:
    """How many tokens one response carries and when they are due."""

    timing: Timing
    total_tokens: int  # reasoning + content
    reasoning_tokens: int
    text: tuple[str, ...] | None = None  # the tokens' text when not the vocabulary's (sim/quality.py)

    def token_text(self, first: int, count: int) -> str:
        """The text of tokens `first` .. `first + count - 1` of this response."""
        if self.text is None:
            return token_text(first, count)
        return "".join(self.text[first : first + count])

    @property
    def content_tokens(self) -> int:
        return self.total_tokens - self.reasoning_tokens

    def chunks(self, tokens_per_chunk: int) -> tuple[Chunk, ...]:
        return plan_chunks(self.reasoning_tokens, self.content_tokens, tokens_per_chunk)

    def last_due_offset_ns(self) -> int:
        """When the final token is due (a non-streamed body goes out then)."""
        return self.timing.due_offset_ns(self.total_tokens - 1)
