"""Reduce raw samples to what a chart needs: ECDF points, histogram bins, subsets.

Pure numpy. Every output has a bounded size whatever the input (a run may hold
millions of per-token values), which keeps an HTML report small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ECDF_POINTS = 600
TAIL_POINTS = 200
MAX_BINS = 60
CLIP_FROM = 1000  # with at least this many values, histograms stop at p99.9


@dataclass(frozen=True, slots=True)
class Histogram:
    """Bin centres and counts over [lo, hi]; `beyond` values above hi are not drawn."""

    centers: np.ndarray
    counts: np.ndarray
    width: float
    lo: float
    hi: float
    beyond: int


def finite(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def ecdf(values: np.ndarray, points: int = ECDF_POINTS, tail: int = TAIL_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) of the empirical CDF, exact below `points + tail` values, else on a quantile grid
    that is denser in the upper tail (p99 … max), where latency problems live."""
    x = np.sort(finite(values))
    n = x.size
    if n == 0:
        return x, x
    if n <= points + tail:
        return x, np.arange(1, n + 1) / n
    probs = np.linspace(0.0, 1.0, points)
    tail_probs = 1.0 - np.geomspace(1e-2, max(1.0 / n, 1e-6), tail)
    probs = np.unique(np.concatenate((probs, tail_probs, [1.0])))
    return np.quantile(x, probs), probs


def histogram(values: np.ndarray, max_bins: int = MAX_BINS) -> Histogram | None:
    """Counts in at most `max_bins` equal bins (Freedman–Diaconis width, at least 10 bins);
    from CLIP_FROM values on the bins stop at p99.9 so one outlier cannot flatten the rest."""
    x = finite(values)
    if x.size == 0:
        return None
    lo, hi = float(x.min()), float(x.max())
    if x.size >= CLIP_FROM:
        hi = float(np.percentile(x, 99.9))
    if hi <= lo:
        return Histogram(np.array([lo]), np.array([x.size]), max(abs(lo) * 0.01, 1e-3), lo, lo, 0)
    inside = x[x <= hi]
    bins = len(np.histogram_bin_edges(inside, bins="fd")) - 1
    counts, edges = np.histogram(inside, bins=min(max(bins, 10), max_bins), range=(lo, hi))
    return Histogram((edges[:-1] + edges[1:]) / 2, counts, float(edges[1] - edges[0]), lo, hi, int(x.size - inside.size))


def subset(n: int, limit: int, seed: int = 0) -> np.ndarray:
    """Indices of at most `limit` of n items: all of them, or a seeded random sorted subset."""
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
