"""Bootstrap percentile intervals: coverage on a known distribution, determinism, bounded cost."""

from __future__ import annotations

import math
import time

import numpy as np

from tokspeed.stats.bootstrap import (
    bootstrap_percentile_ci,
    bootstrap_percentile_cis,
    samples_for_precision,
)


def test_coverage_on_a_known_distribution() -> None:
    """95% intervals of the exponential's p50 and p90 hold the true quantile in about 95% of samples."""
    rng = np.random.default_rng(12345)
    trials, n = 200, 400
    truth = {50.0: math.log(2) * 10, 90.0: math.log(10) * 10}
    hits = {q: 0 for q in truth}
    for t in range(trials):
        sample = rng.exponential(10.0, size=n)
        cis = bootstrap_percentile_cis(sample, tuple(truth), resamples=400, seed=t)
        for q, ci in cis.items():
            assert ci is not None and ci.reliable
            hits[q] += ci.low <= truth[q] <= ci.high
    for q in truth:  # binomial(200, 0.95): 3 sd ≈ 4.6 points; the percentile bootstrap undercovers slightly
        assert 0.87 <= hits[q] / trials <= 0.995, (q, hits[q])


def test_same_seed_same_interval_and_the_estimate_inside() -> None:
    x = np.random.default_rng(1).lognormal(3, 0.5, size=2000)
    a = bootstrap_percentile_ci(x, 99.0, seed=7)
    b = bootstrap_percentile_ci(x, 99.0, seed=7)
    assert a == b and a is not None
    assert a.low <= np.percentile(x, 99) <= a.high
    assert bootstrap_percentile_ci(x, 99.0, seed=8) != a


def test_few_values() -> None:
    assert bootstrap_percentile_ci([1.0], 50.0) is None
    assert bootstrap_percentile_ci([np.nan, 1.0], 50.0) is None
    ci = bootstrap_percentile_ci([1.0, 2.0, 3.0], 99.0)
    assert ci is not None and not ci.reliable  # nothing beyond the 99th percentile


def test_cost_is_bounded_for_a_million_values() -> None:
    x = np.random.default_rng(2).exponential(1.0, size=1_000_000)
    start = time.perf_counter()
    cis = bootstrap_percentile_cis(x, (50.0, 99.0), resamples=200)
    assert time.perf_counter() - start < 5.0
    ci = cis[99.0]
    assert ci is not None and ci.n == 20_000  # thinned first
    assert ci.low <= math.log(100) <= ci.high


def test_samples_for_precision_matches_the_asymptotic_formula() -> None:
    """Exponential(mean 10): p99 = 46.05, density there 0.001; ±10% at 95% needs (1.96·√0.0099 / (0.001·4.605))² ≈ 1794."""
    x = np.random.default_rng(3).exponential(10.0, size=50_000)
    need = samples_for_precision(x, 99.0, 0.10)
    assert need is not None and 1794 * 0.75 <= need <= 1794 * 1.33
    median = samples_for_precision(x, 50.0, 0.10)  # (1.96·0.5 / (0.05·6.93))² ≈ 800
    assert median is not None and 600 <= median <= 1000
    assert samples_for_precision(np.full(100, 5.0), 99.0) == 368  # no spread: the floor for a p99 interval
    assert samples_for_precision(x[:10], 99.0) is None


def test_clustered_values_are_resampled_by_request_and_cover_at_95() -> None:
    """Per-request correlation (each request's tokens share a random level): the request bootstrap
    covers the true p50, p90 and p99 about 95% of the time; treating a request's tokens as
    independent values gives an interval far too narrow (it covered 50-62% here)."""
    rng = np.random.default_rng(2024)
    requests, tokens, trials = 600, 8, 100
    # level ~ lognormal(0, 0.3) per request, noise ~ lognormal(0, 0.1) per token: the product is lognormal(0, √0.1)
    z = {50.0: 0.0, 90.0: 1.2815515655446004, 99.0: 2.3263478740408408}
    truth = {q: math.exp(math.sqrt(0.3**2 + 0.1**2) * zq) for q, zq in z.items()}
    hits = dict.fromkeys(z, 0)
    narrower = []
    for t in range(trials):
        level = rng.lognormal(0.0, 0.3, size=requests)
        values = (level[:, None] * rng.lognormal(0.0, 0.1, size=(requests, tokens))).ravel()
        owner = np.repeat(np.arange(requests), tokens)
        cis = bootstrap_percentile_cis(values, tuple(z), owner=owner, resamples=200, seed=t)
        for q, ci in cis.items():
            assert ci is not None and ci.units == requests
            hits[q] += ci.low <= truth[q] <= ci.high
        if t < 5:
            naive = bootstrap_percentile_ci(values, 90.0, resamples=200, seed=t)
            assert naive is not None and naive.units == values.size
            narrower.append((cis[90.0].high - cis[90.0].low) / (naive.high - naive.low))
    # binomial(100, 0.95): 3 sd ≈ 6.5 points (seen: 95, 95, 94)
    for q in z:
        assert 0.88 <= hits[q] / trials <= 1.0, (q, hits[q])
    assert min(narrower) > 1.4, narrower
