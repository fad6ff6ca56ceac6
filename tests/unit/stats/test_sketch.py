"""BoundedSample: bit-for-bit `distribution.distribution` while exact, within α of the true order statistics beyond."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokspeed.stats.distribution import (
    CI_QUANTILES,
    QUANTILES,
    Distribution,
    distribution,
    distribution_with_ci,
    order_statistic_ranks,
)
from tokspeed.stats.sketch import MAX_BUCKETS, RELATIVE_ACCURACY, BoundedSample

ALPHA = RELATIVE_ACCURACY
NAMES = ("p50", "p90", "p95", "p99", "p999")


def _fed(values: np.ndarray, limit: int, pieces: int = 7, seed: int = 0) -> BoundedSample:
    """A sample fed `values` in `pieces` chunks of random sizes."""
    s = BoundedSample(limit=limit)
    cuts = np.sort(np.random.default_rng(seed).integers(0, values.size, pieces - 1))
    for chunk in np.split(values, cuts):
        s.add(chunk)
    return s


def _rank_tolerance(sorted_values: np.ndarray, q: float) -> tuple[float, float]:
    """numpy's percentile at q and the most an α-accurate estimate may differ from it."""
    n = sorted_values.size
    h = (n - 1) * q / 100
    lo, hi = sorted_values[math.floor(h)], sorted_values[min(math.floor(h) + 1, n - 1)]
    return float(np.percentile(sorted_values, q)), ALPHA * max(abs(lo), abs(hi)) * (1 + 1e-9) + 1e-300


def _assert_close_to_exact(s: BoundedSample, values: np.ndarray) -> None:
    """Count/min/max exact, mean/stdev to float rounding, percentiles within α of np.percentile's ranks."""
    assert not s.exact
    srt = np.sort(values)
    d = s.distribution()
    assert d.count == values.size
    assert d.min == srt[0] and d.max == srt[-1]
    assert d.mean == pytest.approx(float(values.mean()), rel=1e-9, abs=1e-9 * float(np.abs(values).max()))
    assert d.stdev == pytest.approx(float(values.std(ddof=1)), rel=1e-9)
    for name, q in zip(NAMES, QUANTILES, strict=True):
        true, tol = _rank_tolerance(srt, q)
        assert abs(getattr(d, name) - true) <= tol, (name, getattr(d, name), true)
        estimate = s.quantile(q)
        assert estimate is not None and abs(estimate - true) <= tol


# exact mode


@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e-3, 0.37])
def test_exact_mode_is_bit_for_bit_stats_distribution(scale: float) -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(15, 1.5, 20_000).round()
    values[rng.integers(0, values.size, 50)] = np.nan
    s = _fed(values, limit=20_000)
    assert s.exact and s.count == int((~np.isnan(values)).sum())
    assert s.distribution(scale) == distribution(values, scale)
    assert s.distribution_with_ci(scale) == distribution_with_ci(values, scale)
    np.testing.assert_array_equal(s.values(), values[~np.isnan(values)])


def test_exact_mode_value_by_value_and_ints() -> None:
    values = np.random.default_rng(2).integers(-5_000, 10**9, 3_000)
    s = BoundedSample(limit=3_000)
    for v in values:
        s.add(np.array([v]))
    assert s.exact and s.distribution(1e-6) == distribution(values, 1e-6)
    assert s.distribution_with_ci() == distribution_with_ci(values)


def test_empty_and_all_nan() -> None:
    s = BoundedSample()
    s.add(np.array([np.nan, np.nan]))
    s.add(np.empty(0))
    assert s.count == 0 and s.exact
    assert s.distribution() == Distribution()
    assert s.distribution_with_ci()[1] == {name: None for name in CI_QUANTILES}
    assert s.quantile(50) is None


def test_values_is_a_copy() -> None:
    s = BoundedSample()
    s.add(np.array([3.0, 1.0, 2.0]))
    s.values()[:] = 0
    np.testing.assert_array_equal(s.values(), [3.0, 1.0, 2.0])


# the switch


def test_spills_at_limit_plus_one() -> None:
    s = BoundedSample(limit=100)
    s.add(np.arange(1.0, 61.0))
    s.add(np.arange(61.0, 101.0))
    assert s.exact and s.count == 100
    assert s.distribution() == distribution(np.arange(1.0, 101.0))
    s.add(np.array([np.nan, 101.0]))
    assert not s.exact and s.count == 101
    assert s.buckets > 0
    _assert_close_to_exact(s, np.arange(1.0, 102.0))


def test_single_chunk_past_the_limit_spills() -> None:
    s = BoundedSample(limit=10)
    s.add(np.arange(1.0, 12.0))
    assert not s.exact and s.count == 11


