"""Streaming accumulators for the server-timing decomposition and the conversation / prefix-cache breakdowns.

The oracle is the list code these accumulators replaced (copied below as it was): fed the same
records, every summary must be equal bit for bit — across flush boundaries of the buffered
samples, with warm-up, errored and incomplete records mixed in. The memory tests feed 10^4
records and check the accumulators' containers, which must not grow with the records.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from tokspeed.metrics import conversations as conv
from tokspeed.metrics import request as rq
from tokspeed.metrics.buffered import FLUSH_AT, BufferedSample
from tokspeed.metrics.conversations import (
    ConversationAccumulator,
    ConversationStats,
    PrefixCacheStats,
    TTFTGroup,
)
from tokspeed.metrics.conversations import TurnStats as _TurnStats
from tokspeed.metrics.server_timing import (
    NS_PER_MS,
    ServerTimingAccumulator,
    ServerTimingSummary,
    network_ms,
    server_decode_tokens_per_s,
    server_ttft_ms,
    summarize_server_timing,
)
from tokspeed.metrics.summary import summarize
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.distribution import distribution

_MS = 1 / 1_000_000
_S = 1 / 1_000_000_000


# the list code the accumulators replaced (the oracle) ------------------------------------------
def _col(value: Callable[[RequestRecord], float | int | None], records: Sequence[RequestRecord]) -> np.ndarray:
    return np.fromiter((np.nan if (v := value(r)) is None else v for r in records), dtype=np.float64,
                       count=len(records))


def _old_server_timing(records: Sequence[RequestRecord]) -> ServerTimingSummary | None:
    with_timing = [r for r in records if r.server_timing and r.status is Status.OK and not r.warmup]
    if not with_timing:
        return None
    server_speed = _col(server_decode_tokens_per_s, with_timing)
    client_speed = _col(rq.decode_tokens_per_s, with_timing)
    both = ~np.isnan(server_speed) & ~np.isnan(client_speed)
    ratio = float(np.mean(client_speed[both]) / np.mean(server_speed[both])) if both.any() else None

    def key(k: str) -> np.ndarray:
        return _col(lambda r: (r.server_timing or {}).get(k), with_timing)

    return ServerTimingSummary(
        requests=len(with_timing),
        queue_ms=distribution(key("queue_ms")),
        load_ms=distribution(key("load_ms")),
        prefill_ms=distribution(key("prefill_ms")),
        decode_ms=distribution(key("decode_ms")),
        total_ms=distribution(key("total_ms")),
        server_ttft_ms=distribution(_col(server_ttft_ms, with_timing)),
        client_ttft_ms=distribution(_col(rq.ttft_ns, with_timing), 1 / NS_PER_MS),
        network_ms=distribution(_col(network_ms, with_timing)),
        server_decode_tokens_per_s=distribution(server_speed),
        client_decode_tokens_per_s=distribution(client_speed),
        decode_speed_ratio=ratio,
    )


def _old_by_turn(ok: Sequence[RequestRecord]) -> list[_TurnStats] | None:
    turns: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    if not turns:
        return None
    return [
        _TurnStats(turn=k, requests=len(rs), ttft_ms=distribution(_col(rq.ttft_ns, rs), _MS),
                   e2e_ms=distribution(_col(rq.e2e_ns, rs), _MS),
                   input_tokens=distribution(_col(lambda r: r.input_tokens, rs)),
                   cached_tokens=distribution(_col(lambda r: r.cached_tokens, rs)))
        for k, rs in sorted(turns.items())
    ]


def _old_row(rs: list[RequestRecord]) -> tuple[float, float, float, float, float]:
    ok = [r for r in rs if r.status is Status.OK]
    sent = [r.sent_ns for r in rs if r.sent_ns]
    ends = [r.end_ns for r in rs if r.end_ns is not None and r.sent_ns]
    duration = (max(ends) - min(sent)) * _S if sent and ends else float("nan")
    latency = sum((rq.e2e_ns(r) or 0) for r in ok) * _S
    return (float(len(ok)), duration, latency, float(sum(r.input_tokens or 0 for r in ok)),
            float(sum(r.output_tokens or 0 for r in ok)))


def _old_conversations(measured: Sequence[RequestRecord], turns: int | None) -> ConversationStats | None:
    groups: dict[tuple[int, int, int], list[RequestRecord]] = {}
    for r in measured:
        if r.conversation is not None:
            groups.setdefault((r.benchmark, r.iteration, r.conversation), []).append(r)
    if not groups:
        return None
    rows = [_old_row(rs) for rs in groups.values()]
    expected = turns or max(int(row[0]) for row in rows)

    def column(i: int) -> np.ndarray:
        return np.array([row[i] for row in rows], dtype=np.float64)

    return ConversationStats(
        conversations=len(rows), completed=sum(1 for row in rows if row[0] >= expected),
        turns=distribution(column(0)), duration_s=distribution(column(1)), latency_s=distribution(column(2)),
        input_tokens=distribution(column(3)), output_tokens=distribution(column(4)),
    )


def _old_group(rs: Sequence[RequestRecord]) -> TTFTGroup | None:
    return TTFTGroup(requests=len(rs), ttft_ms=distribution(_col(rq.ttft_ns, rs), _MS)) if rs else None


def _old_prefix_cache(ok: Sequence[RequestRecord]) -> PrefixCacheStats | None:
    grouped = [r for r in ok if r.prefix_group is not None]
    reported = [r for r in ok if r.cached_tokens is not None]
    if not grouped and not reported:
        return None
    hit, miss = (_old_group([r for r in reported if (r.cached_tokens or 0) > 0]),
                 _old_group([r for r in reported if not r.cached_tokens]))
    saved = None
    if hit and miss and hit.ttft_ms.mean is not None and miss.ttft_ms.mean is not None:
        saved = miss.ttft_ms.mean - hit.ttft_ms.mean
    inputs = sum(r.input_tokens or 0 for r in reported)
    return PrefixCacheStats(
        shared=_old_group([r for r in grouped if (r.prefix_group or 0) >= 0]) if grouped else None,
        unique=_old_group([r for r in grouped if (r.prefix_group or 0) < 0]) if grouped else None,
        cached=hit, uncached=miss, cached_tokens=distribution(_col(lambda r: r.cached_tokens, reported)),
        hit_rate=sum(r.cached_tokens or 0 for r in reported) / inputs if inputs else None, ttft_saved_ms=saved,
    )


# varied synthetic records --------------------------------------------------------------------
def _records(n: int, seed: int, *, conversations: int = 40, epoch: int = 0) -> list[RequestRecord]:
    """Warm-up, errored, incomplete and never-sent requests; turns, conversations, prefixes, cache and server timing."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        sent = epoch + 1_000_000 * i + rnd.randrange(1_000_000)
        status = rnd.choices([Status.OK, Status.ERROR, Status.INCOMPLETE], [8, 1, 1])[0]
        ttft = rnd.choice([None, rnd.randrange(1, 10**9)]) if status is not Status.OK else rnd.randrange(1, 10**9)
        first = None if ttft is None else sent + ttft
        tokens = rnd.choice([None, 1, 2, rnd.randrange(3, 500)])
        end = None if status is Status.INCOMPLETE and rnd.random() < 0.5 else (first or sent) + rnd.randrange(10**8)
        timing = None
        if rnd.random() < 0.4:
            keys = ("queue_ms", "load_ms", "prefill_ms", "decode_ms", "total_ms", "output_tokens")
            timing = {k: rnd.choice([0.0, rnd.uniform(0, 300), 0.1]) for k in keys if rnd.random() < 0.7}
            if "output_tokens" in timing:
                timing["output_tokens"] = float(rnd.randrange(0, 400))
        in_conversation = rnd.random() < 0.6
        cached = rnd.choice([None, None, 0, rnd.randrange(1, 4000)])
        out.append(RequestRecord(
            index=i, iteration=rnd.choice([0, 1, 1, 2]), warmup=rnd.random() < 0.1, scheduled_ns=sent,
            sent_ns=0 if status is Status.INCOMPLETE and rnd.random() < 0.3 else sent, first_token_ns=first,
            first_content_ns=first, end_ns=end, chunk_ns=[] if first is None else [first],
            input_tokens=rnd.choice([None, rnd.randrange(1, 5000)]), output_tokens=tokens, status=status,
            benchmark=rnd.choice([0, 0, 1]), server_timing=timing,
            conversation=rnd.randrange(conversations) if in_conversation else None,
            turn=rnd.randrange(1, 6) if in_conversation or rnd.random() < 0.1 else None,
            prefix_group=rnd.choice([None, -1, 0, 1, 2]), cached_tokens=cached,
        ))
    return out


