"""The token audit on hand-built records, with exact expected values."""

from __future__ import annotations

import pytest

from tokspeed.metrics.token_audit import audit_tokens, chunk_histogram, early_stops
from tokspeed.records import RequestRecord, Status, TokenSource
from tokspeed.workload.tokens import ApproxCounter


def rec(index: int, *, out: int | None, src: TokenSource | None = TokenSource.USAGE, max_tokens: int | None = 8,
        text: str | None = None, chunks: int = 4, chunk_tokens: list[int] | None = None, finish: str | None = "length",
        status: Status = Status.OK, warmup: bool = False) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=warmup, scheduled_ns=0, sent_ns=0, end_ns=100,
                         chunk_ns=list(range(10, 10 + 10 * chunks, 10)), chunk_tokens=chunk_tokens,
                         output_tokens=out, output_tokens_source=src, max_tokens=max_tokens, output_text=text,
                         finish_reason=finish, status=status)


def test_usage_vs_tokenizer_discrepancy_is_exact() -> None:
    # ApproxCounter: one token per started 4 characters of each word
    records = [
        rec(0, out=3, text="abcd efgh ijkl"),  # counter 3, d = 0
        rec(1, out=4, text="abcdefghi"),  # counter 3, d = −1
        rec(2, out=2, text="ab cd ef gh"),  # counter 4, d = +2
        rec(3, out=5, src=TokenSource.CHUNKS, text="abc"),  # not counted by usage: left out
        rec(4, out=5, text=None),  # no text kept: left out
        rec(5, out=9, text="x", status=Status.ERROR),  # failed: left out
        rec(6, out=9, text="x", warmup=True),  # warm-up: left out
    ]
    a = audit_tokens(records, ApproxCounter())
    assert a.requests == 5 and a.texts == 4 and a.tokenizer
    assert a.sources == {"chunks": 1, "usage": 4}
    d = a.discrepancy
    assert d is not None
    assert (d.compared, d.exact, d.max_abs) == (3, 1, 2)
    assert d.mean == pytest.approx(1 / 3) and d.mean_abs == pytest.approx(1.0)
    assert d.relative == pytest.approx(3 / 9)
    assert d.worst == [2, 1]


def test_no_tokenizer_no_discrepancy() -> None:
    a = audit_tokens([rec(0, out=3, text="abcd")])
    assert a.discrepancy is None and not a.tokenizer


def test_chunk_histogram_from_per_chunk_counts() -> None:
    records = [
        rec(0, out=6, chunks=3, chunk_tokens=[1, 3, 2]),
        rec(1, out=4, chunks=2, chunk_tokens=[2, 2]),
        rec(2, out=4, chunks=4, chunk_tokens=None),  # unknown per chunk: not in the histogram
        rec(3, out=4, chunks=4, chunk_tokens=[1, 1]),  # wrong length: ignored
    ]
    assert chunk_histogram(records) == ({"1": 1, "2": 3, "3": 1}, 5)
    a = audit_tokens(records)
    assert a.chunks_with_known_tokens == 5
    assert a.tokens_per_chunk.count == 4
    assert a.tokens_per_chunk.mean == pytest.approx((2 + 2 + 1 + 1) / 4)


def test_early_stops_by_finish_reason_and_ignored_max_tokens() -> None:
    records = [
        rec(0, out=8, max_tokens=8, finish="length"),
        rec(1, out=3, max_tokens=8, finish="stop"),
        rec(2, out=5, max_tokens=8, finish="stop"),
        rec(3, out=2, max_tokens=8, finish=None),
        rec(4, out=12, max_tokens=8, finish="length"),  # the server ignored max_tokens
        rec(5, out=4, max_tokens=None),  # asked for nothing: not judged
        rec(6, out=None, max_tokens=8),  # count unknown: not judged
    ]
    e = early_stops(records)
    assert (e.asked, e.short, e.over) == (5, 3, 1)
    assert e.short_fraction == pytest.approx(0.6)
    assert e.short_by_finish_reason == {"none": 1, "stop": 2}
    assert e.examples == [1, 2, 3]