def test_values_raises_once_approximate() -> None:
    s = BoundedSample(limit=4)
    s.add(np.arange(5.0))
    with pytest.raises(ValueError, match="histogram"):
        s.values()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        BoundedSample(accuracy=0.0)
    with pytest.raises(ValueError):
        BoundedSample(limit=-1)
    s = BoundedSample(limit=1)
    s.add(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="scale"):
        s.distribution(0.0)
    with pytest.raises(ValueError):
        s.quantile(101)


# approximate mode


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: rng.lognormal(14, 1.2, 200_000),
        lambda rng: rng.uniform(1e3, 1e9, 200_000),
        lambda rng: rng.integers(1, 10**6, 200_000).astype(np.float64),
        lambda rng: np.concatenate((rng.normal(0, 1e6, 150_000), np.zeros(50_000))),  # negatives and zeros
        lambda rng: np.concatenate((np.zeros(100_000), rng.exponential(1e5, 100_000))),  # gaps of 0
        lambda rng: -rng.lognormal(10, 1, 200_000),  # all negative
    ],
    ids=["lognormal", "uniform", "integers", "signed-with-zeros", "half-zeros", "negative"],
)
def test_approximate_percentiles_within_alpha(make) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(3)
    values = rng.permutation(make(rng))
    _assert_close_to_exact(_fed(values, limit=10_000, pieces=40), values)


def test_constant_values_are_exact() -> None:
    s = _fed(np.full(50_000, 1_234_567.0), limit=1_000)
    d = s.distribution(1e-6)
    assert not s.exact
    assert d.stdev == 0.0
    assert d.mean == d.min == d.p50 == d.p999 == d.max == 1.234567
    _, ci = s.distribution_with_ci(1e-6)
    assert all(c is not None and c.low == c.high == 1.234567 for c in ci.values())


def test_scaling_follows_stats_rounding_rules() -> None:
    values = np.concatenate((np.full(1000, 1_500_000.0), np.full(1000, 2_500_000.0)))
    s = _fed(values, limit=100)
    d = s.distribution(1e-6)
    assert d.min == 1.5 and d.max == 2.5 and d.mean == 2.0  # divided by 1e6, not multiplied by 1e-6
    stats = [float(v or 0.0) for v in (d.min, d.p50, d.p90, d.p95, d.p99, d.p999, d.max)]
    assert stats == sorted(stats) and d.p50 == pytest.approx(2.0, rel=ALPHA)


def test_ci_brackets_estimate_and_is_within_alpha_of_exact_bounds() -> None:
    rng = np.random.default_rng(4)
    values = rng.lognormal(16, 0.8, 300_000)
    s = _fed(values, limit=5_000, pieces=30)
    dist, ci = s.distribution_with_ci(1e-6)
    _, exact_ci = distribution_with_ci(values, 1e-6)
    srt = np.sort(values)
    for name, q in CI_QUANTILES.items():
        c, e = ci[name], exact_ci[name]
        assert c is not None and e is not None
        estimate = getattr(dist, name)
        assert c.low <= estimate <= c.high
        low_rank, high_rank, coverage = order_statistic_ranks(values.size, q)  # type: ignore[misc]
        assert c.coverage == e.coverage == coverage
        assert c.low == pytest.approx(min(srt[low_rank - 1] / 1e6, estimate), rel=ALPHA * 1.000001)
        assert c.high == pytest.approx(max(srt[high_rank - 1] / 1e6, estimate), rel=ALPHA * 1.000001)
        assert c.low == pytest.approx(e.low, rel=2.0001 * ALPHA)
        assert c.high == pytest.approx(e.high, rel=2.0001 * ALPHA)


def test_ci_none_when_too_few() -> None:
    s = _fed(np.arange(1.0, 101.0), limit=10)
    _, ci = s.distribution_with_ci()
    assert ci["p50"] is not None and ci["p99"] is None and ci["p999"] is None


def test_infinite_values_are_counted_at_the_ends() -> None:
    values = np.concatenate((np.arange(1.0, 1001.0), [np.inf, -np.inf]))
    s = _fed(values, limit=10)
    assert s.count == 1002
    assert s.quantile(0) == -np.inf and s.quantile(100) == np.inf
    assert s.quantile(50) == pytest.approx(np.percentile(values, 50), rel=ALPHA)


# merging