def _plain(n: int) -> list[RequestRecord]:
    """The common case: completed requests with no server timing, conversation, turn, prefix or cache count."""
    return [RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=i, sent_ns=i + 1, first_token_ns=i + 50,
                          end_ns=i + 90, chunk_ns=[i + 50], input_tokens=10, output_tokens=1) for i in range(n)]


def _fed_conversations(records: Sequence[RequestRecord]) -> ConversationAccumulator:
    acc = ConversationAccumulator()
    for r in records:
        acc.add(r)
    return acc


# equality with the list code -------------------------------------------------------------------
@pytest.mark.parametrize(("n", "seed", "epoch"), [(1, 0, 0), (7, 1, 0), (300, 2, 0), (3000, 3, 1_700_000_000 * 10**9),
                                                  (3 * FLUSH_AT + 17, 4, 0)])
def test_accumulators_equal_the_list_code(n: int, seed: int, epoch: int) -> None:
    records = _records(n, seed, epoch=epoch)
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.status is Status.OK]
    acc = _fed_conversations(records)
    assert acc.by_turn() == _old_by_turn(ok) == conv.by_turn(ok)
    for turns in (None, 1, 3, 5, 9):
        assert acc.conversations(turns) == _old_conversations(measured, turns) == conv.conversations(measured, turns)
    assert acc.prefix_cache() == _old_prefix_cache(ok) == conv.prefix_cache(ok)
    timing = ServerTimingAccumulator()
    for r in records:
        timing.add(r)
    assert timing.summary() == _old_server_timing(records) == summarize_server_timing(records)
    assert summarize_server_timing(ok) == timing.summary()  # what summarize passes today


