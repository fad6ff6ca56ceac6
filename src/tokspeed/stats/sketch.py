"""Bounded samples: a metric's values kept exactly up to a limit, then in a mergeable log histogram.

A load point of 10^6 requests of 256 tokens pools 2.6·10^8 inter-token latencies; keeping
them all (or the records they came from) until the point ends makes memory grow with the run.
`BoundedSample` keeps a metric's values in one of two modes:

Exact (count ≤ `limit`, default 2^18 values = 2 MiB of float64): the values themselves, in
the order added, in one growable float64 buffer. Every statistic is bit-for-bit what
`tokspeed.stats.distribution.distribution` / `distribution_with_ci` give on the concatenated values.

Approximate (the first `add` or `merge` that would take the count past `limit` switches, once
and for good): the exact values are folded into a log-bucketed histogram (DDSketch,
Masson et al. 2019) of relative accuracy α (`accuracy`, default 1e-4):

* γ = (1 + α) / (1 − α); a value x > 0 goes to bucket i = ⌈ln x / ln γ⌉, which holds
  (γ^(i−1), γ^i]; its representative is 2γ^i / (γ + 1), so |rep − x| ≤ α·x for every x in
  the bucket (2/(γ+1) = 1 − α and 2γ/(γ+1) = 1 + α).
* x < 0 goes to a mirrored store by |x| (representative −2γ^i/(γ+1)); x = 0 to a zero count;
  ±inf to two counts of their own. Each store is a dense int64 array over
  [min_index, max_index], grown as values arrive; a chunk is bucketed at once
  (`np.log`, `np.ceil`, `np.bincount`), never value by value.
* count, min and max are kept exactly. mean and stdev come from a running sum and sum of
  squared deviations M2 (float64), combined per added chunk by Chan et al.'s parallel formula
  (δ = mean_b − mean_a, M2 = M2_a + M2_b + δ²·n_a·n_b / n): exact up to float rounding.
  stdev = √(M2 / (n − 1)), exactly 0.0 when min = max.
* percentiles follow numpy's default definition: at rank h = (n − 1)·q/100, the value at rank
  ⌊h⌋ plus (h − ⌊h⌋) × the gap to the value at rank ⌊h⌋ + 1, where the value at a rank is its
  bucket's representative clipped to [min, max] (rank 0 is min, rank n − 1 is max exactly).
  The confidence intervals take the values at `distribution.order_statistic_ranks` the same way.
  Then the same scaling, clipping and monotonicity as `distribution.distribution`.

Guarantee: every value at a rank is within α·|x| of the true order statistic x at that rank,
so each percentile is within α × the larger magnitude of its two neighbouring order statistics
(α relative for positive data) and each CI bound within α relative of the exact bound.
Memory: one int64 per bucket between the smallest and the largest magnitude, ln(max/min) / ln γ
buckets: values in [1e3, 1e10] ns take 80,600 buckets (645 KB) at α = 1e-4, whatever the count.
A store never exceeds `MAX_BUCKETS`: beyond that span its smallest-magnitude buckets are
folded into one (ratio max/min > e^210 at α = 1e-4; only such values lose the guarantee).

Merging adds bucket counts (exactly associative and commutative), min/max, and sum/M2 by
Chan's formula (associative up to float rounding). Exact + exact stays exact while the total
fits the limit; any other combination is approximate. Two approximate samples must share α.
"""

from __future__ import annotations

import math

import numpy as np

from tokspeed.stats.distribution import (
    CI_QUANTILES,
    QUANTILES,
    Distribution,
    QuantileCI,
    _scaled,
    distribution,
    distribution_with_ci,
    order_statistic_ranks,
)

EXACT_LIMIT = 1 << 18  # values kept exactly per sample (2 MiB of float64)
RELATIVE_ACCURACY = 1e-4  # beyond it: every percentile within 0.01% of a true sample value
MAX_BUCKETS = 1 << 20  # per store (8 MiB); reached only by a max/min ratio above e^(2^20·ln γ)
_MIN_CAPACITY = 16  # first allocation of the exact buffer


