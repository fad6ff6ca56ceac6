"""ttft_tail (point rule): TTFT with a tail of outliers, or in two modes.

Over the measured successful requests' TTFT (streamed points only):

* bimodal, warning: sorted, the TTFTs split where one value is ≥ `bimodal_ratio` × the one
  before it, with ≥ `bimodal_min_share` of the requests on each side (≥
  `bimodal_min_requests` requests) and the jump ≥ `bimodal_min_gap_ms` — unless the prompt-length line explains TTFT (the
  `ttft_prefill` fit: two prompt lengths make two modes honestly);
* else a tail, warning: with ≥ `min_samples_p99` requests, p99 ≥ `tail_factor` × the reference and
  ≥ `tail_min_ms` above it. The reference is p50 — or, when the prompt-length line explains TTFT,
  what the line predicts for the p99 prompt, if that is more: a percentile of a linear function of
  the prompt length is that function of the prompt length's percentile, so a few long prompts
  make a long TTFT p99 honestly (the embedded default's mixed prompts did), and only a p99 beyond
  what its prompts explain is a tail.
"""

from __future__ import annotations

import math

import numpy as np

from tokspeed.diagnosis.context import PointData, pct
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.metrics.fit import LinearFit
from tokspeed.results.findings import Finding

BIMODAL_ADVICE = (
    "two kinds of request are mixed: prefix-cache hits and misses, replicas of different speed behind a load "
    "balancer, requests that waited for a batch slot and ones that did not, or preempted requests; compare the "
    "slow ones' send times and prompts in requests.jsonl (`tokspeed report DIR --csv -`) and report the modes "
    "separately rather than one percentile"
)
TAIL_ADVICE = (
    "a few requests are far slower than the rest: look for stalls (garbage collection, a scheduler that "
    "prefills a long prompt while others wait: chunked prefill helps), retries, or queueing bursts; the mean "
    "and p50 hide it, so set SLOs on p99"
)


def ttft_tail(p: PointData, t: Thresholds) -> list[Finding]:
    if not p.bench.summary.ttft_ms.count:
        return []  # not streamed: the latency is E2E, which output lengths spread
    values = np.sort(p.digest.measured_latency.read().values())
    found = _bimodal(p, values, t)
    if found is None:
        found = _tail(p, values, t)
    return [found] if found else []


def _explains(fit: LinearFit, t: Thresholds) -> bool:
    """Whether the TTFT-vs-prompt line explains TTFT: a positive slope with r² ≥ `prefill_r2`."""
    return bool(fit.slope_ms_per_1k_tokens and fit.slope_ms_per_1k_tokens > 0 and fit.r2 is not None
                and fit.r2 >= t.prefill_r2)


def _bimodal(p: PointData, v: np.ndarray, t: Thresholds) -> Finding | None:
    n = len(v)
    if n < t.bimodal_min_requests:
        return None
    edge = max(1, math.ceil(t.bimodal_min_share * n))
    lower, upper = v[edge - 1 : n - edge], v[edge : n - edge + 1]  # candidate splits: v[k-1] | v[k]
    if not len(lower):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(lower > 0, upper / lower, 0.0)
    k = int(np.argmax(ratios))
    if ratios[k] < t.bimodal_ratio or upper[k] - lower[k] < t.bimodal_min_gap_ms or _explains(p.digest.prefill.fit(), t):
        return None
    split = edge + k  # v[:split] the fast mode, v[split:] the slow one
    fast, slow = v[:split], v[split:]
    fast_p50, slow_p50 = float(np.median(fast)), float(np.median(slow))
    return Finding(
        rule="ttft_tail",
        severity="warning",
        title=f"TTFT is bimodal: {pct(len(fast) / n)} of requests around {fast_p50:.1f} ms, {pct(len(slow) / n)} "
        f"around {slow_p50:.1f} ms, nothing between {float(fast[-1]):.1f} and {float(slow[0]):.1f} ms",
        evidence={"requests": n, "fast_share": len(fast) / n, "fast_p50_ms": fast_p50, "fast_max_ms": float(fast[-1]),
                  "slow_share": len(slow) / n, "slow_p50_ms": slow_p50, "slow_min_ms": float(slow[0]),
                  "threshold_ratio": t.bimodal_ratio},
        advice=BIMODAL_ADVICE,
        benchmark=p.index,
    )


def _tail(p: PointData, v: np.ndarray, t: Thresholds) -> Finding | None:
    n = len(v)
    if n < t.min_samples_p99:
        return None
    p50, p99 = (float(x) for x in np.percentile(v, [50, 99]))
    expected = _prompts_p99_ttft(p, t)
    reference = max(p50, expected) if expected is not None else p50
    if p50 <= 0 or p99 < t.tail_factor * reference or p99 - reference < t.tail_min_ms:
        return None
    outliers = int(np.sum(v > t.tail_factor * p50))
    explained = f"; the p99 prompt explains {expected:.1f} ms" if expected is not None and expected > p50 else ""
    return Finding(
        rule="ttft_tail",
        severity="warning",
        title=f"TTFT has a long tail: p99 {p99:.1f} ms is {p99 / p50:.1f}× the p50 {p50:.1f} ms "
        f"({outliers} of {n} requests above {t.tail_factor:g}× p50{explained})",
        evidence={"requests": n, "ttft_p50_ms": p50, "ttft_p99_ms": p99, "ttft_max_ms": float(v[-1]),
                  "outliers": outliers, "threshold_factor": t.tail_factor, "prompt_explained_p99_ms": expected},
        advice=TAIL_ADVICE,
        benchmark=p.index,
    )


def _prompts_p99_ttft(p: PointData, t: Thresholds) -> float | None:
    """The TTFT the prompt-length line predicts for the p99 prompt, when the line explains TTFT."""
    fit, tokens = p.digest.prefill.fit(), p.bench.summary.input_tokens.p99
    if not _explains(fit, t) or tokens is None or fit.slope_ms_per_1k_tokens is None or fit.intercept_ms is None:
        return None
    return fit.intercept_ms + fit.slope_ms_per_1k_tokens * tokens / 1000
