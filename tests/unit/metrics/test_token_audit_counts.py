"""Early stops judged only on counts that can be trusted (review of d5e6b3b)."""

from __future__ import annotations

from tokspeed.metrics.token_audit import early_stops
from tokspeed.records import RequestRecord, Status, TokenSource


def rec(index: int, out: int, src: TokenSource, finish: str | None, chunks: int) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0, end_ns=100,
                         chunk_ns=list(range(10, 10 + 10 * chunks, 10)), output_tokens=out,
                         output_tokens_source=src, max_tokens=8, finish_reason=finish, status=Status.OK)


def test_length_stop_counted_by_chunks_is_an_undercount_not_an_early_stop() -> None:
    # no usage, 2 tokens per chunk: 4 chunks counted for the 8 tokens the server stopped at (length)
    records = [
        rec(0, 4, TokenSource.CHUNKS, "length", 4),
        rec(1, 4, TokenSource.CHUNKS, "length", 4),
        rec(2, 3, TokenSource.CHUNKS, "stop", 3),  # a real early stop, whatever the count source
        rec(3, 6, TokenSource.USAGE, "length", 6),  # usage says 6 < 8 with length: the context filled, short
    ]
    e = early_stops(records)
    assert (e.asked, e.short, e.undercounted) == (4, 2, 2)
    assert e.short_by_finish_reason == {"length": 1, "stop": 1}
    assert e.examples == [2, 3]
    assert e.short_fraction == 0.5
