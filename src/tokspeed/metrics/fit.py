"""Prefill cost: a least-squares line through (input tokens, TTFT) of completed requests.

    TTFT ≈ intercept_ms + slope_ms_per_1k × input_tokens / 1000

The slope is what each extra 1k prompt tokens costs before the first token
(the prefill rate); the intercept is the fixed overhead (queueing, scheduling,
network). `r2` says how well a line explains the points.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel

from tokspeed.metrics.request import ttft_ns
from tokspeed.records import RequestRecord


class LinearFit(BaseModel):
    """TTFT (ms) as a line in input tokens; None fields when there is too little spread to fit."""

    points: int
    slope_ms_per_1k_tokens: float | None
    intercept_ms: float | None
    r2: float | None


def ttft_vs_input_tokens(records: Iterable[RequestRecord]) -> LinearFit:
    xs, ys = [], []
    for r in records:
        t = ttft_ns(r)
        if r.ok and not r.warmup and t is not None and r.input_tokens is not None:
            xs.append(float(r.input_tokens))
            ys.append(t / 1e6)
    return fit_line(np.asarray(xs), np.asarray(ys))


def fit_line(x: np.ndarray, y: np.ndarray) -> LinearFit:
    """Ordinary least squares of y on x (x in tokens, y in ms)."""
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        return LinearFit(points=n, slope_ms_per_1k_tokens=None, intercept_ms=None, r2=None)
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    return LinearFit(points=n, slope_ms_per_1k_tokens=float(slope) * 1000, intercept_ms=float(intercept), r2=r2)
