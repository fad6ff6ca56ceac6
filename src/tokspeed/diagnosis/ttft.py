"""What TTFT is made of: waiting for a slot (ttft_queueing) or processing the prompt (ttft_prefill).

* ttft_queueing (result rule), info, two ways:
  - server telemetry: the `waiting` gauge's mean > `queue_waiting_mean` over a point;
  - across load points of one profile kind and target (a concurrency or rate sweep, a
    capacity search): TTFT p50 at the highest load ≥ `queue_growth` × at the lowest,
    while the mean prompt length changed by less than `same_input_ratio` — unless the
    server's own `waiting` gauge was sampled at the highest load and never exceeded
    `queue_waiting_mean`: then nothing queued in the server, and `ttft_growth` (info)
    says TTFT grew with load without a queue (CPU contention, a slower batched prefill,
    the client) instead of advising a larger batch.
  A KV-cache usage max ≥ `kv_cache_full_pct` changes the advice: the cache is the limit.
* ttft_prefill, info: TTFT ≈ intercept + slope × prompt tokens explains TTFT
  (r² ≥ `prefill_r2`) and the prefill part at the mean prompt length is ≥
  `prefill_share` of the mean TTFT — fitted over an input-length sweep
  (`sweep.ttft_vs_input_tokens`, result rule) or within one point whose prompt
  lengths vary ≥ `prefill_min_spread`× over ≥ `prefill_min_points` requests (point rule).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tokspeed.diagnosis.context import PointData
from tokspeed.diagnosis.scopes import Scope, telemetry_scopes
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.metrics.fit import LinearFit
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding
from tokspeed.telemetry.schema import SeriesStats

QUEUE_ADVICE = (
    "requests wait for a batch slot before their prefill: raise the server's concurrent-request limit "
    "(vLLM --max-num-seqs, SGLang --max-running-requests) if memory allows, add replicas, or keep the load "
    "below the knee — `tokspeed capacity --slo 'ttft_p99_ms<=…'` finds the highest load that meets your TTFT"
)
KV_ADVICE = (
    "the KV cache is full, so new requests wait for memory: give it more room (raise gpu_memory_utilization, "
    "an FP8 KV cache: --kv-cache-dtype fp8, quantised weights such as AWQ/GPTQ, a lower max_model_len) "
    "or lower the concurrency"
)
PREFILL_ADVICE = (
    "prefill dominates TTFT: shorten or reuse prompts (enable prefix caching for shared system prompts), "
    "enable chunked prefill so long prompts do not stall others, or add compute for prefill "
    "(tensor parallelism, FP8, a faster GPU)"
)


# ttft_queueing ----------------------------------------------------------------
def ttft_queueing(result: RunResult, t: Thresholds) -> list[Finding]:
    findings = [f for scope in telemetry_scopes(result) if (f := _server_queue(scope, result, t))]
    groups = _load_groups(result)
    return findings + [f for (dimension, _), group in groups.items() if (f := _growth(dimension, group, t, result))]


def _server_queue(scope: Scope, result: RunResult, t: Thresholds) -> Finding | None:
    server = scope.telemetry.server
    if server is None or server.waiting.mean is None or server.waiting.mean <= t.queue_waiting_mean:
        return None
    kv = server.kv_cache_usage_pct.max
    full = kv is not None and kv >= t.kv_cache_full_pct
    summary = result.benchmarks[scope.benchmark].summary if scope.benchmark is not None else None
    return Finding(
        rule="ttft_queueing",
        severity="info",
        title=f"requests queued in the server ({server.waiting.mean:.1f} waiting on average, at most "
        f"{server.waiting.max or 0:.0f}): TTFT includes the wait" + (f"; KV cache up to {kv:.0f}% full" if full else ""),
        evidence={
            "server_waiting_mean": server.waiting.mean,
            "server_waiting_max": server.waiting.max,
            "server_running_mean": server.running.mean,
            "kv_cache_usage_max_pct": kv,
            "preemptions": server.preemptions,
            "ttft_p50_ms": summary.ttft_ms.p50 if summary else None,
            "ttft_p99_ms": summary.ttft_ms.p99 if summary else None,
        },
        advice=KV_ADVICE if full else QUEUE_ADVICE,
        benchmark=scope.benchmark,
    )


def _load(profile: dict[str, Any]) -> tuple[str, float] | None:
    """(dimension, value) of a point's load: synchronous counts as concurrency 1."""
    kind = profile.get("kind")
    if kind in ("synchronous", "concurrency") and profile.get("concurrency"):
        return "concurrency", float(profile["concurrency"])
    if kind == "rate" and profile.get("rate"):
        return "rate", float(profile["rate"])
    return None


def _load_groups(result: RunResult) -> dict[tuple[str, str], list[tuple[float, int, Benchmark]]]:
    groups: dict[tuple[str, str], list[tuple[float, int, Benchmark]]] = defaultdict(list)
    for i, b in enumerate(result.benchmarks):
        load = _load(b.profile)
        if load is not None and b.summary.ttft_ms.p50 is not None:
            target = str((b.target or result.target).get("url") or (b.target or result.target).get("model") or "")
            groups[(load[0], target)].append((load[1], i, b))
    return groups


NO_QUEUE_ADVICE = (
    "the server's queue stayed empty, so a larger batch limit (--max-num-seqs) would not help: look for CPU "
    "contention on the server's or the client's host (other processes, tokspeed on the server's machine; see "
    "client_bound), a prefill that slows as the batch grows (enable chunked prefill), or network delay"
)


