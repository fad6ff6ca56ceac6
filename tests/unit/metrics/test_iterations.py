"""Across iterations: t critical values, mean/stdev/CV/CI and the stability verdict."""

from __future__ import annotations

import math

import pytest

from tokspeed.metrics.iterations import across_iterations, metric_across, t_critical_95
from tokspeed.metrics.schema import Summary, Throughput


def run(tokens_per_s: float | None, requests_per_s: float = 10.0) -> Summary:
    return Summary(
        throughput=Throughput(output_tokens_per_s=tokens_per_s, requests_per_s=requests_per_s)
    )


@pytest.mark.parametrize(
    ("df", "t"), [(1, 12.706), (2, 4.303), (9, 2.262), (30, 2.042), (35, 2.030), (200, 1.972)]
)
def test_t_table(df: int, t: float) -> None:
    # published t(0.975, df) to 3 decimals; scipy gives the exact quantile (the old table used
    # df = 31's 2.042 at 35 and 120's 1.980 at 200)
    assert t_critical_95(df) == pytest.approx(t, abs=5e-4)


def test_t_limit_and_bad_df() -> None:
    assert t_critical_95(10_000) == pytest.approx(1.96, abs=1e-3)
    with pytest.raises(ValueError):
        t_critical_95(0)


def test_metric_across_exact() -> None:
    m = metric_across([100.0, 110.0, 90.0])
    assert (m.n, m.mean, m.stdev, m.cv) == (3, 100.0, 10.0, 0.1)
    half = 4.302652729749462 * 10.0 / math.sqrt(3)
    assert m.ci95_low == pytest.approx(100.0 - half)
    assert m.ci95_high == pytest.approx(100.0 + half)


def test_metric_across_small_n() -> None:
    assert metric_across([]).mean is None
    one = metric_across([5.0])
    assert (one.n, one.mean, one.stdev, one.cv, one.ci95_low) == (1, 5.0, None, None, None)


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ([1000.0, 1010.0, 990.0], "stable"),  # cv 1%
        ([1000.0, 1080.0, 920.0], "normal"),  # cv 8%
        ([1000.0, 1300.0, 700.0], "unstable"),  # cv 30%
    ],
)
def test_verdicts(values: list[float], verdict: str) -> None:
    result = across_iterations([run(v) for v in values])
    assert result.verdict == verdict
    assert result.verdict_metric == "output_tokens_per_s"
    assert result.metrics["output_tokens_per_s"].values == values
    if verdict == "unstable":
        assert result.message is not None
        assert "warm-up" in result.message and "requests per iteration" in result.message
        assert "30.0%" in result.message
    else:
        assert result.message is None


def test_single_iteration() -> None:
    result = across_iterations([run(1000.0)])
    assert result.verdict == "single"
    assert result.n == 1


def test_falls_back_to_request_throughput_without_tokens() -> None:
    result = across_iterations([run(None, 10.0), run(None, 10.2)])
    assert result.verdict_metric == "requests_per_s"
    assert result.verdict == "stable"


def test_headline_metrics_present_and_missing_values_skipped() -> None:
    result = across_iterations([run(1000.0), run(1000.0)])
    assert set(result.metrics) >= {"ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "e2e_mean_ms"}
    assert result.metrics["ttft_mean_ms"].n == 0
    assert result.metrics["output_tokens_per_s"].cv == 0.0


def test_a_partial_last_iteration_is_marked_and_left_out_of_the_average() -> None:
    """An interrupted run: iterations of 100, 100 and 60 requests; the third is partial, the
    across-iteration figures are over the first two, and the printout says so."""
    from diagnosis_builders import rec
    from tokspeed.reports.summary_text import iteration_lines
    from tokspeed.results import build_benchmark

    records = []
    for it, n, itl in ((1, 100, 2.0), (2, 100, 2.0), (3, 60, 4.0)):
        start = len(records)
        records += [rec(start + i, iteration=it, itl_ms=itl, start_ms=(start + i) * 100.0) for i in range(n)]
    bench = build_benchmark("c1", {"kind": "concurrency", "concurrency": 1}, records, [])
    assert [it.partial for it in bench.iterations] == [False, False, True]
    a = bench.across_iterations
    assert a is not None and a.n == 2 and a.partial == [3]
    assert a.metrics["itl_mean_ms"].values == [2.0, 2.0]
    lines = iteration_lines(bench)
    assert "PARTIAL (60 requests): left out of the average" in lines[2]
    assert lines[-1].startswith("Averaged over 2 iterations (partial iteration 3 left out): ")
    whole = build_benchmark("c1", {"kind": "concurrency", "concurrency": 1}, records[:200], [])
    assert not any(it.partial for it in whole.iterations) and whole.across_iterations.partial == []  # type: ignore[union-attr]
