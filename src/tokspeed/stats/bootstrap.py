"""Bootstrap confidence intervals of percentiles, beside the order-statistic ones of `metrics.stats`.

Percentile bootstrap by request: draw B resamples of the requests with replacement
(one seeded `numpy.random.Generator`; a request carries all its values, e.g. its
per-token ITLs, which are not independent of each other), take the q-th percentile
of each resample (numpy's default, linear interpolation, as in the summaries), and
report the α/2 and 1 − α/2 percentiles of those B estimates as the interval
(α = 0.05). Without owners every value is its own request. The resampling itself is
`metrics.significance.bootstrap_quantiles`, the same one compare uses.

Cost is bounded: above `max_n` values the sample is first thinned to `max_n` by a
seeded draw without replacement (the interval then describes fewer values, so it is
wider than the truth: conservative). With few values above the quantile
(n·(1 − q) < ~5) the bootstrap is known to undercover — `reliable` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from tokspeed.stats.distribution import min_samples_for_ci
from tokspeed.stats.significance import ClusteredSample, bootstrap_quantiles, thin

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
DEFAULT_MAX_N = 20_000


class BootstrapCI(BaseModel):
    """A percentile-bootstrap interval of one percentile."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    resamples: int
    n: int  # values the resamples were drawn from (after any thinning)
    units: int  # requests they came from: what each resample draws
    reliable: bool  # n·(1 − q) ≥ 5 and n·q ≥ 5: enough values beyond the quantile on both sides


def bootstrap_percentile_ci(
    values: Sequence[float] | np.ndarray,
    q: float,
    *,
    owner: Sequence[int] | np.ndarray | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    max_n: int = DEFAULT_MAX_N,
) -> BootstrapCI | None:
    """The bootstrap `confidence` interval of the q-th percentile (q in percent) of `values`; None below 2 values.

    `owner`: each value's request, when a request has several (ITL); the resampling then
    draws requests. NaN entries are dropped. Same seed, same values → same interval.
    """
    return bootstrap_percentile_cis(values, (q,), owner=owner, resamples=resamples, confidence=confidence,
                                    seed=seed, max_n=max_n)[q]


def bootstrap_percentile_cis(
    values: Sequence[float] | np.ndarray,
    qs: Sequence[float],
    *,
    owner: Sequence[int] | np.ndarray | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    max_n: int = DEFAULT_MAX_N,
) -> dict[float, BootstrapCI | None]:
    """`bootstrap_percentile_ci` for several percentiles from the same resamples (one pass)."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    own = None if owner is None else np.asarray(owner, dtype=np.int64).ravel()
    keep = ~np.isnan(arr)
    arr, own = arr[keep], None if own is None else own[keep]
    if arr.size < 2 or resamples < 1:
        return {q: None for q in qs}
    rng = np.random.default_rng(seed)
    sample = ClusteredSample.of(*thin(arr, own, max_n, rng))
    if sample.units < 2:
        return {q: None for q in qs}
    estimates = bootstrap_quantiles(sample, tuple(qs), resamples, rng)
    alpha = 1.0 - confidence
    bounds = np.nanpercentile(estimates, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    n = int(sample.values.size)
    out: dict[float, BootstrapCI | None] = {}
    for i, q in enumerate(qs):
        p = q / 100.0
        out[q] = BootstrapCI(low=float(bounds[0, i]), high=float(bounds[1, i]), resamples=resamples, n=n,
                             units=sample.units, reliable=n * (1 - p) >= 5 and n * p >= 5)
    return out


def samples_for_precision(values: Sequence[float] | np.ndarray, q: float, precision: float = 0.10,
                          confidence: float = 0.95) -> int | None:
    """About how many values put the q-th percentile's CI half-width within ±`precision` of it.

    Asymptotic (distribution-free) formula: the quantile estimate's standard error is
    √(p(1 − p)/n) / f(x_q), p = q/100, where f, the density at the quantile, is estimated
    from the sample as 2h / (x at p + h − x at p − h) with h = max(2/n, z·√(p(1 − p)/n));
    so n = (z · √(p(1 − p)) / (f · precision · x_q))², z = 1.96 for 95%, never fewer than
    `distribution.min_samples_for_ci(q)` (368 for p99: fewer cannot bound it at all). None when x_q ≤ 0
    or the sample is too small (< 20 values) to estimate f.
    """
    arr = np.sort(np.asarray(values, dtype=np.float64).ravel())
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n < 20:
        return None
    p = q / 100.0
    xq = float(np.percentile(arr, q))
    if xq <= 0:
        return None
    z = _z(confidence)
    h = max(2.0 / n, z * math.sqrt(p * (1 - p) / n))  # probability half-window around q
    lo_p, hi_p = max(0.0, p - h), min(1.0, p + h)
    spread = float(np.percentile(arr, 100 * hi_p) - np.percentile(arr, 100 * lo_p))
    floor = min_samples_for_ci(q, confidence)
    if spread <= 0:
        return floor
    density = (hi_p - lo_p) / spread
    return max(floor, math.ceil((z * math.sqrt(p * (1 - p)) / (density * precision * xq)) ** 2))


def _z(confidence: float) -> float:
    """The two-sided standard-normal quantile for `confidence` (1.96 for 0.95)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)