def _waiting(result: RunResult, index: int) -> SeriesStats | None:
    """The server's `waiting` gauge over a point (its own telemetry, else the run's when the run is that point)."""
    b = result.benchmarks[index]
    telemetry = b.telemetry if b.telemetry is not None else (result.telemetry if len(result.benchmarks) == 1 else None)
    server = telemetry.server if telemetry is not None else None
    if server is None or not server.waiting.samples or server.waiting.max is None:
        return None
    return server.waiting


def _growth(dimension: str, group: list[tuple[float, int, Benchmark]], t: Thresholds,
            result: RunResult | None = None) -> Finding | None:
    if len({load for load, _, _ in group}) < 2:
        return None
    low_load, _, low = min(group, key=lambda g: (g[0], g[1]))
    high_load, _, high = max(group, key=lambda g: (g[0], -g[1]))
    lo_ttft, hi_ttft = low.summary.ttft_ms.p50, high.summary.ttft_ms.p50
    lo_in, hi_in = low.summary.input_tokens.mean, high.summary.input_tokens.mean
    if not lo_ttft or hi_ttft is None or hi_ttft < t.queue_growth * lo_ttft:
        return None
    if lo_in and hi_in and max(lo_in, hi_in) / min(lo_in, hi_in) >= t.same_input_ratio:
        return None  # the prompts changed too: not a clean queueing signal
    high_index = max(group, key=lambda g: (g[0], -g[1]))[1]
    waiting = _waiting(result, high_index) if result is not None else None
    if waiting is not None and (waiting.max or 0.0) <= t.queue_waiting_mean:
        return Finding(
            rule="ttft_growth",
            severity="info",
            title=f"TTFT p50 grew {hi_ttft / lo_ttft:.1f}× from {dimension} {low_load:g} to {high_load:g} "
            f"({lo_ttft:.1f} → {hi_ttft:.1f} ms) while the server's waiting gauge stayed at "
            f"{waiting.max or 0:g} ({waiting.samples} samples): not queueing in the server",
            evidence={"dimension": dimension, "low_load": low_load, "high_load": high_load,
                      "ttft_p50_low_ms": lo_ttft, "ttft_p50_high_ms": hi_ttft, "server_waiting_max": waiting.max,
                      "server_waiting_samples": waiting.samples, "threshold_factor": t.queue_growth},
            advice=NO_QUEUE_ADVICE,
            benchmark=None,
        )
    return Finding(
        rule="ttft_queueing",
        severity="info",
        title=f"TTFT p50 grew {hi_ttft / lo_ttft:.1f}× from {dimension} {low_load:g} to {high_load:g} "
        f"({lo_ttft:.1f} → {hi_ttft:.1f} ms) at the same prompt length: TTFT is dominated by queueing",
        evidence={"dimension": dimension, "low_load": low_load, "high_load": high_load, "ttft_p50_low_ms": lo_ttft,
                  "ttft_p50_high_ms": hi_ttft, "input_tokens_mean_low": lo_in, "input_tokens_mean_high": hi_in,
                  "threshold_factor": t.queue_growth},
        advice=QUEUE_ADVICE,
        benchmark=None,
    )


# ttft_prefill ---------------------------------------------------------------------
def ttft_prefill_sweep(result: RunResult, t: Thresholds) -> list[Finding]:
    fit = result.sweep.ttft_vs_input_tokens if result.sweep else None
    points = [b.summary for b in result.benchmarks]
    ttfts = [s.ttft_ms.mean for s in points if s.ttft_ms.mean is not None]
    inputs = [s.input_tokens.mean for s in points if s.input_tokens.mean is not None]
    if fit is None or not ttfts or not inputs:
        return []
    finding = _prefill(fit, sum(inputs) / len(inputs), sum(ttfts) / len(ttfts), t, None, "across the sweep's points")
    return [finding] if finding else []


def ttft_prefill(p: PointData, t: Thresholds) -> list[Finding]:
    d = p.digest  # measured ok requests with input tokens: how many, the shortest and longest, the line
    s = p.bench.summary
    if d.with_input < t.prefill_min_points or d.input_min is None or d.input_max is None \
            or d.input_max < t.prefill_min_spread * d.input_min:
        return []
    if s.ttft_ms.mean is None or s.input_tokens.mean is None:
        return []
    finding = _prefill(d.prefill.fit(), s.input_tokens.mean, s.ttft_ms.mean, t, p.index, "within this point")
    return [finding] if finding else []


def _prefill(fit: LinearFit, mean_input: float, mean_ttft: float, t: Thresholds, index: int | None,
             where: str) -> Finding | None:
    slope, r2 = fit.slope_ms_per_1k_tokens, fit.r2
    if slope is None or r2 is None or slope <= 0 or r2 < t.prefill_r2 or mean_ttft <= 0:
        return None
    prefill_ms = slope * mean_input / 1000
    part = prefill_ms / mean_ttft
    if part < t.prefill_share:
        return None
    return Finding(
        rule="ttft_prefill",
        severity="info",
        title=f"TTFT grows with prompt length ({slope:.1f} ms per 1k input tokens, r² {r2:.2f}, {where}): "
        f"prefill is about {min(part, 1.0) * 100:.0f}% of TTFT at the mean prompt ({mean_input:.0f} tokens)",
        evidence={"slope_ms_per_1k_tokens": slope, "intercept_ms": fit.intercept_ms, "r2": r2, "points": fit.points,
                  "mean_input_tokens": mean_input, "mean_ttft_ms": mean_ttft, "prefill_share": part,
                  "threshold_r2": t.prefill_r2},
        advice=PREFILL_ADVICE,
        benchmark=index,
    )