def _split3(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, c = np.split(values, [values.size // 5, values.size // 2])
    return a, b, c


def _stats_equal(x: BoundedSample, y: BoundedSample) -> None:
    """Same histogram: percentiles, count, min, max identical; mean and stdev to float rounding."""
    dx, dy = x.distribution(), y.distribution()
    for name in ("count", "min", "max", *NAMES):
        assert getattr(dx, name) == getattr(dy, name), name
    assert dx.mean == pytest.approx(dy.mean, rel=1e-12)
    assert dx.stdev == pytest.approx(dy.stdev, rel=1e-9)


def test_merge_exact_and_exact_stays_exact_while_it_fits() -> None:
    values = np.random.default_rng(5).lognormal(10, 1, 1_000)
    a, b = BoundedSample(limit=1_000), BoundedSample(limit=1_000)
    a.add(values[:400])
    b.add(values[400:])
    a.merge(b)
    assert a.exact and b.exact and b.count == 600
    assert a.distribution_with_ci() == distribution_with_ci(values)
    c = BoundedSample(limit=1_000)
    c.add(np.array([1.0]))
    a.merge(c)
    assert not a.exact and a.count == 1_001


@pytest.mark.parametrize("limits", [(50_000, 50_000), (50_000, 1_000), (1_000, 50_000), (1_000, 1_000)])
def test_merge_any_combination_equals_one_sample_fed_everything(limits: tuple[int, int]) -> None:
    rng = np.random.default_rng(6)
    values = np.concatenate((rng.lognormal(12, 2, 30_000), -rng.lognormal(8, 1, 5_000), np.zeros(5_000)))
    values = rng.permutation(values)
    whole = _fed(values, limit=1_000)
    a, b = BoundedSample(limit=limits[0]), BoundedSample(limit=limits[1])
    a.add(values[:20_000])
    b.add(values[20_000:])
    assert (a.exact, b.exact) == (limits[0] >= 20_000, limits[1] >= 20_000)
    a.merge(b)
    if limits[0] >= values.size and limits[1] >= values.size - 20_000:
        assert a.exact and a.distribution_with_ci() == distribution_with_ci(values)
        return
    assert not a.exact
    _stats_equal(a, whole)
    _assert_close_to_exact(a, values)


def test_merge_of_two_exact_samples_that_overflow_spills() -> None:
    values = np.arange(1.0, 3001.0)
    a, b = BoundedSample(limit=2_000), BoundedSample(limit=2_000)
    a.add(values[:1_500])
    b.add(values[1_500:])
    a.merge(b)
    assert not a.exact and b.exact
    _assert_close_to_exact(a, values)


def test_merge_is_associative() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(13, 1.5, 60_000)
    parts = _split3(values)

    def sample(v: np.ndarray) -> BoundedSample:
        s = BoundedSample(limit=5_000)
        s.add(v)
        return s

    left = sample(parts[0])
    left.merge(sample(parts[1]))
    left.merge(sample(parts[2]))
    right_tail = sample(parts[1])
    right_tail.merge(sample(parts[2]))
    right = sample(parts[0])
    right.merge(right_tail)
    _stats_equal(left, right)
    _stats_equal(left, _fed(values, limit=5_000))


def test_merge_with_itself_doubles() -> None:
    values = np.arange(1.0, 2001.0)
    s = _fed(values, limit=100)
    s.merge(s)
    _assert_close_to_exact(s, np.concatenate((values, values)))


def test_merge_leaves_other_unchanged_and_checks_accuracy() -> None:
    a, b = BoundedSample(limit=10), BoundedSample(limit=10)
    b.add(np.arange(1.0, 100.0))
    before = b.distribution()
    a.merge(b)
    assert b.distribution() == before and a.count == 99
    c = BoundedSample(limit=10, accuracy=1e-3)
    c.add(np.arange(1.0, 100.0))
    with pytest.raises(ValueError, match="accuracy"):
        a.merge(c)


# memory and speed


def test_memory_is_bounded_by_the_value_range_not_the_count() -> None:
    rng = np.random.default_rng(8)
    s = BoundedSample()
    sizes = []
    for i in range(100):  # 10^7 values in chunks of 10^5
        s.add(10 ** rng.uniform(3, 10, 100_000))  # log-uniform in [1e3, 1e10]: reaches both ends at once
        if i in (9, 99):
            sizes.append(s.buckets)
    assert s.count == 10**7 and not s.exact
    log_gamma = math.log((1 + ALPHA) / (1 - ALPHA))
    assert sizes[1] <= math.log(1e7) / log_gamma + 2  # 80,600 buckets: 645 KB
    assert sizes[1] * 8 < 1_000_000
    assert sizes[1] - sizes[0] <= 2  # ten times the values, the same buckets


def test_extreme_range_is_capped() -> None:
    values = np.concatenate((np.full(100, 1e-300), np.full(100, 1e300), np.full(100, 1e250), [5.0]))
    s = _fed(values, limit=10)
    assert s.buckets <= MAX_BUCKETS
    d = s.distribution()
    assert d.count == 301 and d.min == 1e-300 and d.max == 1e300
    assert d.p50 == pytest.approx(1e250, rel=ALPHA)  # within e^210 of the largest: still α-accurate
    assert (s.quantile(100 * 99 / 300) or 0.0) <= 1e250 * (1 + ALPHA)  # the smallest magnitudes are folded upwards