class _Store:
    """Counts of the buckets [offset, offset + len(counts)) of one sign: a dense int64 array."""

    __slots__ = ("counts", "offset")

    def __init__(self) -> None:
        self.offset = 0
        self.counts = np.zeros(0, dtype=np.int64)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def add_indices(self, idx: np.ndarray) -> None:
        """Count one value in bucket i for every i in `idx` (int64)."""
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            self._cover(lo, hi)
            if lo < self.offset:  # collapsed: the smallest magnitudes go to the lowest bucket
                idx = np.maximum(idx, self.offset)
                lo, hi = self.offset, max(hi, self.offset)
            start = lo - self.offset
            self.counts[start : start + hi - lo + 1] += np.bincount(idx - lo, minlength=hi - lo + 1)

    def add_counts(self, offset: int, counts: np.ndarray) -> None:
        """Add another store's counts (buckets offset, offset + 1, ...)."""
        nonzero = np.flatnonzero(counts)
        if nonzero.size == 0:
            return
        counts = counts[nonzero[0] : nonzero[-1] + 1]
        lo = offset + int(nonzero[0])
        hi = lo + counts.size - 1
        self._cover(lo, hi)
        if lo < self.offset:
            cut = self.offset - lo
            self.counts[0] += counts[:cut].sum()
            counts, lo = counts[cut:], self.offset
        start = lo - self.offset
        self.counts[start : start + counts.size] += counts

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the array to span buckets lo..hi, folding the lowest ones if the span passes MAX_BUCKETS."""
        size = self.counts.size
        if size and self.offset <= lo and hi < self.offset + size:
            return
        new_lo = min(lo, self.offset) if size else lo
        new_hi = max(hi, self.offset + size - 1) if size else hi
        new_lo = max(new_lo, new_hi - MAX_BUCKETS + 1)
        grown = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
        if size:
            cut = max(0, new_lo - self.offset)  # old buckets below new_lo fold into new_lo
            kept = self.counts[cut:]
            grown[self.offset + cut - new_lo : self.offset + cut - new_lo + kept.size] += kept
            if cut:
                grown[0] += self.counts[:cut].sum()
        self.offset, self.counts = new_lo, grown

    def copy(self) -> _Store:
        out = _Store()
        out.offset, out.counts = self.offset, self.counts.copy()
        return out


class BoundedSample:
    """One metric's values: exact up to `limit`, then a log histogram of relative accuracy `accuracy`."""

    __slots__ = (
        "_buf",
        "_count",
        "_log_gamma",
        "_m2",
        "_max",
        "_min",
        "_neg",
        "_neg_inf",
        "_pos",
        "_pos_inf",
        "_sum",
        "_zeros",
        "accuracy",
        "limit",
    )

    def __init__(self, limit: int = EXACT_LIMIT, accuracy: float = RELATIVE_ACCURACY) -> None:
        if limit < 0:
            raise ValueError(f"limit must be ≥ 0, got {limit}")
        if not 0.0 < accuracy < 1.0:
            raise ValueError(f"accuracy must be in (0, 1), got {accuracy}")
        self.limit = limit
        self.accuracy = accuracy
        self._log_gamma = math.log1p(2 * accuracy / (1 - accuracy))  # ln γ, γ = (1 + α)/(1 − α)
        self._buf: np.ndarray | None = np.empty(0)  # exact mode: values in [:_count]; None once approximate
        self._count = 0
        self._pos = _Store()
        self._neg = _Store()
        self._zeros = 0
        self._pos_inf = 0
        self._neg_inf = 0
        self._min = math.inf
        self._max = -math.inf
        self._sum = 0.0
        self._m2 = 0.0

    @property
    def count(self) -> int:
        """Values added (NaN left out)."""
        return self._count

    @property
    def exact(self) -> bool:
        """Whether every value is still kept (the statistics are exact)."""
        return self._buf is not None

    @property
    def buckets(self) -> int:
        """Histogram buckets held (0 while exact): the approximate mode's memory is 8 bytes each."""
        return int(self._pos.counts.size + self._neg.counts.size)

    def add(self, values: np.ndarray) -> None:
        """Add a 1-D array of values (any numeric dtype; NaN entries are dropped)."""
        arr = np.asarray(values, dtype=np.float64).ravel()
        if np.isnan(arr).any():
            arr = arr[~np.isnan(arr)]
        if not arr.size:
            return
        if self._buf is not None:
            if self._count + arr.size <= self.limit:
                self._append(arr)
                return
            self._spill()
        self._fold(arr)

    def merge(self, other: BoundedSample) -> None:
        """Add every value of `other` (exact or not) to this sample; `other` is left unchanged."""
        if other._buf is not None:
            self.add(other._buf[: other._count].copy())
            return
        if other.accuracy != self.accuracy:
            raise ValueError(
                f"cannot merge a histogram of accuracy {other.accuracy} into one of accuracy {self.accuracy}: "
                "use the same accuracy for every sample of a metric"
            )
        if other._count == 0:
            return
        if self._buf is not None:
            self._spill()
        if other is self:
            other = self._snapshot()
        self._pos.add_counts(other._pos.offset, other._pos.counts)
        self._neg.add_counts(other._neg.offset, other._neg.counts)
        self._zeros += other._zeros
        self._pos_inf += other._pos_inf
        self._neg_inf += other._neg_inf
        self._combine(other._count, other._sum, other._m2, other._min, other._max)

    def values(self) -> np.ndarray:
        """The values, in the order added (exact samples only: ValueError once approximate)."""
        if self._buf is None:
            raise ValueError(
                f"this sample holds {self._count} values in a histogram (more than its limit of {self.limit}): "
                "the values themselves are gone; use distribution() or quantile()"
            )
        return self._buf[: self._count].copy()

    def quantile(self, q: float) -> float | None:
        """The q-th percentile (0 ≤ q ≤ 100, numpy's default definition) of the unscaled values; None if empty."""
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"q must be in [0, 100], got {q}")
        if self._count == 0:
            return None
        if self._buf is not None:
            return float(np.percentile(self._buf[: self._count], q))
        return float(self._percentiles(np.array([q]))[0])

    def distribution(self, scale: float = 1.0) -> Distribution:
        """`distribution.distribution` of the values × `scale` (exact), or its histogram estimate."""
        if self._buf is not None:
            return distribution(self._buf[: self._count], scale)
        return self._approximate(scale, with_ci=False)[0]

    def distribution_with_ci(self, scale: float = 1.0) -> tuple[Distribution, dict[str, QuantileCI | None]]:
        """`distribution.distribution_with_ci` of the values × `scale` (exact), or its histogram estimate."""
        if self._buf is not None:
            return distribution_with_ci(self._buf[: self._count], scale)
        return self._approximate(scale, with_ci=True)

    # exact mode

    def _append(self, arr: np.ndarray) -> None:
        """Copy `arr` after the kept values, doubling the buffer (up to the limit) when full."""
        assert self._buf is not None
        end = self._count + arr.size
        if end > self._buf.size:
            capacity = min(self.limit, max(end, 2 * self._buf.size, _MIN_CAPACITY))
            grown = np.empty(capacity)
            grown[: self._count] = self._buf[: self._count]
            self._buf = grown
        self._buf[self._count : end] = arr
        self._count = end

    def _spill(self) -> None:
        """Switch to the histogram: fold the kept values in and drop the buffer."""
        assert self._buf is not None
        kept, self._buf, self._count = self._buf[: self._count], None, 0
        if kept.size:
            self._fold(kept)

    # approximate mode

    def _fold(self, arr: np.ndarray) -> None:
        """Bucket a NaN-free chunk and combine its count, sum, M2, min and max into the running ones."""
        lo, hi = float(arr.min()), float(arr.max())
        if lo > 0.0 and hi < math.inf:
            self._pos.add_indices(self._indices(arr))
        else:
            self._pos.add_indices(self._indices(arr[(arr > 0.0) & (arr < math.inf)]))
            self._neg.add_indices(self._indices(-arr[(arr < 0.0) & (arr > -math.inf)]))
            self._zeros += int(np.count_nonzero(arr == 0.0))
            self._pos_inf += int(np.count_nonzero(arr == math.inf))
            self._neg_inf += int(np.count_nonzero(arr == -math.inf))
        with np.errstate(invalid="ignore", over="ignore"):
            total = float(arr.sum())
            mean = total / arr.size
            m2 = float(np.square(arr - mean).sum())
        self._combine(int(arr.size), total, m2, lo, hi)

    def _indices(self, magnitudes: np.ndarray) -> np.ndarray:
        """Bucket index ⌈ln x / ln γ⌉ of every x > 0 (finite)."""
        return np.ceil(np.log(magnitudes) / self._log_gamma).astype(np.int64)

    def _combine(self, n: int, total: float, m2: float, lo: float, hi: float) -> None:
        """Chan et al.'s parallel update of (count, sum, M2) with another part's, and min/max."""
        na = self._count
        if na == 0:
            self._sum, self._m2 = total, m2
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                delta = np.float64(total / n) - np.float64(self._sum / na)
                self._m2 = float(self._m2 + m2 + delta * delta * (na * n / (na + n)))
            self._sum += total
        self._count = na + n
        self._min, self._max = min(self._min, lo), max(self._max, hi)

    def _snapshot(self) -> BoundedSample:
        out = BoundedSample(self.limit, self.accuracy)
        out._buf, out._pos, out._neg = None, self._pos.copy(), self._neg.copy()
        out._zeros, out._pos_inf, out._neg_inf = self._zeros, self._pos_inf, self._neg_inf
        out._count, out._sum, out._m2, out._min, out._max = self._count, self._sum, self._m2, self._min, self._max
        return out

    def _at_ranks(self, ranks: np.ndarray) -> np.ndarray:
        """The value at each 0-based rank of the sorted sample: its bucket's representative, in [min, max]."""
        factor = 2.0 / (math.exp(self._log_gamma) + 1.0)
        pos, neg = self._pos, self._neg
        pos_rep = factor * np.exp((pos.offset + np.arange(pos.counts.size)) * self._log_gamma)
        neg_rep = -factor * np.exp((neg.offset + np.arange(neg.counts.size)) * self._log_gamma)
        counts = np.concatenate(([self._neg_inf], neg.counts[::-1], [self._zeros], pos.counts, [self._pos_inf]))
        reps = np.concatenate(([-math.inf], neg_rep[::-1], [0.0], pos_rep, [math.inf]))
        cum = np.cumsum(counts)
        found = reps[np.searchsorted(cum, ranks, side="right")]
        found = np.clip(found, self._min, self._max)
        found[ranks == 0] = self._min
        found[ranks == self._count - 1] = self._max
        return found

    def _percentiles(self, qs: np.ndarray) -> np.ndarray:
        """numpy's default (linear) percentiles from the values at the neighbouring ranks."""
        h = (self._count - 1) * (qs / 100.0)
        below = np.floor(h).astype(np.int64)
        above = np.minimum(below + 1, self._count - 1)
        values = self._at_ranks(np.concatenate((below, above)))
        a, b = values[: below.size], values[below.size :]
        frac = h - below
        with np.errstate(invalid="ignore"):
            return np.where((b == a) | (frac == 0.0), a, a + (b - a) * frac)

    def _approximate(
        self, scale: float, with_ci: bool
    ) -> tuple[Distribution, dict[str, QuantileCI | None]]:
        """The Distribution (and CIs) from the histogram, rounded and guarded like `distribution._distribution`."""
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        n = self._count
        ci: dict[str, QuantileCI | None] = {name: None for name in CI_QUANTILES}
        if n == 0:
            return Distribution(), ci
        mean = self._sum / n
        stdev = math.sqrt(self._m2 / (n - 1)) if n > 1 and self._min != self._max else 0.0
        quantiles = self._percentiles(np.array(QUANTILES))
        stats = _scaled(np.concatenate(([self._min, mean, stdev, self._max], quantiles)), scale)
        lo, mean, stdev, hi = (float(v) for v in stats[:4])
        p50, p90, p95, p99, p999 = (float(v) for v in np.clip(np.maximum.accumulate(stats[4:]), lo, hi))
        dist = Distribution(
            count=n, mean=min(max(mean, lo), hi), stdev=stdev, min=lo,
            p50=p50, p90=p90, p95=p95, p99=p99, p999=p999, max=hi,
        )
        if not with_ci:
            return dist, ci
        for name, q in CI_QUANTILES.items():
            ranks = order_statistic_ranks(n, q)
            if ranks is None:
                continue
            low, high = (float(v) for v in _scaled(self._at_ranks(np.array([ranks[0] - 1, ranks[1] - 1])), scale))
            estimate = getattr(dist, name)
            ci[name] = QuantileCI(low=min(low, estimate), high=max(high, estimate), coverage=ranks[2])
        return dist, ci
