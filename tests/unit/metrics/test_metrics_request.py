"""Per-request metrics and pooled chunk timing, on hand-built records with exact integers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokspeed.metrics import chunks
from tokspeed.metrics.chunks import chunk_timing
from tokspeed.metrics.request import (
    chunk_gaps_ns,
    decode_tokens_per_s,
    e2e_ns,
    itl_values_ns,
    lateness_ns,
    max_itl_ns,
    tpot_ns,
    ttfa_ns,
    ttft_ns,
)
from tokspeed.records import ErrorKind, RequestRecord, Status


def rec(**kw: Any) -> RequestRecord:
    """A completed request: sent at 100, tokens at 1100, 2100, 3100, done at 3200."""
    fields: dict[str, Any] = dict(
        index=0,
        iteration=1,
        warmup=False,
        scheduled_ns=0,
        sent_ns=100,
        first_token_ns=1100,
        first_content_ns=1100,
        chunk_ns=[1100, 2100, 3100],
        end_ns=3200,
        output_tokens=3,
    )
    fields.update(kw)
    return RequestRecord(**fields)


def test_basic_request() -> None:
    r = rec()
    assert ttft_ns(r) == 1000
    assert ttfa_ns(r) == 1000
    assert e2e_ns(r) == 3100
    assert lateness_ns(r) == 100
    assert tpot_ns(r) == 1050.0  # (3100 - 1000) / (3 - 1)
    assert decode_tokens_per_s(r) == 2 * 10**9 / 2100  # the 2 tokens after the first, over E2E − TTFT
    assert decode_tokens_per_s(r) == pytest.approx(10**9 / tpot_ns(r))  # = 1 / TPOT
    assert chunk_gaps_ns(r).tolist() == [1000, 1000]
    assert itl_values_ns(r).tolist() == [1000.0, 1000.0]
    assert max_itl_ns(r) == 1000.0


def test_reasoning_first_ttft_vs_ttfa() -> None:
    r = rec(first_token_ns=1100, first_content_ns=5100, chunk_ns=[1100, 3100, 5100], end_ns=6100)
    assert ttft_ns(r) == 1000
    assert ttfa_ns(r) == 5000
    assert tpot_ns(r) == 2500.0  # over all generated tokens: (6000 - 1000) / 2


def test_no_tokens_gives_none_not_zero() -> None:
    r = rec(first_token_ns=None, first_content_ns=None, chunk_ns=[], output_tokens=0)
    assert ttft_ns(r) is None
    assert ttfa_ns(r) is None
    assert tpot_ns(r) is None
    assert decode_tokens_per_s(r) is None
    assert max_itl_ns(r) is None
    assert chunk_gaps_ns(r).size == 0
    assert itl_values_ns(r).size == 0
    assert e2e_ns(r) == 3100


def test_reasoning_only_has_no_ttfa() -> None:
    assert ttfa_ns(rec(first_content_ns=None)) is None


def test_one_output_token() -> None:
    r = rec(chunk_ns=[1100], output_tokens=1, end_ns=1200)
    assert tpot_ns(r) is None
    assert decode_tokens_per_s(r) is None
    assert itl_values_ns(r).size == 0
    assert ttft_ns(r) == 1000


def test_unknown_output_tokens() -> None:
    r = rec(output_tokens=None)
    assert tpot_ns(r) is None
    assert decode_tokens_per_s(r) is None
    assert itl_values_ns(r).tolist() == [1000.0, 1000.0]  # one token per chunk assumed


def test_decode_needs_time_after_first_token() -> None:
    assert decode_tokens_per_s(rec(end_ns=1100)) is None


def test_errored_request_has_ttft_but_no_e2e() -> None:
    r = rec(status=Status.ERROR, error_kind=ErrorKind.STREAM)
    assert ttft_ns(r) == 1000
    assert e2e_ns(r) is None
    assert tpot_ns(r) is None
    assert decode_tokens_per_s(r) is None
    assert lateness_ns(r) == 100


def test_lateness_of_incomplete_requests() -> None:
    never_sent = rec(status=Status.INCOMPLETE, scheduled_ns=500, sent_ns=0, first_token_ns=None)
    assert lateness_ns(never_sent) is None
    in_flight = rec(status=Status.INCOMPLETE, scheduled_ns=40, sent_ns=100, end_ns=None)
    assert lateness_ns(in_flight) == 60
    assert e2e_ns(in_flight) is None


def test_multi_token_chunks_spread_their_gap() -> None:
    r = rec(chunk_ns=[1100, 2100, 4100], chunk_tokens=[1, 4, 2], output_tokens=7, end_ns=4100)
    assert itl_values_ns(r).tolist() == [250.0] * 4 + [1000.0] * 2
    assert chunk_gaps_ns(r).tolist() == [1000, 2000]
    assert max_itl_ns(r) == 1000.0


def test_known_chunk_tokens_1_4_4() -> None:
    r = rec(chunk_ns=[1100, 2100, 3100], chunk_tokens=[1, 4, 4], output_tokens=9)
    assert itl_values_ns(r).tolist() == [250.0] * 8


def test_zero_token_chunk_gives_its_time_to_the_next() -> None:
    r = rec(chunk_ns=[1000, 2000, 4000], chunk_tokens=[1, 0, 2], output_tokens=3)
    assert itl_values_ns(r).tolist() == [1500.0, 1500.0]  # (4000 - 1000) / 2, twice


def test_unknown_chunk_tokens_spread_output_tokens_evenly() -> None:
    # 6 tokens over 3 chunks: k = 2, each gap gives one value g / 2
    r = rec(chunk_ns=[1100, 2100, 4100], output_tokens=6)
    assert itl_values_ns(r).tolist() == [500.0, 1000.0]


def test_chunk_tokens_of_wrong_length_fall_back_to_even_spread() -> None:
    r = rec(chunk_ns=[1100, 2100, 4100], chunk_tokens=[2, 2], output_tokens=6)
    assert itl_values_ns(r).tolist() == [500.0, 1000.0]


def test_epoch_scale_timestamps_stay_exact() -> None:
    base = 1_700_000_000_000_000_000
    r = rec(
        sent_ns=base + 100,
        scheduled_ns=base,
        first_token_ns=base + 1100,
        first_content_ns=base + 1100,
        chunk_ns=[base + 1100, base + 2100, base + 3101],
        end_ns=base + 3200,
    )
    assert ttft_ns(r) == 1000
    assert chunk_gaps_ns(r).tolist() == [1000, 1001]
    assert itl_values_ns(r).tolist() == [1000.0, 1001.0]


def test_pooled_timing_keeps_records_apart() -> None:
    a = rec(chunk_ns=[0, 10, 30], chunk_tokens=[1, 1, 2], output_tokens=4)
    b = rec(chunk_ns=[1000], output_tokens=1)
    c = rec(chunk_ns=[5000, 5040], output_tokens=2)
    t = chunk_timing([a, b, c])
    assert t.gaps_ns.tolist() == [10, 20, 40]
    assert t.itl_ns.tolist() == [10.0, 10.0, 10.0, 40.0]
    assert t.max_itl_ns[0] == 10.0 and np.isnan(t.max_itl_ns[1]) and t.max_itl_ns[2] == 40.0


chunk_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12).map(
    lambda xs: [sum(xs[: i + 1]) for i in range(len(xs))]
)


@st.composite
def records(draw: st.DrawFn) -> RequestRecord:
    times = draw(chunk_lists)
    known = draw(st.booleans())
    tokens = draw(st.lists(st.integers(0, 5), min_size=len(times), max_size=len(times)))
    output = draw(st.one_of(st.none(), st.integers(0, 60)))
    return rec(chunk_ns=times, chunk_tokens=tokens if known else None, output_tokens=output)


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), max_size=8))
def test_pooled_equals_per_record_and_batches_do_not_matter(rs: list[RequestRecord]) -> None:
    pooled = chunk_timing(rs)
    expected = [itl_values_ns(r) for r in rs]
    assert pooled.itl_ns.tolist() == np.concatenate([np.empty(0), *expected]).tolist()
    gaps = [chunk_gaps_ns(r) for r in rs]
    assert pooled.gaps_ns.tolist() == np.concatenate([np.empty(0), *gaps]).tolist()
    maxes = [np.nan if (m := max_itl_ns(r)) is None else m for r in rs]
    np.testing.assert_array_equal(pooled.max_itl_ns, np.array(maxes, dtype=float))
    small = pytest.MonkeyPatch()
    with small.context() as mp:
        mp.setattr(chunks, "_BATCH_CHUNKS", 3)
        batched = chunk_timing(rs)
    assert batched.itl_ns.tolist() == pooled.itl_ns.tolist()
    np.testing.assert_array_equal(batched.max_itl_ns, pooled.max_itl_ns)
