"""Is the measurement trustworthy: unstable, cold_start, too_few_samples.

* unstable (result rule): across ≥ 2 iterations, the coefficient of variation of
  output throughput (request throughput when no tokens were counted) or of the mean
  TTFT, TPOT or E2E exceeds `unstable_cv` (10%; the seed: 5–10% is normal).
* cold_start (point rule), three ways, latency = TTFT (E2E when not streamed):
  - iteration 1's mean latency ≥ `cold_factor` × the median of the other iterations';
  - the first measured request's latency ≥ `cold_factor` × the median of the rest of
    its iteration (with ≥ `cold_min_requests` requests);
  - info: the first warm-up request was that much slower than the measured median —
    warm-up did its job, and cold start may deserve a measurement of its own.
  Each also needs a difference of ≥ `cold_min_ms`. A request's TTFT is judged against
  what its own prompt should cost: where the point's TTFT-vs-prompt-tokens line (the
  `ttft_prefill` fit, without the request judged) explains TTFT (slope > 0, r² ≥
  `prefill_r2`, ≥ `prefill_min_points` requests), the expected TTFT is that line at the
  request's prompt length, not the median of prompts of other lengths.
* too_few_samples (result rule): fewer than `min_samples_p99` completed requests
  (p99 is then essentially the maximum); critical when none completed. The evidence
  carries the 95% CIs of TTFT/E2E p90 and p99 (None: too few samples to bound them),
  the requests a p99 CI needs at all (368), and `suggested_requests`: enough for the
  p99 CI half-width to be within `ci_precision` (10%) of p99, estimated from the
  observed interval (`tokspeed.stats.distribution.required_samples`); without one, 368.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from tokspeed.diagnosis.context import PointData, pct
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.metrics.fit import LinearFit
from tokspeed.metrics.iterations import AcrossIterations
from tokspeed.metrics.schema import Summary
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding
from tokspeed.stats.distribution import min_samples_for_ci, required_samples

if TYPE_CHECKING:
    from tokspeed.diagnosis.digest import PointDigest

CI_PRECISION = 0.10  # suggested_requests: the p99 CI half-width within 10% of p99
_SPREAD_METRICS = ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms")
_LABELS = {
    "output_tokens_per_s": "output tok/s",
    "requests_per_s": "req/s",
    "ttft_mean_ms": "TTFT mean",
    "tpot_mean_ms": "TPOT mean",
    "e2e_mean_ms": "E2E mean",
}
UNSTABLE_ADVICE = (
    "5–10% spread is normal; more means the numbers are not reproducible: give it more warm-up (--warmup), "
    "more requests per iteration (--requests), and an idle machine — no other load on the client, the server "
    "or its GPUs (watch nvidia-smi for other processes, clocks and temperature)"
)
COLD_ADVICE = (
    "separate cold and warm: raise --warmup (warm-up requests are kept in requests.jsonl but excluded from "
    "the statistics), and if cold start matters to your users measure it on its own "
    "(--warmup 0 --synchronous --requests 1 on a freshly started server)"
)


# unstable -------------------------------------------------------------------
def unstable(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for i, b in enumerate(result.benchmarks) if (f := _unstable(i, b, t))]


def _unstable(index: int, bench: Benchmark, t: Thresholds) -> Finding | None:
    a = bench.across_iterations
    if a is None or a.n < 2:
        return None
    spread = _spread(a, t)
    if not spread:
        return None
    described = ", ".join(f"{_LABELS.get(name, name)} CV {pct(cv)}" for name, cv in spread.items())
    return Finding(
        rule="unstable",
        severity="warning",
        title=f"results varied across {a.n} iterations: {described} (threshold {pct(t.unstable_cv)})",
        evidence={"iterations": a.n, **{f"{name}_cv": cv for name, cv in spread.items()}, "threshold_cv": t.unstable_cv},
        advice=UNSTABLE_ADVICE,
        benchmark=index,
    )


def _spread(a: AcrossIterations, t: Thresholds) -> dict[str, float]:
    names = (a.verdict_metric, *_SPREAD_METRICS)
    cvs = {name: m.cv for name in names if (m := a.metrics.get(name)) is not None and m.cv is not None}
    return {name: cv for name, cv in cvs.items() if cv > t.unstable_cv}


# cold_start -----------------------------------------------------------------
def cold_start(p: PointData, t: Thresholds) -> list[Finding]:
    found = [_first_iteration(p, t), _first_request(p, t), _warmup(p, t)]
    return [f for f in found if f is not None]


def _summary_latency(s: Summary) -> float | None:
    return s.ttft_ms.mean if s.ttft_ms.mean is not None else s.e2e_ms.mean


def _slow(first: float, typical: float, t: Thresholds) -> bool:
    return typical > 0 and first >= t.cold_factor * typical and first - typical >= t.cold_min_ms


def _first_iteration(p: PointData, t: Thresholds) -> Finding | None:
    values = [_summary_latency(it.summary) for it in p.bench.iterations]
    if len(values) < 2 or any(v is None for v in values):
        return None
    first, rest = values[0], statistics.median(v for v in values[1:] if v is not None)
    if first is None or not _slow(first, rest, t):
        return None
    return Finding(
        rule="cold_start",
        severity="warning",
        title=f"iteration 1 was {first / rest:.1f}× slower than the others ({first:.1f} ms vs {rest:.1f} ms mean latency): "
        "it still included a cold start",
        evidence={"first_iteration_latency_ms": first, "other_iterations_median_ms": rest, "factor": first / rest,
                  "warmup_requests": p.digest.warmup_ok, "threshold_factor": t.cold_factor},
        advice=COLD_ADVICE,
        benchmark=p.index,
    )


def _expected(fit: LinearFit, input_tokens: int | None, median: float, d: PointDigest,
              t: Thresholds) -> tuple[float, str]:
    """What a request's TTFT should be: the prefill line at its prompt length where the line explains TTFT,
    else the median; with how it was judged ('prefill line' or 'median')."""
    slope, intercept, r2 = fit.slope_ms_per_1k_tokens, fit.intercept_ms, fit.r2
    if input_tokens is None or slope is None or intercept is None or r2 is None or slope <= 0 \
            or r2 < t.prefill_r2 or fit.points < t.prefill_min_points:
        return median, "median"
    at = intercept + slope * input_tokens / 1000
    return (at, "prefill line") if at > 0 else (median, "median")


def _against(value: float, expected: float, basis: str, input_tokens: int | None, median: float) -> str:
    if basis == "median":
        return f"{value / expected:.1f}× the median {expected:.1f} ms"
    return (f"{value / expected:.1f}× the {expected:.1f} ms its {input_tokens}-token prompt should take "
            f"(the point's prefill line; median {median:.1f} ms)")


def _first_request(p: PointData, t: Thresholds) -> Finding | None:
    """The earliest-sent measured request of the first iteration against what the others say it should take."""
    d = p.digest
    timed = d.first_iteration_latency  # measured ok requests of the lowest iteration, with a latency
    if timed.first is None or timed.count < t.cold_min_requests:
        return None
    first, rest = timed.first.value, timed.rest_median()
    if rest is None:
        return None
    n_in = timed.first.input_tokens
    fit = d.prefill.fit_without(float(n_in), first) if n_in is not None else d.prefill.fit()
    expected, basis = _expected(fit, n_in, rest, d, t)
    if not _slow(first, expected, t):
        return None
    warmed = d.warmup_ok
    why = f"after {warmed} warm-up requests: the warm-up was too short" if warmed else "with no warm-up"
    return Finding(
        rule="cold_start",
        severity="warning",
        title=f"the first measured request took {first:.1f} ms, {_against(first, expected, basis, n_in, rest)} ({why})",
        evidence={"first_request_ms": first, "median_ms": rest, "expected_ms": expected, "expected_from": basis,
                  "input_tokens": n_in, "factor": first / expected, "warmup_requests": warmed,
                  "threshold_factor": t.cold_factor},
        advice=COLD_ADVICE,
        benchmark=p.index,
    )


def _warmup(p: PointData, t: Thresholds) -> Finding | None:
    """The earliest-sent warm-up request against what the measured ones say it should take."""
    d = p.digest
    typical = d.measured_median()
    if d.first_warmup is None or typical is None or d.measured_timed < t.cold_min_requests:
        return None
    first, n_in = d.first_warmup.value, d.first_warmup.input_tokens
    expected, basis = _expected(d.prefill.fit(), n_in, typical, d, t)
    if not _slow(first, expected, t):
        return None
    return Finding(
        rule="cold_start",
        severity="info",
        title=f"the first warm-up request took {first:.1f} ms, {_against(first, expected, basis, n_in, typical)}: "
        "the warm-up kept a cold start out of the statistics",
        evidence={"first_warmup_ms": first, "measured_median_ms": typical, "expected_ms": expected,
                  "expected_from": basis, "input_tokens": n_in, "factor": first / expected,
                  "warmup_requests": d.warmup_timed, "threshold_factor": t.cold_factor},
        advice=COLD_ADVICE,
        benchmark=p.index,
    )


# too_few_samples -------------------------------------------------------------
def too_few_samples(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for i, b in enumerate(result.benchmarks) if (f := _too_few(i, b, t))]


def _too_few(index: int, bench: Benchmark, t: Thresholds) -> Finding | None:
    req = bench.summary.requests
    n = req.completed
    if n >= t.min_samples_p99 or req.total == 0:
        return None
    if n == 0:
        return Finding(
            rule="too_few_samples",
            severity="critical",
            title=f"no request completed (of {req.total}): there is nothing to measure",
            evidence={"completed": 0, "errored": req.errored, "incomplete": req.incomplete},
            advice="see the errors findings and the error field in requests.jsonl; check the target with one request first",
            benchmark=index,
        )
    s = bench.summary
    needs_ci = min_samples_for_ci(99.0)
    evidence: dict[str, float | int | str | None] = {"completed": n, "ttft_p99_ms": s.ttft_ms.p99, "ttft_max_ms": s.ttft_ms.max,
                                   "e2e_p99_ms": s.e2e_ms.p99, "e2e_max_ms": s.e2e_ms.max, "threshold": t.min_samples_p99}
    suggested, estimated = needs_ci, False
    for field, metric in (("ttft_ms", "ttft"), ("e2e_ms", "e2e")):
        cis = s.percentile_ci.get(field, {})
        for stat in ("p90", "p99"):
            ci = cis.get(stat)
            evidence[f"{metric}_{stat}_ci95_low_ms"] = None if ci is None else ci.low
            evidence[f"{metric}_{stat}_ci95_high_ms"] = None if ci is None else ci.high
        dist = getattr(s, field)
        need = required_samples(cis.get("p99"), dist.p99, dist.count, 99.0, CI_PRECISION) if dist.count else None
        suggested = max(suggested, need or 0)
        estimated = estimated or cis.get("p99") is not None
    evidence |= {"p99_ci_min_requests": needs_ci, "suggested_requests": suggested}
    return Finding(
        rule="too_few_samples",
        severity="warning",
        title=f"only {n} completed requests: p99 is essentially the slowest request (needs ≥ {t.min_samples_p99})",
        evidence=evidence,
        advice=f"use --requests {t.min_samples_p99} or more for p99 (1000 or more for p99.9), "
        "or --duration long enough to collect them; a 95% confidence interval of p99 needs "
        f"≥ {needs_ci} completed requests (p99.9: ≥ {min_samples_for_ci(99.9)})"
        + (f"; about {suggested} for one within ±{CI_PRECISION:.0%} of p99 at the observed spread" if estimated
           else f", so --requests {suggested} at the least, more for a tight one"),
        benchmark=index,
    )

