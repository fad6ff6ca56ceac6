"""Across repeated iterations: mean, spread, 95% confidence interval and a stability verdict.

For each headline metric over the n iterations that report it (x_1 … x_n):

* mean = Σx / n; stdev = sample stdev (ddof = 1)
* cv = stdev / |mean| (coefficient of variation, a fraction: 0.05 = 5%)
* ci95 = mean ± t(0.975, n − 1) · stdev / √n (Student t, two-sided 95%; scipy's quantile)

The verdict reads the CV of output token throughput (request throughput when no
tokens were counted): `stable` ≤ 5%, `normal` ≤ 10% (the seed article's
"5–10% spread is normal"), `unstable` above, `single` with fewer than 2 iterations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tokspeed.metrics.schema import Summary

HEADLINE_METRICS: tuple[str, ...] = (
    "output_tokens_per_s",
    "requests_per_s",
    "total_tokens_per_s",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "itl_mean_ms",
    "e2e_mean_ms",
)
STABLE_CV = 0.05
NORMAL_CV = 0.10

Verdict = Literal["stable", "normal", "unstable", "single"]


class MetricAcross(BaseModel):
    """One metric across iterations; stats are None where n is too small."""

    model_config = ConfigDict(frozen=True)

    n: int
    values: list[float]
    mean: float | None
    stdev: float | None
    cv: float | None
    ci95_low: float | None
    ci95_high: float | None


class AcrossIterations(BaseModel):
    """Headline metrics across iterations and the stability verdict on throughput."""

    model_config = ConfigDict(frozen=True)

    n: int  # iterations summarised
    partial: list[int] = []  # iterations cut short and left out of these figures
    metrics: dict[str, MetricAcross]
    verdict: Verdict
    verdict_metric: str
    verdict_cv: float | None
    message: str | None


def t_critical_95(df: int) -> float:
    """Two-sided 95% Student t critical value t(0.975, df) for `df` ≥ 1 (scipy.special.stdtrit):
    df = 2 → 4.303, df = 9 → 2.262."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, got {df}")
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.975))


def metric_across(values: Sequence[float]) -> MetricAcross:
    """mean, stdev, cv and 95% CI of one metric's per-iteration values."""
    xs = [float(v) for v in values]
    n = len(xs)
    mean = math.fsum(xs) / n if n else None
    if mean is None or n == 1:
        return MetricAcross(
            n=n, values=xs, mean=mean, stdev=None, cv=None, ci95_low=None, ci95_high=None
        )
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_critical_95(n - 1) * stdev / math.sqrt(n)
    return MetricAcross(
        n=n,
        values=xs,
        mean=mean,
        stdev=stdev,
        cv=_cv(mean, stdev),
        ci95_low=mean - half,
        ci95_high=mean + half,
    )


def across_iterations(summaries: Sequence[Summary]) -> AcrossIterations:
    """Headline metrics across `summaries` (one per iteration) and a stability verdict."""
    flats = [s.flat() for s in summaries]
    metrics = {
        name: metric_across([v for f in flats if (v := f.get(name)) is not None])
        for name in HEADLINE_METRICS
    }
    basis = _verdict_metric(metrics)
    verdict, message = _verdict(metrics[basis], len(summaries))
    return AcrossIterations(
        n=len(summaries),
        metrics=metrics,
        verdict=verdict,
        verdict_metric=basis,
        verdict_cv=metrics[basis].cv,
        message=message,
    )


def _cv(mean: float, stdev: float) -> float | None:
    if mean != 0:
        return stdev / abs(mean)
    return 0.0 if stdev == 0 else None


def _verdict_metric(metrics: dict[str, MetricAcross]) -> str:
    """Output token throughput, unless no iteration counted tokens."""
    tokens = metrics["output_tokens_per_s"]
    return "output_tokens_per_s" if tokens.n and tokens.mean else "requests_per_s"


def _verdict(m: MetricAcross, iterations: int) -> tuple[Verdict, str | None]:
    if iterations < 2 or m.n < 2:
        return "single", "one iteration: run several to measure run-to-run spread"
    if m.cv is not None and m.cv <= STABLE_CV:
        return "stable", None
    if m.cv is not None and m.cv <= NORMAL_CV:
        return "normal", None
    spread = "undefined" if m.cv is None else f"{m.cv:.1%}"
    return "unstable", (
        f"throughput varied by {spread} (CV) across {m.n} iterations, above the 10% "
        "that is normal: give it more warm-up, more requests per iteration, and an "
        "idle machine (no other load on the client, the server or its GPUs)"
    )