def test_reading_midway_then_adding_more_gives_the_totals() -> None:
    records = _records(2 * FLUSH_AT + 5, 11)
    acc, timing = ConversationAccumulator(), ServerTimingAccumulator()
    for i, r in enumerate(records):
        acc.add(r)
        timing.add(r)
        if i in (3, FLUSH_AT + 1):
            acc.by_turn(), acc.conversations(None), acc.prefix_cache(), timing.summary()
    ok = [r for r in records if r.ok and not r.warmup]
    assert acc.by_turn() == _old_by_turn(ok) and acc.prefix_cache() == _old_prefix_cache(ok)
    assert acc.conversations(None) == _old_conversations([r for r in records if not r.warmup], None)
    assert timing.summary() == _old_server_timing(records)


def test_the_list_functions_keep_their_unfiltered_contract() -> None:
    """by_turn/prefix_cache take what they are given (the caller filters); conversations any status, warm-up too."""
    records = _records(500, 5)
    assert conv.by_turn(records) == _old_by_turn(records)
    assert conv.prefix_cache(records) == _old_prefix_cache(records)
    assert conv.conversations(records, None) == _old_conversations(records, None)


def test_ratio_is_np_mean_not_the_clamped_distribution_mean() -> None:
    """Equal decode speeds: Σ/n rounds above the value, which Distribution.mean would clamp; the ratio must not."""
    ms = NS_PER_MS
    recs = [RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=0, sent_ns=10 * ms,
                          first_token_ns=11 * ms, end_ns=11 * ms + 30 * ms, chunk_ns=[11 * ms] * 4, output_tokens=4,
                          server_timing={"prefill_ms": 0.1, "decode_ms": 1.8}) for i in range(3)]
    s = summarize_server_timing(recs)
    assert s == _old_server_timing(recs) and s is not None and s.decode_speed_ratio is not None
    speed = 3 * 1000.0 / 1.8  # the 3 tokens after the first over 1.8 ms
    assert float(np.mean([speed] * 3)) != speed  # the case: 1666.6666666666665 averages to ...67
    assert s.server_decode_tokens_per_s.mean == speed  # clamped into [min, max]


