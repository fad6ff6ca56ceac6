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

from array import array
from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel, ConfigDict

from tokspeed.metrics import request as rq
from tokspeed.metrics.buffered import BufferedSample
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.distribution import Distribution, distribution

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


def by_turn(ok: Iterable[RequestRecord]) -> list[TurnStats] | None:
    """One entry per turn index, in order; None when no record has a turn."""
    acc = ConversationAccumulator()
    for r in ok:
        acc.add_completed(r)
    return acc.by_turn()


def conversations(measured: Iterable[RequestRecord], turns: int | None) -> ConversationStats | None:
    """Per-conversation totals; None when no record belongs to a conversation."""
    acc = ConversationAccumulator()
    for r in measured:
        acc.add_measured(r)
    return acc.conversations(turns)


def prefix_cache(ok: Iterable[RequestRecord]) -> PrefixCacheStats | None:
    """The prefix-cache breakdown; None when no request has a prefix group or a reported cached count."""
    acc = ConversationAccumulator()
    for r in ok:
        acc.add_completed(r)
    return acc.prefix_cache()


class _TurnColumns:
    """The completed requests of one turn index: their count and four samples."""

    __slots__ = ("cached_tokens", "e2e_ns", "input_tokens", "requests", "ttft_ns")

    def __init__(self) -> None:
        self.requests = 0
        self.ttft_ns = BufferedSample()
        self.e2e_ns = BufferedSample()
        self.input_tokens = BufferedSample()
        self.cached_tokens = BufferedSample()

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        self.ttft_ns.append(rq.ttft_ns(r))
        self.e2e_ns.append(rq.e2e_ns(r))
        self.input_tokens.append(r.input_tokens)
        self.cached_tokens.append(r.cached_tokens)

    def stats(self, turn: int) -> TurnStats:
        return TurnStats(
            turn=turn,
            requests=self.requests,
            ttft_ms=self.ttft_ns.read().distribution(_MS),
            e2e_ms=self.e2e_ns.read().distribution(_MS),
            input_tokens=self.input_tokens.read().distribution(),
            cached_tokens=self.cached_tokens.read().distribution(),
        )


class _TTFTColumn:
    """A request count and the TTFTs (ns) of those requests."""

    __slots__ = ("requests", "ttft_ns")

    def __init__(self) -> None:
        self.requests = 0
        self.ttft_ns = BufferedSample()

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        self.ttft_ns.append(rq.ttft_ns(r))

    def group(self) -> TTFTGroup | None:
        if not self.requests:
            return None
        return TTFTGroup(requests=self.requests, ttft_ms=self.ttft_ns.read().distribution(_MS))


# one conversation's row in ConversationAccumulator._rows (int64, `_ROW` values per conversation)
_OK, _FIRST_SENT, _LAST_END, _E2E, _INPUT, _OUTPUT = range(6)
_ROW = 6
_NO_SENT = 2**63 - 1  # first sent_ns of a conversation none of whose requests was sent
_NO_END = -(2**63)  # last end_ns of a conversation none of whose sent requests ended


