"""Percentile confidence intervals (order-statistic / binomial) and the sample-size hint."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from diagnosis_builders import bench, rec, result
from tokspeed.diagnosis.stability import too_few_samples
from tokspeed.diagnosis.thresholds import DEFAULT
from tokspeed.metrics.schema import Summary
from tokspeed.metrics.summary import summarize
from tokspeed.reports.summary_text import ci_lines
from tokspeed.stats.distribution import (
    QuantileCI,
    distribution,
    distribution_with_ci,
    min_samples_for_ci,
    order_statistic_ranks,
    required_samples,
)


def _brute_ranks(n: int, q: float) -> tuple[int, int] | None:
    """The definition, straight: exact binomial CDF from math.comb, equal 2.5% tails."""
    p = q / 100
    cdf = np.cumsum([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])
    lows = [j for j in range(n) if cdf[j] <= 0.025]
    highs = [j for j in range(n) if cdf[j] >= 0.975]
    if not lows or not highs:
        return None
    return lows[-1] + 1, highs[0] + 1


# exact small-n cases, by hand ---------------------------------------------------------------
def test_median_by_hand() -> None:
    # n = 5: P(B = 0) = 1/32 > 2.5%, so even the minimum cannot bound the median from below
    assert order_statistic_ranks(5, 50.0) is None
    # n = 6: P(B = 0) = 1/64 ≤ 2.5% < P(B ≤ 1) = 7/64; P(B ≤ 5) = 63/64 ≥ 97.5% > P(B ≤ 4) = 57/64
    assert order_statistic_ranks(6, 50.0) == (1, 6, pytest.approx(62 / 64))
    # n = 10: the textbook (x₂, x₉) at 1002/1024 = 97.85%
    assert order_statistic_ranks(10, 50.0) == (2, 9, pytest.approx(1002 / 1024))


def test_smallest_n_for_each_percentile() -> None:
    # qⁿ ≤ 2.5%: p90 0.9^35 = 2.503% > 2.5% ≥ 0.9^36; p99 0.99^367 = 2.501%, 0.99^368 = 2.476%
    assert [min_samples_for_ci(q) for q in (50.0, 90.0, 99.0, 99.9)] == [6, 36, 368, 3688]
    for q, n in ((90.0, 36), (99.0, 368), (99.9, 3688)):
        assert order_statistic_ranks(n - 1, q) is None
        low, high, _ = order_statistic_ranks(n, q)  # type: ignore[misc]
        assert high == n and low < n  # just enough: the upper bound is the maximum


@pytest.mark.parametrize("q", [50.0, 90.0, 99.0])
def test_ranks_match_the_definition(q: float) -> None:
    for n in [*range(1, 60), 100, 250, 367, 368, 369, 500]:
        got = order_statistic_ranks(n, q)
        assert (got[:2] if got else None) == _brute_ranks(n, q), n


def test_large_n_is_near_the_normal_approximation_and_covers_95() -> None:
    for n, q in ((10**6, 99.0), (10**6, 50.0), (10**5, 99.9)):
        low, high, coverage = order_statistic_ranks(n, q)  # type: ignore[misc]
        p, sd = q / 100, math.sqrt(n * q / 100 * (1 - q / 100))
        assert abs(low - (n * p - 1.96 * sd)) < 3 and abs(high - (n * p + 1.96 * sd)) < 3
        assert 0.95 <= coverage < 0.96


# the interval on data ------------------------------------------------------------------------
def test_true_quantile_is_inside_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(12345)
    truth = {"p50": math.log(2), "p90": math.log(10), "p99": math.log(100)}  # exponential(1)
    trials, hits = 1000, dict.fromkeys(truth, 0)
    for _ in range(trials):
        _, ci = distribution_with_ci(rng.exponential(size=400))
        for name, value in truth.items():
            c = ci[name]
            assert c is not None
            hits[name] += c.low <= value <= c.high
    for name, hit in hits.items():
        # coverage is ≥ 95% by construction (exactly 95–97% here); ±4 binomial SDs around that
        assert 0.93 <= hit / trials <= 0.99, (name, hit)


def test_low_estimate_high_hold_and_stay_in_range() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 5, 6, 40, 368, 5000):
        values = rng.lognormal(15, 1, size=n)  # ns-sized values, reported in ms
        dist, ci = distribution_with_ci(values, 1e-6)
        assert dist == distribution(values, 1e-6)
        for name, c in ci.items():
            if c is None:
                continue
            estimate = getattr(dist, name)
            assert dist.min <= c.low <= estimate <= c.high <= dist.max  # type: ignore[operator]
            assert c.coverage >= 0.95


def test_none_when_too_small_and_empty() -> None:
    _, ci = distribution_with_ci(np.arange(367.0))
    assert ci["p50"] is not None and ci["p90"] is not None and ci["p99"] is None and ci["p999"] is None
    assert distribution_with_ci([]) == (distribution([]), dict.fromkeys(("p50", "p90", "p99", "p999")))
    _, ci = distribution_with_ci([1.0, float("nan"), 2.0, 3.0, 4.0, 5.0, 6.0])  # NaN dropped: n = 6
    c = ci["p50"]
    assert c is not None and (c.low, c.high, c.coverage) == (1.0, 6.0, pytest.approx(62 / 64))


def test_order_statistics_are_picked_exactly_and_input_is_untouched() -> None:
    values = np.arange(1000.0, 0.0, -1.0)  # 1000 … 1
    before = values.copy()
    _, ci = distribution_with_ci(values)
    low, high, _ = order_statistic_ranks(1000, 90.0)  # type: ignore[misc]
    assert ci["p90"] is not None and (ci["p90"].low, ci["p90"].high) == (float(low), float(high))
    assert np.array_equal(values, before)


def test_a_million_values_take_milliseconds() -> None:
    values = np.random.default_rng(1).exponential(size=1_000_000)
    distribution_with_ci(values)  # warm the rank cache and numpy
    start = time.perf_counter()
    distribution_with_ci(values)
    assert time.perf_counter() - start < 0.5  # ~20 ms here; generous for a loaded CI machine


# required sample size ------------------------------------------------------------------------
def test_required_samples() -> None:
    wide = QuantileCI(low=80.0, high=120.0, coverage=0.95)  # half-width 20% of 100
    assert required_samples(wide, 100.0, 1000, 99.0) == 4000  # (20% / 10%)² × 1000
    tight = QuantileCI(low=99.0, high=101.0, coverage=0.95)
    assert required_samples(tight, 100.0, 1000, 99.0) == 368  # never below what a CI needs at all
    assert required_samples(None, None, 40, 99.0) == 368
    assert required_samples(wide, 0.0, 1000, 99.0) is None


# in the summary, the diagnosis and the report -----------------------------------------------
def _varied(n: int) -> list:
    rng = np.random.default_rng(3)
    return [rec(i, ttft_ms=float(t), tokens=4) for i, t in enumerate(rng.uniform(10, 60, size=n).round(3))]


def test_summary_carries_the_intervals_and_old_summaries_load() -> None:
    s = summarize(_varied(400))
    assert set(s.percentile_ci) == {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"}
    ttft = s.percentile_ci["ttft_ms"]["p99"]
    assert ttft is not None and ttft.low <= s.ttft_ms.p99 <= ttft.high  # type: ignore[operator]
    assert Summary.model_validate(s.model_dump(mode="json")) == s
    old = s.model_dump(mode="json")
    del old["percentile_ci"]
    assert Summary.model_validate(old).percentile_ci == {}
    assert summarize([]).percentile_ci == {}


def test_too_few_samples_evidence_has_the_intervals_and_a_suggestion() -> None:
    (f,) = too_few_samples(result(bench(_varied(40))), DEFAULT)
    e = f.evidence
    assert e["ttft_p99_ci95_low_ms"] is None and e["ttft_p99_ci95_high_ms"] is None  # 40 < 368
    assert e["ttft_p90_ci95_low_ms"] <= e["ttft_p90_ci95_high_ms"]  # type: ignore[operator]
    assert e["p99_ci_min_requests"] == 368 and e["suggested_requests"] == 368
    assert "--requests 100" in f.advice and "368" in f.advice

    strict = dataclasses.replace(DEFAULT, min_samples_p99=1000)
    (f,) = too_few_samples(result(bench(_varied(400))), strict)
    e = f.evidence
    assert e["ttft_p99_ci95_low_ms"] is not None and e["ttft_p99_ci95_high_ms"] is not None
    s = summarize(_varied(400))
    expected = required_samples(s.percentile_ci["ttft_ms"]["p99"], s.ttft_ms.p99, 400, 99.0)
    assert e["suggested_requests"] >= max(368, expected or 0)  # type: ignore[operator]
    assert "observed spread" in f.advice


def test_report_lines() -> None:
    lines = ci_lines(bench(_varied(400)))
    assert lines[0].startswith("p99 TTFT ") and "(95% CI " in lines[0] and "n=400)" in lines[0]
    assert [line.split()[1] for line in lines] == ["TTFT", "ITL", "TPOT", "E2E"]
    assert ci_lines(bench(_varied(40)))[0].endswith("(no 95% CI: needs n ≥ 368, n=40)")


def test_report_says_which_figures_are_past_the_exact_buffer() -> None:
    b = bench(_varied(400))
    b.summary = b.summary.model_copy(update={"approximate": ["chunk_gap_ms", "itl_ms"]})
    assert ci_lines(b)[-1] == "Within 0.01% (past 262,144 values, from a log histogram): chunk_gap_ms, itl_ms"
    assert not any("Within" in line for line in ci_lines(bench(_varied(400))))


def test_itl_intervals_resample_requests_not_pooled_tokens() -> None:
    """200 requests of 60 tokens, each request at its own speed: the ITL interval comes from
    resampling requests (units=200) and is several times wider than the pooled-token interval,
    which treated 11,800 tokens as independent and was overconfident (issue 21: 11.04–11.07)."""
    ms = 1_000_000
    rng = np.random.default_rng(12)
    records = [rec(i, ttft_ms=20.0, itl_ms=float(10.0 * rng.lognormal(0.0, 0.2)), tokens=60) for i in range(200)]
    s = summarize(records)
    ci = s.percentile_ci["itl_ms"]["p99"]
    assert ci is not None and ci.method == "request-bootstrap" and ci.units == 200
    assert ci.low <= s.itl_ms.p99 <= ci.high  # type: ignore[operator]
    pooled = distribution_with_ci(np.concatenate([np.diff(r.chunk_ns) for r in records]) / ms)[1]["p99"]
    assert pooled is not None and (ci.high - ci.low) > 3 * (pooled.high - pooled.low)
    assert s.percentile_ci["ttft_ms"]["p50"].method == "order-statistic"  # type: ignore[union-attr]
    line = next(line for line in ci_lines(bench(records)) if line.startswith("p99 ITL"))
    assert "n=11,800 tokens of 200 requests, resampled by request)" in line
    from tokspeed.reports.html_context import run_context  # the HTML report prints the same lines

    ctx = run_context(result(bench(records)), records, "here")
    assert line in ctx["benchmarks"][0]["lines"]
