"""Significance tests against hand-computed and published values; the bootstrap's exactness and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokspeed.metrics.significance import (
    ClusteredSample,
    average_ranks,
    bootstrap_quantiles,
    mann_whitney_u,
    ratio_interval,
    regularized_beta,
    resample_counts,
    t_two_sided_p,
    thin,
    two_proportions,
    welch_t,
)


def test_average_ranks_share_ties() -> None:
    ranks, tie_term = average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0]))
    assert ranks.tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]  # ranks 3, 4, 5 averaged
    assert tie_term == 3**3 - 3


def test_mann_whitney_matches_the_published_example() -> None:
    # scipy.stats.mannwhitneyu docs: males vs females, U1 = 17, asymptotic p = 0.11134688653314041
    result = mann_whitney_u(np.array([19, 22, 16, 29, 24.0]), np.array([20, 11, 17, 12.0]))
    assert result is not None
    assert result.statistic == 17.0
    assert result.p_value == pytest.approx(0.11134688653314041, rel=1e-12)


def test_mann_whitney_complete_separation_by_hand() -> None:
    # U = 0; mu = 12.5, sigma^2 = 25 * 11 / 12; z = (12.5 - 0.5) / sigma
    result = mann_whitney_u(np.arange(1.0, 6.0), np.arange(6.0, 11.0))
    assert result is not None and result.statistic == 0.0
    z = 12.0 / math.sqrt(25 * 11 / 12)
    assert result.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert result.p_value == pytest.approx(0.01219, abs=5e-5)  # z = 2.507


def test_mann_whitney_tie_correction_by_hand() -> None:
    # x = [1, 2, 2], y = [2, 3]: pooled ranks 1, 3, 3, 3, 5; R_x = 7, U_x = 1
    # sigma^2 = 6/12 * (6 - (27 - 3) / 20) = 2.4; z = (|1 - 3| - 0.5) / sqrt(2.4)
    result = mann_whitney_u(np.array([1.0, 2.0, 2.0]), np.array([2.0, 3.0]))
    assert result is not None and result.statistic == 1.0
    assert result.p_value == pytest.approx(math.erfc(1.5 / math.sqrt(2.4) / math.sqrt(2)), rel=1e-12)


def test_mann_whitney_edge_cases() -> None:
    assert mann_whitney_u(np.array([]), np.array([1.0])) is None
    same = mann_whitney_u(np.array([5.0, 5.0]), np.array([5.0, 5.0, 5.0]))
    assert same is not None and same.p_value == 1.0
    with_nan = mann_whitney_u(np.array([1.0, np.nan, 2.0]), np.array([3.0, 4.0]))
    assert with_nan is not None and with_nan.statistic == 0.0


def test_mann_whitney_is_symmetric() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 1, 40), rng.normal(0.3, 1, 50)
    a, b = mann_whitney_u(x, y), mann_whitney_u(y, x)
    assert a is not None and b is not None
    assert a.p_value == pytest.approx(b.p_value) and a.statistic + b.statistic == 40 * 50


def test_student_t_and_incomplete_beta_known_values() -> None:
    assert regularized_beta(0.5, 2, 3) == pytest.approx(11 / 16, rel=1e-12)
    assert t_two_sided_p(2.228, 10) == pytest.approx(0.05, abs=2e-4)  # the t table's 95% point
    assert t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=2e-4)
    assert t_two_sided_p(0.0, 7) == pytest.approx(1.0)
    assert t_two_sided_p(1.959964, math.inf) == pytest.approx(0.05, abs=1e-6)


def test_welch_t_by_hand() -> None:
    # means 2 and 5, variances 1 and 1, n = 3: t = 3 / sqrt(2/3), df = 4
    result = welch_t(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
    assert result is not None
    assert result.t == pytest.approx(3 / math.sqrt(2 / 3)) and result.df == pytest.approx(4.0)
    assert result.p_value == pytest.approx(0.021311641128756727, rel=1e-9)  # scipy ttest_ind(equal_var=False)
    assert welch_t(np.array([1.0]), np.array([2.0, 3.0])) is None


def test_two_proportions_by_hand() -> None:
    result = two_proportions(10, 100, 20, 100)
    assert result is not None
    z = 0.1 / math.sqrt(0.15 * 0.85 * 0.02)
    assert result.statistic == pytest.approx(z) and result.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))
    none = two_proportions(0, 50, 0, 60)
    assert none is not None and none.p_value == 1.0


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
