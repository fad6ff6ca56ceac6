"""Tests and intervals for comparing two runs: the request-resampling bootstrap (ours) and scipy.stats.

* `bootstrap_quantiles(sample, qs, resamples, rng)`: the quantiles of `resamples`
  bootstrap resamples of a *clustered* sample: units (requests) are drawn with
  replacement and carry all their values (a request's per-token ITLs), because
  values of one request are not independent. Quantiles use numpy's default
  linear interpolation on the resampled values, so they match `distribution()`.
  scipy has no clustered bootstrap; this is the one statistic tokspeed computes itself.
* `bootstrap_ratio(base_draws, other_draws)`: the percentile interval of other/base
  over paired draws of one quantile, and the two-sided bootstrap p-value of
  "ratio = 1" on the same draws, p = min(1, 2·min(#(r ≤ 1) + 1, #(r ≥ 1) + 1) / (B + 1)):
  the smallest α at which the (1 − α) percentile interval excludes 1, so the p-value
  and the interval cannot disagree.
* `welch_log_ratio(xs, ys, ratio)`: Welch's t test (`scipy.stats.ttest_ind`,
  equal_var=False) on log(values) of repeated iterations, and the interval
  ratio × exp(± t(0.975, df) · se) on the same log scale.
* `fisher_p(k_x, n_x, k_y, n_y)`: Fisher's exact test of two proportions (error rates).
* `adjust(p_values)`: Benjamini–Hochberg adjusted p-values (`scipy.stats.false_discovery_control`).

scipy is imported inside the functions that use it: it costs ~1 s to import, and
`tokspeed run` never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# cells (resamples × values) handled per numpy batch in the bootstrap: ~32 MB of int64
_BATCH_CELLS = 4_000_000


@dataclass(frozen=True, slots=True)
class RatioTest:
    """A 95% interval of other/base and the two-sided p-value of "ratio = 1" on the same scale."""

    ci: tuple[float, float]
    p_value: float


@dataclass(frozen=True, slots=True)
class ClusteredSample:
    """Values sorted ascending, each with the unit (request) it came from, 0 … units − 1."""

    values: np.ndarray
    owner: np.ndarray
    units: int

    @classmethod
    def of(cls, values: np.ndarray, owner: np.ndarray | None = None) -> ClusteredSample:
        """Drop NaNs, sort, and renumber the owners that still have values (None: one per value)."""
        vals = np.asarray(values, dtype=np.float64)
        own = np.arange(vals.size) if owner is None else np.asarray(owner, dtype=np.int64)
        keep = ~np.isnan(vals)
        vals, own = vals[keep], own[keep]
        order = np.argsort(vals, kind="stable")
        units, dense = np.unique(own[order], return_inverse=True)
        return cls(values=vals[order], owner=dense.astype(np.int64), units=int(units.size))



def thin(
    values: np.ndarray, owner: np.ndarray | None, max_values: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray | None]:
    """At most `max_values` of the values (and their owners): a seeded random subset.

    Fewer values give a wider bootstrap interval, never a narrower one, and bound its cost.
    """
    if values.size <= max_values:
        return values, owner
    keep = np.sort(rng.choice(values.size, size=max_values, replace=False))
    return values[keep], None if owner is None else owner[keep]


def bootstrap_quantiles(
    sample: ClusteredSample, qs: tuple[float, ...], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """`resamples` × len(qs) bootstrap quantiles (qs in percent) of a clustered sample.

    Each resample draws `units` units with replacement (`resample_counts`); a
    value's weight is its unit's count. The q-th quantile of the resample is the
    linear interpolation at position h = (W − 1)·q/100 of the expanded sorted
    values (W = total weight), found from cumulative weights without expanding.
    """
    out = np.full((resamples, len(qs)), np.nan)
    if sample.units == 0:
        return out
    x, owner = sample.values, sample.owner
    batch = max(1, _BATCH_CELLS // max(x.size, sample.units, 1))
    for start in range(0, resamples, batch):
        rows = min(batch, resamples - start)
        counts = resample_counts(sample.units, rows, rng)
        cumulative = np.cumsum(counts[:, owner], axis=1)
        total = cumulative[:, -1].astype(np.float64)
        for j, q in enumerate(qs):
            out[start : start + rows, j] = _weighted_quantile(x, cumulative, total, q)
    return out


def resample_counts(units: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """rows × units: how often each unit is drawn when `units` draws are made with replacement.

    The same distribution as `rng.multinomial(units, [1/units] * units, rows)`, ten times faster.
    """
    drawn = rng.integers(0, units, size=(rows, units)) + (np.arange(rows) * units)[:, None]
    return np.bincount(drawn.ravel(), minlength=rows * units).reshape(rows, units).astype(np.int32)


def _weighted_quantile(x: np.ndarray, cumulative: np.ndarray, total: np.ndarray, q: float) -> np.ndarray:
    """Row-wise linear-interpolation quantile; NaN for rows with no weight."""
    h = np.maximum(total - 1.0, 0.0) * (q / 100.0)
    k0 = np.floor(h)
    k1 = np.minimum(k0 + 1.0, np.maximum(total - 1.0, 0.0))
    i0 = np.minimum((cumulative <= k0[:, None]).sum(axis=1), x.size - 1)
    i1 = np.minimum((cumulative <= k1[:, None]).sum(axis=1), x.size - 1)
    values = x[i0] + (h - k0) * (x[i1] - x[i0])
    return np.where(total > 0, values, np.nan)


def ratio_interval(base: np.ndarray, other: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of other/base over paired bootstrap draws; None if too few are finite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = other / base
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size < 0.9 * base.size or ratios.size == 0:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(ratios, (tail, 100.0 - tail))
    return float(lo), float(hi)


def bootstrap_ratio(base: np.ndarray, other: np.ndarray, level: float = 0.95) -> RatioTest | None:
    """`ratio_interval` and the bootstrap p-value of ratio = 1 from the same paired draws."""
    ci = ratio_interval(base, other, level)
    if ci is None:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = other / base
    ratios = ratios[np.isfinite(ratios)]
    draws = ratios.size
    below, above = int(np.sum(ratios <= 1.0)), int(np.sum(ratios >= 1.0))
    p = min(1.0, 2.0 * (min(below, above) + 1) / (draws + 1))
    return RatioTest(ci=ci, p_value=p)


def welch_log_ratio(xs: Sequence[float], ys: Sequence[float], ratio: float, level: float = 0.95) -> RatioTest | None:
    """Welch's t test of log(ys) against log(xs) and the interval ratio × exp(± t·se); None unless
    both have ≥ 2 positive values. With no spread on either side: p = 1 when the logs' means are
    equal, else 0, and the interval is the ratio itself."""
    from scipy import stats

    a, b = _positive_logs(xs), _positive_logs(ys)
    if a.size < 2 or b.size < 2 or not ratio > 0:
        return None
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    if se == 0:
        return RatioTest(ci=(ratio, ratio), p_value=1.0 if a.mean() == b.mean() else 0.0)
    test = stats.ttest_ind(b, a, equal_var=False)
    df = float(test.df)
    t = float(stats.t.ppf(0.5 + level / 2, df))
    return RatioTest(ci=(ratio * math.exp(-t * se), ratio * math.exp(t * se)), p_value=float(test.pvalue))


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """Two-sided Fisher exact p-value of k2/n2 against k1/n1; None when a group is empty."""
    if n1 == 0 or n2 == 0:
        return None
    from scipy import stats

    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


CORRECTION = "benjamini-hochberg"


def adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini–Hochberg adjusted p-values of the given ones (None stays None, not counted)."""
    present = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if not present:
        return out
    from scipy import stats

    adjusted = stats.false_discovery_control([float(p_values[i]) for i in present], method="bh")  # type: ignore[arg-type]
    for i, p in zip(present, np.atleast_1d(adjusted)):
        out[i] = float(min(1.0, p))
    return out


def _positive_logs(values: Sequence[float]) -> np.ndarray:
    arr = _finite(np.asarray(values, dtype=np.float64))
    return np.log(arr[arr > 0])


def _finite(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]
