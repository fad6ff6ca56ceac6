"""Breakdowns for multi-turn and shared-prefix workloads: per turn, per conversation, prefix cache.

All over measured (non-warm-up) records; latencies over completed ones. Formulas:

* by_turn[k]: TTFT, E2E, input tokens and server-reported cached tokens of the
  completed requests that were turn k of their conversation (records with `turn`).
* conversations: per conversation of a phase (keyed by iteration and `conversation`):
  turns completed, duration = last end_ns − first sent_ns (think times included),
  latency = Σ E2E of its turns, input and output tokens summed; `completed` counts
  conversations with as many completed turns as `turns` when given, else as the
  longest conversation (records do not say how many turns were planned).
* prefix_cache.shared / .unique: TTFT of requests whose prefix is a shared group's
  (`prefix_group` ≥ 0) or unique to them (−1); the first request of each group is
  counted as shared although nothing could have cached it yet.
* prefix_cache.cached / .uncached: TTFT of requests for which the server reported
  `cached_tokens` > 0, or 0; `hit_rate` = Σ cached_tokens / Σ input_tokens over
  requests that reported it; `ttft_saved_ms` = uncached mean TTFT − cached mean TTFT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from tokspeed.metrics import request as rq
from tokspeed.metrics.stats import Distribution, distribution
from tokspeed.records import RequestRecord, Status

_MS = 1 / 1_000_000
_S = 1 / 1_000_000_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class TurnStats(_Frozen):
    """The completed requests that were turn `turn` (1-based) of their conversation."""

    turn: int
    requests: int
    ttft_ms: Distribution
    e2e_ms: Distribution
    input_tokens: Distribution
    cached_tokens: Distribution  # count 0 when the server reported none


class ConversationStats(_Frozen):
    """Per-conversation totals (see the module docstring)."""

    conversations: int  # conversations with at least one measured request
    completed: int  # every turn completed (see the module docstring)
    turns: Distribution  # completed turns per conversation
    duration_s: Distribution  # first sent to last end, think times included
    latency_s: Distribution  # Σ E2E of its turns
    input_tokens: Distribution
    output_tokens: Distribution


class TTFTGroup(_Frozen):
    requests: int
    ttft_ms: Distribution


class PrefixCacheStats(_Frozen):
    """TTFT for shared vs unique prefixes, and for server-reported cache hits vs misses."""

    shared: TTFTGroup | None = None  # shared-prefix workloads only
    unique: TTFTGroup | None = None
    cached: TTFTGroup | None = None  # servers that report usage.prompt_tokens_details.cached_tokens
    uncached: TTFTGroup | None = None
    cached_tokens: Distribution = Distribution()
    hit_rate: float | None = None
    ttft_saved_ms: float | None = None


def by_turn(ok: Sequence[RequestRecord]) -> list[TurnStats] | None:
    """One entry per turn index, in order; None when no record has a turn."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    if not turns:
        return None
    return [
        TurnStats(
            turn=k,
            requests=len(rs),
            ttft_ms=distribution(_column(rq.ttft_ns, rs), _MS),
            e2e_ms=distribution(_column(rq.e2e_ns, rs), _MS),
            input_tokens=distribution(_column(lambda r: r.input_tokens, rs)),
            cached_tokens=distribution(_column(lambda r: r.cached_tokens, rs)),
        )
        for k, rs in sorted(turns.items())
    ]


def conversations(measured: Sequence[RequestRecord], turns: int | None) -> ConversationStats | None:
    """Per-conversation totals; None when no record belongs to a conversation."""
    groups: dict[tuple[int, int, int], list[RequestRecord]] = {}
    for r in measured:
        if r.conversation is not None:
            groups.setdefault((r.benchmark, r.iteration, r.conversation), []).append(r)
    if not groups:
        return None
    rows = [_conversation_row(rs) for rs in groups.values()]
    expected = turns or max(int(row[0]) for row in rows)
    return ConversationStats(
        conversations=len(rows),
        completed=sum(1 for row in rows if row[0] >= expected),
        turns=distribution(np.array([row[0] for row in rows], dtype=np.float64)),
        duration_s=distribution(np.array([row[1] for row in rows], dtype=np.float64)),
        latency_s=distribution(np.array([row[2] for row in rows], dtype=np.float64)),
        input_tokens=distribution(np.array([row[3] for row in rows], dtype=np.float64)),
        output_tokens=distribution(np.array([row[4] for row in rows], dtype=np.float64)),
    )


