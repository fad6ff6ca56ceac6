"""`history check`: a prediction interval from the history's own spread. Its false-alarm rate is what
it says (simulated: iid noise flags about alpha of the runs), and a regression of stated size is caught."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.history.check import CheckSettings, check, direction, judge
from tokspeed.history.entry import PointEntry, RunEntry

SIMULATIONS = 1000


def binomial_band(p: float, n: int = SIMULATIONS) -> tuple[float, float]:
    """A 4-sigma band around p for a share of n draws (fails by chance about once in 16,000 suites)."""
    sd = (p * (1 - p) / n) ** 0.5
    return p - 4 * sd, p + 4 * sd


@pytest.mark.parametrize("n", [5, 10, 20])
@pytest.mark.parametrize("better", ["lower", "higher"])
def test_iid_noise_is_flagged_at_about_alpha(n: int, better: str) -> None:
    rng = np.random.default_rng(1000 + n)
    alpha = 0.05
    flagged = 0
    for _ in range(SIMULATIONS):
        xs = 100.0 * np.exp(rng.normal(0.0, 0.05, n + 1))  # multiplicative run-to-run noise, 5%
        flagged += judge(float(xs[-1]), xs[:-1], better, alpha).verdict == "regression"  # type: ignore[arg-type]
    low, high = binomial_band(alpha)
    assert low <= flagged / SIMULATIONS <= high, flagged


def test_a_check_of_several_metrics_keeps_the_family_wise_rate() -> None:
    """Three independent metrics judged together: the run is flagged at most about alpha of the time."""
    rng = np.random.default_rng(7)
    alpha, n = 0.05, 10
    flagged = 0
    for _ in range(SIMULATIONS):
        values = 50.0 * np.exp(rng.normal(0.0, 0.04, (n + 1, 3)))
        runs = [_run(i, {"ttft_p99_ms": v[0], "itl_p50_ms": v[1], "output_tokens_per_s": v[2]}) for i, v in enumerate(values)]
        report = check(runs, runs[-1], ["ttft_p99_ms", "itl_p50_ms", "output_tokens_per_s"], CheckSettings(alpha=alpha))
        flagged += bool(report.failed)
    _, high = binomial_band(alpha)
    assert flagged / SIMULATIONS <= high, flagged
    assert flagged / SIMULATIONS >= 0.025, flagged  # Bonferroni over 3 independent tests: ~1 - (1 - α/3)^3 ≈ α


def test_a_twenty_percent_regression_on_three_percent_noise_is_caught() -> None:
    """σ = 3% run to run, 10 runs of history, α = 0.01: a +20% latency (6.1 σ on the log scale) is caught ≥ 97%."""
    rng = np.random.default_rng(3)
    caught = 0
    for _ in range(SIMULATIONS):
        xs = 200.0 * np.exp(rng.normal(0.0, 0.03, 11))
        caught += judge(float(xs[-1] * 1.20), xs[:-1], "lower", 0.01).verdict == "regression"
    assert caught / SIMULATIONS >= 0.97, caught


def test_a_throughput_drop_is_a_regression_and_a_rise_is_not() -> None:
    history = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]
    assert judge(800.0, history, "higher", 0.01).verdict == "regression"
    assert judge(1200.0, history, "higher", 0.01).verdict == "improvement"


def test_the_bar_is_the_history_spread_not_a_fixed_threshold() -> None:
    """+10%: a regression against a steady history (±1%), noise against a noisy one (±15%)."""
    rng = np.random.default_rng(11)
    steady = 100.0 * np.exp(rng.normal(0.0, 0.01, 12))
    noisy = 100.0 * np.exp(rng.normal(0.0, 0.15, 12))
    assert judge(110.0, steady, "lower", 0.01).verdict == "regression"
    assert judge(110.0, noisy, "lower", 0.01).verdict == "ok"


def test_one_bad_night_in_the_history_does_not_hide_a_regression() -> None:
    history = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 300.0, 100.1, 99.8]
    j = judge(125.0, history, "lower", 0.01)
    assert j.verdict == "regression"
    assert j.outliers == (300.0,) and j.n == 8


def test_a_run_within_min_change_of_the_median_is_never_an_outlier() -> None:
    """Near-identical runs have a tiny MAD: two runs a loaded machine made ~10% slower were cut as outliers,
    leaving too few to judge, though --min-change 50% says a 10% change does not matter."""
    history = [40.0, 40.1, 40.05, 44.0, 45.0, 40.02]
    assert judge(40.1, history, "lower", 0.01).outliers == (44.0, 45.0)
    j = judge(40.1, history, "lower", 0.01, CheckSettings(min_change=0.5))
    assert j.outliers == () and j.n == 6 and j.verdict == "ok"
    assert judge(41.0, history, "lower", 0.01, CheckSettings(min_change=0.5, min_history=5)).n == 6
    # a bad night beyond the floor is still cut
    assert judge(40.1, [*history, 90.0], "lower", 0.01, CheckSettings(min_change=0.5)).outliers == (90.0,)


def test_min_change_is_a_floor_of_practical_significance() -> None:
    history = [100.0, 100.1, 99.9, 100.05, 99.95, 100.0]
    assert judge(102.0, history, "lower", 0.01).verdict == "regression"
    assert judge(102.0, history, "lower", 0.01, CheckSettings(min_change=0.05)).verdict == "ok"


def test_too_little_history_is_not_judged() -> None:
    j = judge(500.0, [100.0, 101.0, 99.0], "lower", 0.01)
    assert j.verdict == "insufficient history" and "needs 5" in j.note


def test_the_prediction_bound_is_the_student_t_quantile() -> None:
    from scipy import stats

    history = np.array([10.0, 11.0, 12.0, 9.0, 10.5, 11.5])
    logs = np.log(history)
    n = len(logs)
    expect = np.exp(logs.mean() + stats.t.ppf(0.99, n - 1) * logs.std(ddof=1) * np.sqrt(1 + 1 / n))
    j = judge(10.0, history, "lower", 0.01)
    assert j.limit == pytest.approx(expect, rel=1e-12)
    assert j.log_scale and j.center == pytest.approx(np.exp(logs.mean()))


def test_zero_values_are_judged_on_the_linear_scale() -> None:
    j = judge(0.2, [0.0, 0.0, 0.01, 0.0, 0.02, 0.0], "lower", 0.01)
    assert not j.log_scale and j.verdict == "regression"


def test_directions() -> None:
    assert direction("ttft_p99_ms") == "lower" and direction("error_rate") == "lower"
    assert direction("output_tokens_per_s") == "higher" and direction("capacity_requests_per_s") == "higher"
    assert direction("decode_p50_tokens_per_s") == "higher" and direction("output_tokens_p50") == "either"


def _run(i: int, metrics: dict[str, float], comparable: str = "k1", status: str = "complete",
         target: str = "http://h/v1") -> RunEntry:
    return RunEntry(
        id=f"run{i:04d}", directory=f"/r/{i}", status=status, command="run", started_at=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00",
        target=target, model="m", points=[PointEntry(index=0, name="p", profile="concurrency=1", comparable=comparable,
                                                      target=target, model="m", metrics=metrics)],
    )


def test_only_comparable_earlier_complete_runs_are_the_history() -> None:
    base = [_run(i, {"ttft_p99_ms": 100.0 + (i % 3)}) for i in range(6)]
    others = [
        _run(10, {"ttft_p99_ms": 500.0}, comparable="other-workload"),
        _run(11, {"ttft_p99_ms": 500.0}, status="interrupted"),
        _run(12, {"ttft_p99_ms": 500.0}, target="http://elsewhere/v1"),
    ]
    newest = _run(20, {"ttft_p99_ms": 101.0})
    later = _run(30, {"ttft_p99_ms": 900.0})
    report = check([*base, *others, newest, later], newest, ["ttft_p99_ms"])
    (c,) = report.checks
    assert c.history_runs == tuple(r.id for r in base)
    assert c.judgement.verdict == "ok" and not report.failed


def test_the_window_keeps_the_latest_runs() -> None:
    runs = [_run(i, {"ttft_p99_ms": 100.0 + i % 2}) for i in range(30)]
    report = check(runs, runs[-1], ["ttft_p99_ms"], CheckSettings(window=7))
    assert report.checks[0].history_runs == tuple(r.id for r in runs[-8:-1])


def test_a_metric_the_run_lacks_fails_the_check() -> None:
    runs = [_run(i, {"ttft_p99_ms": 100.0}) for i in range(6)]
    report = check(runs, runs[-1], ["goodput_requests_per_s"])
    assert report.checks[0].judgement.verdict == "missing" and report.failed


def test_require_history_fails_what_cannot_be_judged() -> None:
    runs = [_run(i, {"ttft_p99_ms": 100.0 + i}) for i in range(3)]
    assert not check(runs, runs[-1], ["ttft_p99_ms"]).failed
    assert check(runs, runs[-1], ["ttft_p99_ms"], CheckSettings(require_history=True)).failed