class ConversationAccumulator:
    """by_turn, conversations and prefix_cache built one record at a time, in bounded memory.

    `add` takes every record of a load point: warm-up ones are left out, conversations count
    measured requests of any status, the per-turn and prefix-cache breakdowns completed ones
    (as `summarize` passes them). State: per turn index and per prefix class a few BoundedSamples,
    per conversation one row of six integers (completed turns, first sent_ns, last end_ns,
    Σ E2E ns, Σ input and output tokens) — never the records.
    """

    __slots__ = ("_cached", "_cached_tokens", "_grouped", "_index", "_reported", "_reported_cached",
                 "_reported_input", "_rows", "_shared", "_turns", "_uncached", "_unique")

    def __init__(self) -> None:
        self._turns: dict[int, _TurnColumns] = {}
        self._index: dict[tuple[int, int, int], int] = {}  # (benchmark, iteration, conversation) → row offset
        self._rows = array("q")
        self._grouped = 0  # completed requests with a prefix group
        self._shared, self._unique = _TTFTColumn(), _TTFTColumn()
        self._cached, self._uncached = _TTFTColumn(), _TTFTColumn()
        self._cached_tokens = BufferedSample()
        self._reported = 0  # completed requests whose server reported cached_tokens
        self._reported_cached = 0  # Σ cached_tokens over them
        self._reported_input = 0  # Σ input_tokens over them

    def add(self, r: RequestRecord) -> None:
        """Take one record of the load point (any status, warm-up included: it is left out)."""
        if r.warmup:
            return
        if r.conversation is not None:
            self.add_measured(r)
        elif r.turn is None and r.prefix_group is None and r.cached_tokens is None:
            return  # the common case: nothing to count
        if r.status is Status.OK:
            self.add_completed(r)

    def add_measured(self, r: RequestRecord) -> None:
        """Count a measured (non-warm-up) record, of any status, toward its conversation's totals."""
        if r.conversation is None:
            return
        key = (r.benchmark, r.iteration, r.conversation)
        rows = self._rows
        at = self._index.get(key)
        if at is None:
            at = self._index[key] = len(rows)
            rows.extend((0, _NO_SENT, _NO_END, 0, 0, 0))
        if r.sent_ns:
            rows[at + _FIRST_SENT] = min(rows[at + _FIRST_SENT], r.sent_ns)
            if r.end_ns is not None and r.end_ns > rows[at + _LAST_END]:
                rows[at + _LAST_END] = r.end_ns
        if r.status is Status.OK:
            rows[at + _OK] += 1
            rows[at + _E2E] += rq.e2e_ns(r) or 0
            rows[at + _INPUT] += r.input_tokens or 0
            rows[at + _OUTPUT] += r.output_tokens or 0

    def add_completed(self, r: RequestRecord) -> None:
        """Count a completed, measured record toward the per-turn and prefix-cache breakdowns."""
        if r.turn is not None:
            turn = self._turns.get(r.turn)
            if turn is None:
                turn = self._turns[r.turn] = _TurnColumns()
            turn.add(r)
        if r.prefix_group is not None:
            self._grouped += 1
            (self._shared if r.prefix_group >= 0 else self._unique).add(r)
        if r.cached_tokens is not None:
            self._reported += 1
            self._reported_cached += r.cached_tokens
            self._reported_input += r.input_tokens or 0
            self._cached_tokens.append(r.cached_tokens)
            if r.cached_tokens > 0:
                self._cached.add(r)
            elif not r.cached_tokens:
                self._uncached.add(r)

    def by_turn(self) -> list[TurnStats] | None:
        """One entry per turn index, in order; None when no completed record had a turn."""
        if not self._turns:
            return None
        return [self._turns[k].stats(k) for k in sorted(self._turns)]

    def conversations(self, turns: int | None) -> ConversationStats | None:
        """Per-conversation totals, `completed` judged against `turns` (else the longest); None without any."""
        if not self._index:
            return None
        rows = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, _ROW)
        done = rows[:, _OK].astype(np.float64)
        ended = rows[:, _LAST_END] != _NO_END  # a sent request ended, so one was sent too
        spans = np.where(ended, rows[:, _LAST_END] - np.where(ended, rows[:, _FIRST_SENT], 0), 0)
        duration = np.where(ended, spans.astype(np.float64) * _S, np.nan)
        expected = turns or int(done.max())
        return ConversationStats(
            conversations=len(rows),
            completed=int(np.count_nonzero(done >= expected)),
            turns=distribution(done),
            duration_s=distribution(duration),
            latency_s=distribution(rows[:, _E2E].astype(np.float64) * _S),
            input_tokens=distribution(rows[:, _INPUT].astype(np.float64)),
            output_tokens=distribution(rows[:, _OUTPUT].astype(np.float64)),
        )

    def prefix_cache(self) -> PrefixCacheStats | None:
        """The prefix-cache breakdown; None when no completed request had a prefix group or a cached count."""
        if not self._grouped and not self._reported:
            return None
        hit_group, miss_group = self._cached.group(), self._uncached.group()
        saved = None
        if hit_group and miss_group and hit_group.ttft_ms.mean is not None and miss_group.ttft_ms.mean is not None:
            saved = miss_group.ttft_ms.mean - hit_group.ttft_ms.mean
        inputs = self._reported_input
        return PrefixCacheStats(
            shared=self._shared.group(),
            unique=self._unique.group(),
            cached=hit_group,
            uncached=miss_group,
            cached_tokens=self._cached_tokens.read().distribution(),
            hit_rate=self._reported_cached / inputs if inputs else None,
            ttft_saved_ms=saved,
        )

    def sizes(self) -> dict[str, int]:
        """How much state is held (for tests of bounded memory): turn indices, conversations, pending values."""
        samples = [self._cached_tokens, self._shared.ttft_ns, self._unique.ttft_ns, self._cached.ttft_ns,
                   self._uncached.ttft_ns]
        samples += [s for t in self._turns.values() for s in (t.ttft_ns, t.e2e_ns, t.input_tokens, t.cached_tokens)]
        return {"turns": len(self._turns), "conversations": len(self._index), "row_values": len(self._rows),
                "pending": max((s.pending for s in samples), default=0)}