_SummaryT = TypeVar("_SummaryT", bound=BaseModel)


def with_planned_turns(summary: _SummaryT, records: Sequence[RequestRecord], turns: int | None) -> _SummaryT:
    """`summary` whose `conversations.completed` is judged against the `turns` the run planned (--multi-turn).

    A summary alone cannot know them (it judges against the longest conversation it saw), so
    the caller that knows the profile passes them; unchanged when `turns` is None or there are none.
    """
    if not turns or getattr(summary, "conversations", None) is None:
        return summary
    stats = conversations([r for r in records if not r.warmup], turns)
    return summary.model_copy(update={"conversations": stats})


def _conversation_row(rs: list[RequestRecord]) -> tuple[float, float, float, float, float]:
    """(completed turns, duration s, Σ E2E s, Σ input tokens, Σ output tokens) of one conversation."""
    ok = [r for r in rs if r.status is Status.OK]
    sent = [r.sent_ns for r in rs if r.sent_ns]
    ends = [r.end_ns for r in rs if r.end_ns is not None and r.sent_ns]
    duration = (max(ends) - min(sent)) * _S if sent and ends else float("nan")
    latency = sum((rq.e2e_ns(r) or 0) for r in ok) * _S
    return (
        float(len(ok)),
        duration,
        latency,
        float(sum(r.input_tokens or 0 for r in ok)),
        float(sum(r.output_tokens or 0 for r in ok)),
    )


def prefix_cache(ok: Sequence[RequestRecord]) -> PrefixCacheStats | None:
    """The prefix-cache breakdown; None when no request has a prefix group or a reported cached count."""
    grouped = [r for r in ok if r.prefix_group is not None]
    reported = [r for r in ok if r.cached_tokens is not None]
    if not grouped and not reported:
        return None
    cached = [r for r in reported if (r.cached_tokens or 0) > 0]
    uncached = [r for r in reported if not r.cached_tokens]
    inputs = sum(r.input_tokens or 0 for r in reported)
    hit_group, miss_group = _ttft_group(cached), _ttft_group(uncached)
    saved = None
    if hit_group and miss_group and hit_group.ttft_ms.mean is not None and miss_group.ttft_ms.mean is not None:
        saved = miss_group.ttft_ms.mean - hit_group.ttft_ms.mean
    return PrefixCacheStats(
        shared=_ttft_group([r for r in grouped if (r.prefix_group or 0) >= 0]) if grouped else None,
        unique=_ttft_group([r for r in grouped if (r.prefix_group or 0) < 0]) if grouped else None,
        cached=hit_group,
        uncached=miss_group,
        cached_tokens=distribution(_column(lambda r: r.cached_tokens, reported)),
        hit_rate=sum(r.cached_tokens or 0 for r in reported) / inputs if inputs else None,
        ttft_saved_ms=saved,
    )


def _ttft_group(rs: Sequence[RequestRecord]) -> TTFTGroup | None:
    if not rs:
        return None
    return TTFTGroup(requests=len(rs), ttft_ms=distribution(_column(rq.ttft_ns, rs), _MS))


def _column(value: Callable[[RequestRecord], float | int | None], records: Sequence[RequestRecord]) -> np.ndarray:
    """`value(r)` per record as float64, NaN where it is None."""
    return np.fromiter((np.nan if (v := value(r)) is None else v for r in records), dtype=np.float64, count=len(records))
