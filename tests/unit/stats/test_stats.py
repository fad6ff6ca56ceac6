"""Distribution statistics: exact small cases and properties against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokspeed.stats.distribution import STAT_NAMES, Distribution, distribution

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


def test_empty_is_count_zero_and_all_none() -> None:
    d = distribution([])
    assert d == Distribution()
    assert d.count == 0
    assert all(d.stat(s) is None for s in STAT_NAMES if s != "count")


def test_single_value_has_zero_stdev() -> None:
    d = distribution([7])
    assert (d.count, d.mean, d.stdev, d.min, d.p50, d.p999, d.max) == (1, 7.0, 0.0, 7.0, 7.0, 7.0, 7.0)


def test_exact_small_sample() -> None:
    d = distribution([1, 2, 3, 4, 5])
    assert d.count == 5
    assert d.mean == 3.0
    assert d.stdev == math.sqrt(2.5)  # sample stdev, ddof=1
    assert (d.min, d.p50, d.max) == (1.0, 3.0, 5.0)
    assert d.p90 == pytest.approx(4.6)  # linear interpolation: 1 + 0.9 * 4
    assert d.p999 == pytest.approx(4.996)


def test_scale_turns_ns_into_exact_ms() -> None:
    d = distribution([1_500_000, 2_500_000], scale=1e-6)
    assert (d.min, d.mean, d.max, d.p50) == (1.5, 2.0, 2.5, 2.0)
    assert d.stdev == pytest.approx(math.sqrt(0.5))


def test_nan_means_not_applicable_and_is_dropped() -> None:
    d = distribution(np.array([np.nan, 1.0, np.nan, 3.0]))
    assert (d.count, d.mean) == (2, 2.0)
    assert distribution([np.nan]).count == 0


def test_constant_values_give_exact_zero_stdev_and_mean_inside_range() -> None:
    d = distribution([0.1, 0.1, 0.1])
    assert d.stdev == 0.0
    assert d.mean == 0.1


def test_does_not_reorder_the_callers_array() -> None:
    values = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    distribution(values)
    assert values.tolist() == [5.0, 1.0, 4.0, 2.0, 3.0]


def test_rejects_non_positive_scale() -> None:
    with pytest.raises(ValueError):
        distribution([1.0], scale=0)


def test_stat_lookup() -> None:
    d = distribution([1, 2])
    assert d.stat("count") == 2.0
    with pytest.raises(KeyError):
        d.stat("p42")


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=200))
def test_matches_numpy(values: list[float]) -> None:
    d = distribution(values)
    arr = np.array(values)
    expected = np.percentile(arr, [50, 90, 95, 99, 99.9])
    got = [d.p50, d.p90, d.p95, d.p99, d.p999]
    assert got == pytest.approx(expected.tolist(), rel=1e-12, abs=1e-6)
    assert d.mean == pytest.approx(float(arr.mean()), rel=1e-9, abs=1e-6)
    assert (d.min, d.max, d.count) == (float(arr.min()), float(arr.max()), len(values))
    if len(values) > 1:
        assert d.stdev == pytest.approx(float(arr.std(ddof=1)), rel=1e-9, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=200), st.sampled_from([1.0, 1e-6, 1e-3, 2.5]))
def test_order_invariants(values: list[float], scale: float) -> None:
    d = distribution(values, scale=scale)
    chain = [d.min, d.p50, d.p90, d.p95, d.p99, d.p999, d.max]
    assert all(a <= b for a, b in zip(chain, chain[1:]))  # type: ignore[operator]
    assert d.min <= d.mean <= d.max  # type: ignore[operator]
    assert d.stdev is not None and d.stdev >= 0.0