def test_a_summary_judges_conversations_against_the_planned_turns() -> None:
    records = _records(400, 6)
    planned = summarize(records, turns=4).conversations
    assert planned == _old_conversations([r for r in records if not r.warmup], 4)
    assert planned != summarize(records).conversations  # 4 planned turns, longest seen is 5


def test_nothing_to_summarise_gives_none() -> None:
    acc, timing = _fed_conversations(_plain(5)), ServerTimingAccumulator()
    assert (acc.by_turn(), acc.conversations(3), acc.prefix_cache(), timing.summary()) == (None, None, None, None)
    warm = [RequestRecord(index=0, iteration=0, warmup=True, scheduled_ns=0, sent_ns=1, end_ns=5, turn=1,
                          conversation=0, prefix_group=0, cached_tokens=3, server_timing={"prefill_ms": 1.0})]
    acc = _fed_conversations(warm)
    timing.add(warm[0])
    assert (acc.by_turn(), acc.conversations(3), acc.prefix_cache(), timing.summary()) == (None, None, None, None)


# bounded memory --------------------------------------------------------------------------------
def test_plain_records_leave_no_state() -> None:
    acc, timing = ConversationAccumulator(), ServerTimingAccumulator()
    for r in _plain(10_000):
        acc.add(r)
        timing.add(r)
    assert acc.sizes() == {"turns": 0, "conversations": 0, "row_values": 0, "pending": 0}
    assert timing.requests == 0 and timing.pending() == 0


def test_state_grows_with_turns_and_conversations_not_records() -> None:
    base = _plain(10_000)
    for i, r in enumerate(base):
        r.turn, r.conversation, r.cached_tokens, r.prefix_group = i % 4 + 1, i % 50, i % 3, i % 5 - 1
        r.server_timing = {"prefill_ms": 1.0, "decode_ms": 2.0}
    acc, timing = ConversationAccumulator(), ServerTimingAccumulator()
    for r in base:
        acc.add(r)
        timing.add(r)
    sizes = acc.sizes()
    assert sizes["turns"] == 4 and sizes["conversations"] == 50 and sizes["row_values"] == 50 * 6
    assert 0 < sizes["pending"] < FLUSH_AT and 0 < timing.pending() < FLUSH_AT
    assert timing.requests == 10_000
    by_turn = acc.by_turn()
    assert by_turn is not None and sum(t.requests for t in by_turn) == 10_000
    stats = acc.conversations(None)
    assert stats is not None and stats.conversations == 50 and stats.turns.min == stats.turns.max == 200


def test_buffered_sample_flushes_in_batches_and_keeps_order() -> None:
    s = BufferedSample()
    values = [float(v) for v in np.random.default_rng(0).normal(size=2 * FLUSH_AT + 3)]
    for v in values:
        s.append(v)
        assert s.pending < FLUSH_AT
    s.append(None)
    s.append(float("nan"))
    assert s.pending == 4  # 3 left over and the NaN (dropped by the sample)
    sample = s.read()
    assert s.pending == 0 and sample.count == len(values)
    assert sample.distribution(_MS) == distribution(values, _MS)
