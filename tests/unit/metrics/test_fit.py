"""The prefill-cost fit recovers a known line exactly and refuses to fit without spread."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.metrics.fit import fit_line, ttft_vs_input_tokens
from tokspeed.records import RequestRecord


def rec(i: int, tokens: int, ttft_ms: float) -> RequestRecord:
    return RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=0, sent_ns=1000,
                         first_token_ns=1000 + int(ttft_ms * 1e6), end_ns=10**10, input_tokens=tokens)


def test_recovers_per_token_cost() -> None:
    recs = [rec(i, n, 10 + 0.1 * n) for i, n in enumerate([128, 512, 2048, 8192])]  # 100 us/token
    fit = ttft_vs_input_tokens(recs)
    assert fit.slope_ms_per_1k_tokens == pytest.approx(100.0)
    assert fit.intercept_ms == pytest.approx(10.0)
    assert fit.r2 == pytest.approx(1.0)


def test_no_spread_no_fit() -> None:
    assert fit_line(np.array([5.0, 5.0]), np.array([1.0, 2.0])).slope_ms_per_1k_tokens is None
    assert ttft_vs_input_tokens([]).points == 0
