"""Prometheus histograms read from a scrape: deltas between scrapes, sums over a window, quantiles.

A server's latency histogram is cumulative since the server started: `_bucket{le=B}`
counts observations <= B, `+Inf` counts all, `_sum` adds them up. The observations made
between two scrapes are the bucket-wise difference (`delta`); a window's are the sum of
its deltas (`merge`). A count that went down means the server restarted (a counter
reset): as Prometheus' `increase()` does, the newer scrape is then the delta (everything
since the restart). A changed bucket layout is treated the same way.

`quantile` is Prometheus' `histogram_quantile`: find the bucket holding the rank q × N and
interpolate linearly inside it (lower edge 0 for the first bucket); a rank in the `+Inf`
bucket is the largest finite upper bound. So a server-side quantile is only as fine as the
server's buckets: the true value lies in the same bucket, not necessarily near the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts by upper bound (ascending, the last `inf`), plus `_sum` and `_count`."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = 0.0
    count: float = 0.0

    @property
    def total(self) -> float:
        """Observations counted (the `+Inf` bucket, else `_count`)."""
        if self.bounds and math.isinf(self.bounds[-1]):
            return self.counts[-1]
        return self.count

    @property
    def mean(self) -> float | None:
        """`_sum / _count` (exact, not limited by the buckets); None without observations."""
        return self.sum / self.count if self.count > 0 else None


def from_buckets(buckets: dict[float, float], total_sum: float, count: float) -> Histogram:
    """A Histogram from {le: cumulative count} (any order)."""
    bounds = tuple(sorted(buckets))
    return Histogram(bounds=bounds, counts=tuple(buckets[b] for b in bounds), sum=total_sum, count=count)


def is_reset(new: Histogram, old: Histogram) -> bool:
    """Whether `new` cannot follow `old` without a restart: a count went down or the buckets changed."""
    if new.bounds != old.bounds or new.count < old.count:
        return True
    return any(n < o for n, o in zip(new.counts, old.counts, strict=True))


def delta(new: Histogram, old: Histogram | None) -> Histogram:
    """The observations made between the scrape `old` and the scrape `new` (after a reset: `new` itself)."""
    if old is None or is_reset(new, old):
        return new
    return Histogram(
        bounds=new.bounds,
        counts=tuple(n - o for n, o in zip(new.counts, old.counts, strict=True)),
        sum=max(new.sum - old.sum, 0.0),
        count=new.count - old.count,
    )


def merge(parts: Iterable[Histogram]) -> Histogram | None:
    """The sum of histograms that share the newest one's bucket layout (others are left out); None if none."""
    items = list(parts)
    if not items:
        return None
    bounds = items[-1].bounds
    same = [h for h in items if h.bounds == bounds]
    return Histogram(
        bounds=bounds,
        counts=tuple(sum(h.counts[i] for h in same) for i in range(len(bounds))),
        sum=sum(h.sum for h in same),
        count=sum(h.count for h in same),
    )


def quantile(q: float, h: Histogram | None) -> float | None:
    """Prometheus' histogram_quantile(q, h): linear interpolation inside the bucket that holds rank q × N.

    None when there are no observations or no `+Inf` bucket (Prometheus: NaN).
    """
    if h is None or not h.bounds or not math.isinf(h.bounds[-1]):
        return None
    counts = _monotonic(h.counts)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(h.bounds) - 1:  # the +Inf bucket: the highest finite bound
        return h.bounds[-2] if len(h.bounds) >= 2 else None
    upper = h.bounds[b]
    if b == 0 and upper <= 0:
        return upper
    lower = h.bounds[b - 1] if b > 0 else 0.0
    below = counts[b - 1] if b > 0 else 0.0
    inside = counts[b] - below
    if inside <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / inside


def _monotonic(counts: tuple[float, ...]) -> list[float]:
    """Cumulative counts made non-decreasing (as Prometheus does: buckets scraped at slightly different moments)."""
    out: list[float] = []
    for c in counts:
        out.append(max(c, out[-1]) if out else c)
    return out


def bucket_of(value: float, bounds: tuple[float, ...]) -> tuple[float, float]:
    """The bucket (lower, upper] that holds `value` under `bounds` (for checking an estimate's resolution)."""
    lower = 0.0
    for upper in bounds:
        if value <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf
