"""Summary statistics of one sample: the `Distribution` every metric is reported as.

Formulas (x = the values after scaling, n = their count):

* mean = Σx / n
* stdev = sample standard deviation, √(Σ(x − mean)² / (n − 1)); 0.0 when n = 1
* pXX = numpy's default percentile (linear interpolation between closest ranks);
  p999 is the 99.9th percentile
* all stats are None when n = 0

NaN entries mean "not applicable" and are dropped before anything is computed.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def distribution(values: Sequence[float] | np.ndarray, scale: float = 1.0) -> Distribution:
    """The Distribution of `values` × `scale` (e.g. scale=1e-6 turns ns into ms; scale > 0).

    One `np.percentile` call for all quantiles, so 10^6 values take milliseconds.
    The stats are computed on the raw values and then scaled (see `_scaled`).
    Rounding is guarded so that min ≤ p50 ≤ … ≤ p999 ≤ max and min ≤ mean ≤ max
    always hold exactly, and stdev is exactly 0.0 when all values are equal.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    arr = np.asarray(values, dtype=np.float64).ravel()
    # np.percentile may reorder a private copy in place, never the caller's array
    owned = not (isinstance(values, np.ndarray) and np.may_share_memory(arr, values))
    if np.isnan(arr).any():
        arr, owned = arr[~np.isnan(arr)], True
    if arr.size == 0:
        return Distribution()
    lo, hi = float(arr.min()), float(arr.max())
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if arr.size > 1 and lo != hi else 0.0
    quantiles = np.percentile(arr, QUANTILES, overwrite_input=owned)
    stats = _scaled(np.concatenate(([lo, mean, stdev, hi], quantiles)), scale)
    lo, mean, stdev, hi = (float(v) for v in stats[:4])
    p50, p90, p95, p99, p999 = (float(v) for v in np.clip(np.maximum.accumulate(stats[4:]), lo, hi))
    return Distribution(
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
