"""Open-loop arrival schedules: rescaled to the asked rate by default (raw draws opt-in), seeded, the right distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokspeed.load.plan import NS, LoadPlan, arrival_offsets_ns, rescaled
from tokspeed.metrics.schedule import gap_stats


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


def test_constant_gaps_have_no_spread_and_the_exact_rate() -> None:
    for rate in (20.0, 200.0, 3.0):
        rate_seen, cv = gap_stats([arrival_offsets_ns(rate, "constant", 1.0, 400, None, seed=0)])
        assert rate_seen == pytest.approx(rate, rel=1e-6)
        assert cv is not None and cv < 1e-6  # only the rounding to whole nanoseconds


def test_default_poisson_schedule_offers_the_rate_asked() -> None:
    """Seed 0 at 100 requests drew 0.84x its label before rescaling became the default (vLLM's and evalscope's way)."""
    for seed in (0, 1, 2, 3):
        off = arrival_offsets_ns(8.0, "poisson", 1.0, 100, None, seed=seed)
        assert gap_stats([off])[0] == pytest.approx(8.0, rel=1e-9)
    raw = arrival_offsets_ns(8.0, "poisson", 1.0, 100, None, seed=0, exact_rate=False)
    assert gap_stats([raw])[0] < 0.9 * 8.0  # what the default used to offer
    assert LoadPlan(kind="rate", rate=8.0).exact_rate


def test_rate_inf_sends_every_request_at_once() -> None:
    assert arrival_offsets_ns(math.inf, "poisson", 1.0, 5, None, seed=0).tolist() == [0] * 5
    with pytest.raises(ValueError, match="needs --requests"):
        arrival_offsets_ns(math.inf, "poisson", 1.0, None, 10.0, seed=0)
    plan = LoadPlan(kind="rate", rate=math.inf, workers=4)
    assert plan.label() == "all at once, max 4 in flight"
    assert plan.describe() == {"kind": "rate", "rate": None, "all_at_once": True, "max_concurrency": 4}


def test_raw_poisson_gaps_are_used_as_drawn() -> None:
    """--raw-arrivals: the schedule is the cumulative sum of the seeded exponential draws."""
    off = arrival_offsets_ns(10.0, "poisson", 1.0, 401, None, seed=3, exact_rate=False)
    drawn = np.random.default_rng(3).exponential(1 / 10.0, 400)
    assert len(off) == 401 and off[0] == 0
    assert off[1:].tolist() == np.round(np.cumsum(drawn) * NS).astype(np.int64).tolist()
    realised, _ = gap_stats([off])
    assert realised == pytest.approx(400 / drawn.sum(), rel=1e-9)
    assert realised != pytest.approx(10.0, rel=0.01)  # this seed's draw is ~8% slow: reported, not hidden


def test_exact_rate_rescales_the_drawn_schedule_to_n_over_rate() -> None:
    drawn = arrival_offsets_ns(10.0, "poisson", 1.0, 401, None, seed=3, exact_rate=False)
    exact = arrival_offsets_ns(10.0, "poisson", 1.0, 401, None, seed=3, exact_rate=True)
    assert len(exact) == 401 and exact[0] == 0
    assert exact[-1] == pytest.approx(40 * NS, abs=10)  # 401 arrivals in 401/10 s: the last at 400/10
    assert gap_stats([exact])[0] == pytest.approx(10.0, rel=1e-9)
    # the same draw, stretched: every gap scaled by one factor
    ratio = np.diff(exact).astype(float) / np.diff(drawn)
    assert ratio.max() - ratio.min() < 1e-6 * ratio.mean() + 2 / np.diff(drawn).min()
    gamma = arrival_offsets_ns(10.0, "gamma", 0.5, 101, None, seed=4, exact_rate=True)
    assert gamma[-1] == pytest.approx(10 * NS, abs=10)


def test_exact_rate_with_only_a_duration_draws_rate_times_duration() -> None:
    off = arrival_offsets_ns(50.0, "poisson", 1.0, None, 10.0, seed=5, exact_rate=True)
    assert len(off) == 500 and off.max() < 10 * NS
    assert off[-1] == pytest.approx(499 / 50 * NS, abs=10)


def test_rescaled_leaves_degenerate_gaps_alone() -> None:
    assert rescaled(np.array([]), 5.0).size == 0
    assert rescaled(np.zeros(3), 5.0).tolist() == [0.0, 0.0, 0.0]
    assert rescaled(np.array([1.0, 3.0]), 2.0).tolist() == [0.25, 0.75]  # mean gap 1/2 s


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


def test_plan_passes_exact_rate_on_and_labels_raw_draws() -> None:
    plan = LoadPlan(kind="rate", rate=10.0, arrival="poisson", exact_rate=True)
    assert plan.arrivals_ns(401, None, 3)[-1] == pytest.approx(40 * NS, abs=10)
    assert plan.describe()["exact_rate"] is True and plan.label() == "rate 10/s poisson"
    raw = LoadPlan(kind="rate", rate=10.0, exact_rate=False)
    assert raw.describe()["exact_rate"] is False and "raw draws" in raw.label()
    assert "exact_rate" not in LoadPlan(kind="rate", rate=10.0, arrival="constant").describe()
