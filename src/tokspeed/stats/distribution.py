"""Summary statistics of one sample: the `Distribution` every metric is reported as.

Formulas (x = the values after scaling, n = their count):

* mean = Σx / n
* stdev = sample standard deviation, √(Σ(x − mean)² / (n − 1)); 0.0 when n = 1
* pXX = numpy's default percentile (linear interpolation between closest ranks);
  p999 is the 99.9th percentile
* all stats are None when n = 0

NaN entries mean "not applicable" and are dropped before anything is computed.

Percentile confidence intervals (`distribution_with_ci`, `order_statistic_ranks`):
the distribution-free order-statistic interval. Of n independent samples, the count
B at or below the true q-th quantile is Binomial(n, q), so for 1-based ranks l < u
P(x₍ₗ₎ ≤ quantile < x₍ᵤ₎) = P(l ≤ B ≤ u − 1). l is the largest rank with
P(B ≤ l − 1) ≤ 2.5% and u the smallest with P(B ≤ u − 1) ≥ 97.5% (equal tails,
coverage ≥ 95%, computed exactly). The interval exists only when
(1 − q)ⁿ ≤ 2.5% and qⁿ ≤ 2.5%: p50 needs n ≥ 6, p90 n ≥ 36, p99 n ≥ 368,
p99.9 n ≥ 3688 (`min_samples_for_ci`); below that it is None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

# the quantiles (in percent) behind p50, p90, p95, p99, p999
QUANTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
# every stat a Distribution carries, in report order
STAT_NAMES: tuple[str, ...] = (
    "count",
    "mean",
    "stdev",
    "min",
    "p50",
    "p90",
    "p95",
    "p99",
    "p999",
    "max",
)


class Distribution(BaseModel):
    """count, mean, stdev, min, p50, p90, p95, p99, p99.9 and max of one sample."""

    model_config = ConfigDict(frozen=True)

    count: int = 0
    mean: float | None = None
    stdev: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None

    def stat(self, name: str) -> float | None:
        """One stat by name (`p99`, `mean`, `count`, ...); KeyError for an unknown name."""
        if name not in STAT_NAMES:
            raise KeyError(name)
        value = getattr(self, name)
        return None if value is None else float(value)


# the percentiles given a 95% confidence interval, and the confidence
CI_QUANTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
CI_CONFIDENCE = 0.95


class QuantileCI(BaseModel):
    """A 95% confidence interval of one percentile: [low, high] and its coverage.

    `order-statistic`: distribution-free, exact coverage, for values independent of each other
    (one per request). `request-bootstrap`: per-token values (ITL), resampled by request,
    nominal coverage 0.95; `units` is the number of requests.
    """

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    coverage: float  # P(low ≤ true quantile < high) for continuous data; ≥ 0.95 (order-statistic)
    method: Literal["order-statistic", "request-bootstrap"] = "order-statistic"
    units: int | None = None  # request-bootstrap: the requests resampled

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def distribution(values: Sequence[float] | np.ndarray, scale: float = 1.0) -> Distribution:
    """The Distribution of `values` × `scale` (e.g. scale=1e-6 turns ns into ms; scale > 0).

    One `np.percentile` call for all quantiles, so 10^6 values take milliseconds.
    The stats are computed on the raw values and then scaled (see `_scaled`).
    Rounding is guarded so that min ≤ p50 ≤ … ≤ p999 ≤ max and min ≤ mean ≤ max
    always hold exactly, and stdev is exactly 0.0 when all values are equal.
    """
    return _distribution(values, scale, with_ci=False)[0]


def distribution_with_ci(
    values: Sequence[float] | np.ndarray, scale: float = 1.0
) -> tuple[Distribution, dict[str, QuantileCI | None]]:
    """`distribution(values, scale)` and the 95% CI of p50, p90, p99 and p99.9 (None: n too small).

    Shares the one private copy of the values with the percentile call: one
    `np.partition` at the (≤ 8) interval ranks, so 10^6 values take milliseconds.
    The bounds are clipped to [p, ...] so that low ≤ pXX ≤ high always holds.
    """
    dist, ci = _distribution(values, scale, with_ci=True)
    return dist, ci if ci is not None else {name: None for name in CI_QUANTILES}


def _distribution(
    values: Sequence[float] | np.ndarray, scale: float, with_ci: bool
) -> tuple[Distribution, dict[str, QuantileCI | None] | None]:
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    arr = np.asarray(values, dtype=np.float64).ravel()
    # np.percentile may reorder a private copy in place, never the caller's array
    owned = not (isinstance(values, np.ndarray) and np.may_share_memory(arr, values))
    if np.isnan(arr).any():
        arr, owned = arr[~np.isnan(arr)], True
    if arr.size == 0:
        return Distribution(), None
    lo, hi = float(arr.min()), float(arr.max())
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if arr.size > 1 and lo != hi else 0.0
    ranks = {name: order_statistic_ranks(int(arr.size), q) for name, q in CI_QUANTILES.items()} if with_ci else {}
    bounds: dict[str, tuple[float, float, float]] = {}
    if any(r is not None for r in ranks.values()):
        if not owned:
            arr, owned = arr.copy(), True
        kth = sorted({k - 1 for r in ranks.values() if r is not None for k in r[:2]})
        arr.partition(kth)  # after mean/stdev: the order of the values changes their rounding
        bounds = {name: (float(arr[r[0] - 1]), float(arr[r[1] - 1]), r[2]) for name, r in ranks.items() if r is not None}
    quantiles = np.percentile(arr, QUANTILES, overwrite_input=owned)
    stats = _scaled(np.concatenate(([lo, mean, stdev, hi], quantiles)), scale)
    lo, mean, stdev, hi = (float(v) for v in stats[:4])
    p50, p90, p95, p99, p999 = (float(v) for v in np.clip(np.maximum.accumulate(stats[4:]), lo, hi))
    dist = Distribution(
        count=int(arr.size),
        mean=min(max(mean, lo), hi),
        stdev=stdev,
        min=lo,
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        p999=p999,
        max=hi,
    )
    if not with_ci:
        return dist, None
    ci: dict[str, QuantileCI | None] = {name: None for name in CI_QUANTILES}
    for name, (low, high, coverage) in bounds.items():
        scaled_low, scaled_high = (float(v) for v in _scaled(np.array([low, high]), scale))
        estimate = getattr(dist, name)
        ci[name] = QuantileCI(low=min(scaled_low, estimate), high=max(scaled_high, estimate), coverage=coverage)
    return dist, ci


@lru_cache(maxsize=4096)
def order_statistic_ranks(n: int, q: float, confidence: float = CI_CONFIDENCE) -> tuple[int, int, float] | None:
    """1-based ranks (l, u) of the sorted sample bounding the q-th percentile, and the exact coverage.

    Equal tails: l is the largest rank with P(B ≤ l − 1) ≤ α/2, u the smallest with
    P(B ≤ u − 1) ≥ 1 − α/2, B ~ Binomial(n, q/100), α = 1 − confidence; None when
    no such 1 ≤ l < u ≤ n exists (n too small). The binomial quantiles and CDF are
    scipy.stats.binom's (about a millisecond at n = 10^6; cached per (n, q)).
    """
    from scipy.stats import binom  # here, not at the top: scipy.stats costs ~1 s to import

    p = q / 100.0
    if n < 1 or not 0.0 < p < 1.0:
        return None
    tail = (1.0 - confidence) / 2
    counts = binom(n, p)
    below = int(counts.ppf(tail))  # the smallest j with P(B ≤ j) ≥ α/2 ...
    if counts.cdf(below) > tail:
        below -= 1  # ... stepped down to the largest j with P(B ≤ j) ≤ α/2, which is l − 1
    lo, u = below + 1, int(counts.ppf(1.0 - tail)) + 1  # u − 1: the smallest j with P(B ≤ j) ≥ 1 − α/2
    if lo < 1 or u > n or lo >= u:
        return None
    coverage = float(counts.cdf(u - 1) - counts.cdf(lo - 1))  # P(l ≤ B ≤ u − 1)
    return lo, u, min(1.0, coverage)


def min_samples_for_ci(q: float, confidence: float = CI_CONFIDENCE) -> int:
    """The smallest n for which the q-th percentile has a two-sided interval (`order_statistic_ranks`)."""
    p, log_tail = q / 100.0, math.log((1.0 - confidence) / 2)
    n = math.ceil(max(log_tail / math.log(p), log_tail / math.log1p(-p)))
    while order_statistic_ranks(n, q, confidence) is None:  # guard the rounding at the boundary
        n += 1
    return n


def required_samples(
    ci: QuantileCI | None, estimate: float | None, n: int, q: float, precision: float = 0.10
) -> int | None:
    """How many samples a run needs so that the q-th percentile's 95% CI half-width is ≤ `precision` × it.

    The half-width shrinks as 1/√n (the interval spans ≈ ±1.96·√(q(1−q)/n) in
    rank, and the spread of the values there is what was observed), so
    needed = n · (half-width / (precision · estimate))², never fewer than
    `min_samples_for_ci(q)`; a value ≤ n means the run already suffices. Without
    an interval (n too small) it is max(`min_samples_for_ci(q)`, n + 1): a lower bound.
    None when the estimate is missing or ≤ 0.
    """
    floor = min_samples_for_ci(q)
    if ci is None:
        return max(floor, n + 1)
    if estimate is None or estimate <= 0:
        return None
    ratio = ci.half_width / (precision * estimate)
    return max(floor, math.ceil(n * ratio * ratio))


def percentile_name(q: float) -> str:
    """The stat name of the q-th percentile: `p50`, `p99`, `p999` (99.9), `p9999` (99.99), `p0_1` (0.1).

    10 ≤ q < 100: "p" and the digits without the point (the run.json convention for p999); below 10
    the point becomes "_" (so 1.25 → `p1_25` and 12.5 → `p125` never collide).
    """
    if not 0.0 < q < 100.0:
        raise ValueError(f"a percentile is in (0, 100), got {q:g}")
    text = f"{q:.6f}".rstrip("0").rstrip(".")
    return "p" + (text.replace(".", "") if q >= 10.0 else text.replace(".", "_"))


def quantile_of_name(stat: str) -> float | None:
    """The percentile a stat name such as `p75`, `p999` (99.9) or `p0_1` (0.1) stands for; None for
    any other name. The inverse of `percentile_name`."""
    if not stat.startswith("p") or len(stat) < 2:
        return None
    body = stat[1:]
    if "_" in body:
        whole, _, frac = body.partition("_")
        text = f"{whole}.{frac}" if whole.isdigit() and len(whole) == 1 and frac.isdigit() else ""
    else:
        text = (body if len(body) == 1 else f"{body[:2]}.{body[2:]}") if body.isdigit() and body[0] != "0" else ""
    try:
        q = float(text)
    except ValueError:
        return None
    return q if 0.0 < q < 100.0 and percentile_name(q) == stat else None


def parse_percentiles(text: str | Sequence[float | str]) -> tuple[float, ...]:
    """`50,90,99,99.9` (or a list) → (50.0, 90.0, 99.0, 99.9): sorted, without repeats; ValueError for
    anything not a number in (0, 100)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: set[float] = set()
    for item in items:
        raw = str(item).strip().removeprefix("p")
        if not raw:
            continue
        try:
            q = float(raw)
        except ValueError:
            raise ValueError(f"not a percentile: {str(item).strip()!r} (give numbers such as 50,90,99,99.9)") from None
        if not 0.0 < q < 100.0 or math.isnan(q):
            raise ValueError(f"a percentile is in (0, 100), got {str(item).strip()}")
        out.add(round(q, 6))
    if not out:
        raise ValueError("no percentile given (e.g. 50,90,99,99.9)")
    return tuple(sorted(out))


def _scaled(arr: np.ndarray, scale: float) -> np.ndarray:
    """`arr` × `scale`, dividing instead when 1/scale is a whole number.

    Dividing by 1e6 is correctly rounded where multiplying by 1e-6 is not, so
    1_500_000 ns becomes exactly 1.5 ms.
    """
    if scale == 1.0:
        return arr
    inverse = 1.0 / scale
    if inverse.is_integer():
        return arr / inverse
    return arr * scale
