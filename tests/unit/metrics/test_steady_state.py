"""Steady-state detection: MSER-5 on series with a known ramp, and the trimmed window on synthetic records."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.metrics import summarize
from tokspeed.metrics.steady_state import mser_truncation, steady_state
from tokspeed.records import RequestRecord

MS = 1_000_000


def test_mser5_finds_a_linear_ramp() -> None:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 100, 30, endpoint=False)
    steady = 100 + rng.normal(0, 5, size=170)
    d = mser_truncation(np.concatenate([ramp, steady]))
    assert d % 5 == 0 and 25 <= d <= 40


def test_mser5_keeps_a_stationary_series() -> None:
    rng = np.random.default_rng(1)
    assert mser_truncation(100 + rng.normal(0, 5, size=200)) <= 20


def test_mser5_short_series() -> None:
    assert mser_truncation([1.0, 2.0, 3.0]) == 0
    assert mser_truncation([]) == 0


def _stream(index: int, start_ms: int, tokens: int, gap_ms: int) -> RequestRecord:
    chunks = [(start_ms + 50 + i * gap_ms) * MS for i in range(tokens)]
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=start_ms * MS, sent_ns=start_ms * MS,
                         first_token_ns=chunks[0], first_content_ns=chunks[0], end_ns=chunks[-1] + MS,
                         chunk_ns=chunks, output_tokens=tokens)


def _ramped_run() -> list[RequestRecord]:
    """2 s at 1 stream, 8 s at 8 streams, then 1 s draining at 1 stream (1 s requests of 20 tokens)."""
    records, i = [], 0
    for t in range(0, 2000, 1000):  # ramp-up: one stream
        records.append(_stream(i, t, 20, 45))
        i += 1
    for t in range(2000, 10000, 1000):  # steady: 8 streams
        for _ in range(8):
            records.append(_stream(i, t, 20, 45))
            i += 1
    records.append(_stream(i, 10000, 20, 45))  # drain: one stream
    return records


def test_the_steady_window_trims_ramp_up_and_drain() -> None:
    records = _ramped_run()
    found = steady_state(records, lambda rs: summarize(rs))
    assert found is not None and found.summary is not None
    assert found.full_window_s == pytest.approx(10.906, abs=0.01)
    assert 1.5 <= found.trimmed_start_s <= 2.6
    assert 0.5 <= found.trimmed_end_s <= 1.6
    assert found.requests == found.summary.requests.completed
    assert 40 <= found.requests <= 64  # the 8-stream seconds, less what the bins cut at the edges
    full = summarize(records)
    assert found.summary.throughput.output_tokens_per_s > full.throughput.output_tokens_per_s


def test_no_steady_state_across_iterations_or_without_tokens() -> None:
    records = _ramped_run()
    records[0].iteration = 2
    assert steady_state(records, lambda rs: summarize(rs)) is None
    assert steady_state(records[:1], lambda rs: summarize(rs)) is None


def test_mser5_does_not_trim_flat_series() -> None:
    """A flat series (a concurrency-1 run's token rate: noise, no ramp) keeps all of it in nearly
    every draw; before, MSER's chance minimum trimmed up to half of it (130 s of a flat 260 s run)."""
    rng = np.random.default_rng(2)
    trimmed = [mser_truncation(100 + rng.normal(0, 5, size=100)) for _ in range(300)]
    assert sum(d > 0 for d in trimmed) <= 0.05 * len(trimmed), sorted(trimmed)[-20:]
    ramp = np.concatenate([np.linspace(60, 100, 10, endpoint=False), 100 + rng.normal(0, 5, size=90)])
    assert mser_truncation(ramp) >= 5  # a real ramp still goes


def test_a_flat_concurrency_one_run_is_not_trimmed() -> None:
    records = [_stream(i, i * 1000, 20, 45) for i in range(260)]  # 260 s, one stream, the same every second
    found = steady_state(records, lambda rs: summarize(rs))
    assert found is not None and found.trimmed_start_s < 3.0 and found.trimmed_end_s < 3.0, found
