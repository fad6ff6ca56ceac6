"""Open-loop arrival schedules: exact rates, seeded, and the right distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokspeed.load.plan import NS, LoadPlan, arrival_offsets_ns


def ks_statistic(samples: np.ndarray, cdf) -> float:  # type: ignore[no-untyped-def]
    x = np.sort(samples)
    n = len(x)
    f = cdf(x)
    upper = np.arange(1, n + 1) / n - f
    lower = f - np.arange(0, n) / n
    return float(max(upper.max(), lower.max()))


def test_constant_is_exact() -> None:
    off = arrival_offsets_ns(4.0, "constant", 1.0, 5, None, seed=0)
    assert off.tolist() == [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]


def test_poisson_count_rescaled_to_exact_rate() -> None:
    off = arrival_offsets_ns(10.0, "poisson", 1.0, 401, None, seed=3)
    assert len(off) == 401 and off[0] == 0
    assert off[-1] == pytest.approx(40 * NS, abs=10)


def test_poisson_gaps_pass_goodness_of_fit() -> None:
    rate, n = 20.0, 2001
    gaps = np.diff(arrival_offsets_ns(rate, "poisson", 1.0, n, None, seed=11)) / NS
    d = ks_statistic(gaps, lambda x: 1 - np.exp(-rate * x))
    assert d < 1.36 / math.sqrt(len(gaps)), d  # KS test at 5%
    # and they are not constant: the coefficient of variation of exponential gaps is 1
    assert 0.9 < gaps.std() / gaps.mean() < 1.1


def test_constant_gaps_fail_the_poisson_fit() -> None:
    """The fit test can fail: constant arrivals are rejected as exponential."""
    rate = 20.0
    gaps = np.diff(arrival_offsets_ns(rate, "constant", 1.0, 2001, None, seed=11)) / NS
    assert ks_statistic(gaps, lambda x: 1 - np.exp(-rate * x)) > 1.36 / math.sqrt(len(gaps))


def test_gamma_burstiness_changes_spread() -> None:
    bursty = np.diff(arrival_offsets_ns(10.0, "gamma", 0.25, 4001, None, seed=1)).astype(float)
    regular = np.diff(arrival_offsets_ns(10.0, "gamma", 4.0, 4001, None, seed=1)).astype(float)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.15)  # cv = 1/sqrt(shape)
    assert regular.std() / regular.mean() == pytest.approx(0.5, rel=0.15)


def test_duration_only_schedule_stops_at_duration() -> None:
    off = arrival_offsets_ns(50.0, "poisson", 1.0, None, 10.0, seed=5)
    assert off.max() < 10 * NS
    assert len(off) == pytest.approx(500, rel=0.15)


def test_same_seed_same_schedule_and_seed_zero_is_a_seed() -> None:
    a = arrival_offsets_ns(5.0, "poisson", 1.0, 50, None, seed=0)
    b = arrival_offsets_ns(5.0, "poisson", 1.0, 50, None, seed=0)
    c = arrival_offsets_ns(5.0, "poisson", 1.0, 50, None, seed=1)
    assert (a == b).all() and not (a == c).all()


def test_closed_loop_plans_have_no_arrivals() -> None:
    with pytest.raises(ValueError):
        LoadPlan(kind="concurrency", workers=4).arrivals_ns(10, None, 0)
    assert LoadPlan(kind="rate", rate=2, workers=3).describe()["max_concurrency"] == 3
