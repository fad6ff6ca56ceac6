"""The tests compare uses (scipy's, on our inputs); the request bootstrap's exactness, determinism and p-value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokspeed.stats.significance import (
    CORRECTION,
    ClusteredSample,
    adjust,
    bootstrap_quantiles,
    bootstrap_ratio,
    fisher_p,
    ratio_interval,
    resample_counts,
    thin,
    welch_log_ratio,
)


def test_welch_log_ratio_is_scipys_welch_on_the_logs() -> None:
    from scipy import stats

    xs, ys = [100.0, 104.0, 98.0], [90.0, 93.0, 88.0, 91.0]
    result = welch_log_ratio(xs, ys, 0.9)
    expected = stats.ttest_ind(np.log(ys), np.log(xs), equal_var=False)
    assert result is not None and result.p_value == pytest.approx(expected.pvalue, rel=1e-12)
    se = math.sqrt(np.var(np.log(xs), ddof=1) / 3 + np.var(np.log(ys), ddof=1) / 4)
    t = stats.t.ppf(0.975, expected.df)
    assert result.ci == pytest.approx((0.9 * math.exp(-t * se), 0.9 * math.exp(t * se)))
    assert welch_log_ratio([1.0], [2.0, 3.0], 2.0) is None
    flat = welch_log_ratio([5.0, 5.0], [5.0, 5.0], 1.0)
    assert flat is not None and flat.p_value == 1.0 and flat.ci == (1.0, 1.0)


def test_fisher_and_the_adjustment_are_scipys() -> None:
    from scipy import stats

    assert fisher_p(10, 100, 20, 100) == pytest.approx(stats.fisher_exact([[10, 90], [20, 80]]).pvalue)
    assert fisher_p(0, 0, 1, 2) is None
    assert adjust([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.04, 0.04])  # BH by hand: 3·0.01, 0.04, 3/2·0.03 capped by 0.04
    assert CORRECTION == "benjamini-hochberg"


def test_bootstrap_p_value_agrees_with_the_interval() -> None:
    """p < 0.05 exactly when the 95% percentile interval excludes 1 (same draws, same scale)."""
    rng = np.random.default_rng(4)
    for shift in (0.0, 0.5, 1.0, 1.5, 3.0):
        base = bootstrap_quantiles(ClusteredSample.of(rng.normal(40, 5, 200)), (50.0,), 2000, np.random.default_rng(1))
        other = bootstrap_quantiles(ClusteredSample.of(rng.normal(40 + shift, 5, 200)), (50.0,), 2000, np.random.default_rng(2))
        test = bootstrap_ratio(base[:, 0], other[:, 0])
        assert test is not None
        excludes = not test.ci[0] <= 1.0 <= test.ci[1]
        assert excludes == (test.p_value < 0.05) or abs(test.p_value - 0.05) < 0.005, (shift, test)
        assert test.p_value >= 2 / 2001


def test_bootstrap_is_deterministic_per_seed() -> None:
    sample = ClusteredSample.of(np.random.default_rng(0).exponential(10, 300))
    a = bootstrap_quantiles(sample, (50.0, 99.0), 500, np.random.default_rng(7))
    b = bootstrap_quantiles(sample, (50.0, 99.0), 500, np.random.default_rng(7))
    c = bootstrap_quantiles(sample, (50.0, 99.0), 500, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_bootstrap_quantiles_equal_numpy_on_the_expanded_resample() -> None:
    """Each row is exactly np.percentile of the resample it drew (units carry all their values)."""
    rng = np.random.default_rng(1)
    values = rng.normal(10, 2, 60)
    owner = np.repeat(np.arange(12), 5)  # 12 requests of 5 tokens each
    sample = ClusteredSample.of(values, owner)
    got = bootstrap_quantiles(sample, (50.0, 90.0, 99.0), 50, np.random.default_rng(5))
    counts = resample_counts(sample.units, 50, np.random.default_rng(5))
    for row, c in zip(got, counts):
        expanded = np.repeat(sample.values, c[sample.owner])
        assert row == pytest.approx(np.percentile(expanded, (50, 90, 99)), rel=1e-12)


def test_resample_counts_draw_every_unit_count_times() -> None:
    counts = resample_counts(7, 4000, np.random.default_rng(0))
    assert counts.shape == (4000, 7) and np.all(counts.sum(axis=1) == 7)
    assert counts.mean() == pytest.approx(1.0, abs=0.02) and counts.var() == pytest.approx(6 / 7, abs=0.05)


def test_thinning_keeps_owners_and_bounds_size() -> None:
    values = np.arange(1000.0)
    kept, owner = thin(values, values.astype(np.int64) // 10, 200, np.random.default_rng(0))
    assert kept.size == 200 and owner is not None and np.array_equal(owner, kept.astype(np.int64) // 10)
    sample = ClusteredSample.of(kept, owner)
    assert sample.owner.max() == sample.units - 1 and np.all(np.diff(sample.values) >= 0)
    same, none = thin(values[:50], None, 200, np.random.default_rng(0))
    assert same.size == 50 and none is None


def test_ratio_interval_covers_a_known_ratio() -> None:
    rng = np.random.default_rng(2)
    base = ClusteredSample.of(rng.normal(40, 2, 400))
    other = ClusteredSample.of(rng.normal(20, 1, 400))
    b = bootstrap_quantiles(base, (50.0,), 2000, np.random.default_rng(1))
    o = bootstrap_quantiles(other, (50.0,), 2000, np.random.default_rng(2))
    interval = ratio_interval(b[:, 0], o[:, 0])
    assert interval is not None and interval[0] < 0.5 < interval[1] and interval[1] - interval[0] < 0.03
