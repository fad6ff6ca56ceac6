"""Significance tests and bootstrap intervals for comparing two runs (numpy + math only).

* `mann_whitney_u(x, y)`: two-sided Mann–Whitney U test, normal approximation.
  Ranks over the pooled sample, ties get their average rank;
  U_x = R_x − n_x(n_x + 1)/2, μ = n_x·n_y/2,
  σ² = n_x·n_y/12 · ((N + 1) − Σ(t³ − t) / (N(N − 1))) (t = size of each tie group),
  z = (|U_x − μ| − ½) / σ (continuity correction), p = erfc(z / √2).
  The same as scipy's `mannwhitneyu(x, y, method="asymptotic")`.
* `welch_t(x, y)`: Welch's unequal-variance t test, t = (ȳ − x̄) / √(s_x²/n_x + s_y²/n_y),
  Welch–Satterthwaite degrees of freedom, p = I_{df/(df+t²)}(df/2, ½).
* `two_proportions(k_x, n_x, k_y, n_y)`: pooled two-proportion z test (error rates).
* `bootstrap_quantiles(sample, qs, resamples, rng)`: the quantiles of `resamples`
  bootstrap resamples of a *clustered* sample: units (requests) are drawn with
  replacement and carry all their values (a request's per-token ITLs), because
  values of one request are not independent. Quantiles use numpy's default
  linear interpolation on the resampled values, so they match `distribution()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# cells (resamples × values) handled per numpy batch in the bootstrap: ~32 MB of int64
_BATCH_CELLS = 4_000_000


@dataclass(frozen=True, slots=True)
class TestResult:
    """A test statistic and its two-sided p-value."""

    statistic: float
    p_value: float


@dataclass(frozen=True, slots=True)
class WelchResult:
    t: float
    df: float
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


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, float]:
    """1-based ranks with ties averaged, and the tie term Σ(t³ − t) over tie groups."""
    n = values.size
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_vals[1:] != sorted_vals[:-1])))
    sizes = np.diff(np.append(starts, n))
    group_rank = starts + (sizes + 1) / 2.0  # mean of ranks start+1 … start+size
    ranks = np.empty(n)
    ranks[order] = np.repeat(group_rank, sizes)
    ties = sizes[sizes > 1].astype(np.float64)
    return ranks, float(np.sum(ties**3 - ties))


def mann_whitney_u(x: np.ndarray, y: np.ndarray) -> TestResult | None:
    """U of `x` against `y` and the two-sided p-value; None when either is empty (NaNs dropped)."""
    a = _finite(x)
    b = _finite(y)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return None
    ranks, tie_term = average_ranks(np.concatenate((a, b)))
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    total = n1 + n2
    variance = n1 * n2 / 12.0 * ((total + 1) - (tie_term / (total * (total - 1)) if total > 1 else 0.0))
    if variance <= 0:
        return TestResult(statistic=u1, p_value=1.0)
    z = max(abs(u1 - n1 * n2 / 2.0) - 0.5, 0.0) / math.sqrt(variance)
    return TestResult(statistic=u1, p_value=min(1.0, math.erfc(z / math.sqrt(2.0))))


def welch_t(x: np.ndarray, y: np.ndarray) -> WelchResult | None:
    """Welch's t test of mean(y) − mean(x); None unless both have ≥ 2 values."""
    a, b = _finite(x), _finite(y)
    if a.size < 2 or b.size < 2:
        return None
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    diff = float(b.mean() - a.mean())
    se2 = float(va + vb)
    if se2 == 0:
        return WelchResult(t=0.0 if diff == 0 else math.copysign(math.inf, diff), df=math.inf, p_value=1.0 if diff == 0 else 0.0)
    t = diff / math.sqrt(se2)
    df = se2**2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return WelchResult(t=t, df=float(df), p_value=t_two_sided_p(t, float(df)))


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> TestResult | None:
    """Pooled two-proportion z test of k2/n2 against k1/n1; None when a group is empty."""
    if n1 == 0 or n2 == 0:
        return None
    pooled = (k1 + k2) / (n1 + n2)
    if pooled in (0.0, 1.0):
        return TestResult(statistic=0.0, p_value=1.0)
    z = (k2 / n2 - k1 / n1) / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return TestResult(statistic=z, p_value=min(1.0, math.erfc(abs(z) / math.sqrt(2.0))))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with `df` degrees of freedom: I_{df/(df+t²)}(df/2, ½)."""
    if math.isinf(t):
        return 0.0
    if math.isinf(df):
        return math.erfc(abs(t) / math.sqrt(2.0))
    return min(1.0, regularized_beta(df / (df + t * t), df / 2.0, 0.5))


def regularized_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float, eps: float = 1e-15, max_iter: int = 500) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, max_iter + 1):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


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


def _finite(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]
