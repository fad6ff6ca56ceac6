"""What limits the run as load grows: the server, the batch, the KV cache, time before the server's clock.

* ttft_client_gap (result rule), warning: with server-reported timings (native protocols,
  `summary.server_timing`) over ≥ `gap_min_requests` requests, the client's TTFT p50 exceeds the
  server's own by ≥ `gap_min_ms` and ≥ `gap_share` of the client's: time lost before the server's
  clock starts (network, TLS, a proxy, the client's own delay, or a queue the server does not report).
* itl_load_growth (result rule), info: across the points of one concurrency or rate sweep (one
  target), ITL p50 at the highest load ≥ `itl_growth` × at the lowest and ≥ `itl_growth_min_ms`
  more: each decode step slows as the batch grows (batch saturation: compute or memory bandwidth).
* throughput_knee (result rule), info: in such a sweep of ≥ 3 loads, the lowest load whose output
  throughput (request throughput without tokens) is within `knee_gain` of the sweep's best while a
  higher load's E2E p50 is ≥ `knee_latency_growth` × the knee's: more load buys latency, not throughput.
* kv_cache_pressure (result rule), warning: server telemetry saw KV-cache usage ≥
  `kv_cache_full_pct` and preemptions > 0: requests were evicted and recomputed.
* server_bound (result rule), warning: an open-loop point whose server completed less than
  `server_keep_up` of the requests arriving in its steady window (arrivals measured from the
  send times, so a late client is already counted) while the client was not far behind its
  schedule (send lateness p99 ≤ `lateness_critical_ms`): the server, not tokspeed, is the
  bottleneck (`client_bound` is the other way round).
"""

from __future__ import annotations

from collections import defaultdict

from tokspeed.diagnosis.scopes import Scope, telemetry_scopes
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding

GAP_ADVICE = (
    "time passes before the server's clock starts: check the network path (latency to the server, TLS "
    "handshakes: keep connections alive), proxies and load balancers in front of it, the client's own load "
    "(see client_bound), and whether the server queues requests without reporting it"
)
ITL_ADVICE = (
    "each decode step slows as more sequences share the batch: the GPU is saturated (compute or memory "
    "bandwidth). Lower the concurrency to meet an ITL target (`tokspeed capacity --slo 'itl_p99_ms<=…'`), "
    "use FP8/quantised weights or a faster GPU, or more replicas"
)
KNEE_ADVICE = (
    "beyond the knee more load only adds latency: run at or below it, find the highest load that meets your "
    "latency SLO with `tokspeed capacity`, or add replicas for more throughput"
)
KV_PRESSURE_ADVICE = (
    "the KV cache filled and the server preempted (evicted and later recomputed) requests, which adds latency: "
    "give the cache more room (gpu_memory_utilization, an FP8 KV cache: --kv-cache-dtype fp8, quantised weights, "
    "a lower max_model_len), or lower --max-num-seqs / the concurrency"
)
SERVER_BOUND_ADVICE = (
    "the server cannot serve this rate: its queue grows and latencies with it. Lower --rate to what it sustains "
    "(`tokspeed capacity` finds it), add replicas, or give the server more capacity (batch limits, GPUs)"
)


# ttft_client_gap ------------------------------------------------------------------------
def ttft_client_gap(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for i, b in enumerate(result.benchmarks) if (f := _gap(i, b, t))]


def _gap(index: int, bench: Benchmark, t: Thresholds) -> Finding | None:
    st = bench.summary.server_timing
    if st is None or st.requests < t.gap_min_requests:
        return None
    client, server, gap = st.client_ttft_ms.p50, st.server_ttft_ms.p50, st.network_ms.p50
    if client is None or server is None or gap is None or client <= 0:
        return None
    if gap < t.gap_min_ms or gap < t.gap_share * client:
        return None
    return Finding(
        rule="ttft_client_gap",
        severity="warning",
        title=f"the client's TTFT p50 ({client:.1f} ms) exceeds the server's own ({server:.1f} ms) by {gap:.1f} ms "
        f"({gap / client:.0%}): time lost before the server's clock starts",
        evidence={"client_ttft_p50_ms": client, "server_ttft_p50_ms": server, "gap_p50_ms": gap,
                  "gap_p99_ms": st.network_ms.p99, "requests": st.requests, "threshold_ms": t.gap_min_ms,
                  "threshold_share": t.gap_share},
        advice=GAP_ADVICE,
        benchmark=index,
    )


# sweeps: itl_load_growth, throughput_knee --------------------------------------------------
def _sweeps(result: RunResult) -> list[tuple[str, list[tuple[float, int, Benchmark]]]]:
    """The points of each concurrency or rate sweep (one target), by load; synchronous counts as concurrency 1."""
    groups: dict[tuple[str, str], list[tuple[float, int, Benchmark]]] = defaultdict(list)
    for i, b in enumerate(result.benchmarks):
        p, target = b.profile, b.target or result.target
        kind = p.get("kind")
        if kind in ("synchronous", "concurrency") and p.get("concurrency"):
            load = ("concurrency", float(p["concurrency"]))
        elif kind == "rate" and p.get("rate"):
            load = ("rate", float(p["rate"]))
        else:
            continue
        groups[(load[0], str(target.get("url") or target.get("model") or ""))].append((load[1], i, b))
    return [(dim, sorted(group, key=lambda g: (g[0], g[1]))) for (dim, _), group in groups.items()
            if len({load for load, _, _ in group}) >= 2]


def itl_load_growth(result: RunResult, t: Thresholds) -> list[Finding]:
    findings = []
    for dimension, group in _sweeps(result):
        timed = [(load, b) for load, _, b in group if b.summary.itl_ms.p50 is not None]
        if len({load for load, _ in timed}) < 2:
            continue
        (lo_load, lo), (hi_load, hi) = timed[0], timed[-1]
        a, z = lo.summary.itl_ms.p50, hi.summary.itl_ms.p50
        assert a is not None and z is not None
        if a <= 0 or z < t.itl_growth * a or z - a < t.itl_growth_min_ms:
            continue
        findings.append(Finding(
            rule="itl_load_growth",
            severity="info",
            title=f"ITL p50 grew {z / a:.1f}× from {dimension} {lo_load:g} to {hi_load:g} ({a:.1f} → {z:.1f} ms): "
            "decoding slows as the batch grows (batch saturation)",
            evidence={"dimension": dimension, "low_load": lo_load, "high_load": hi_load, "itl_p50_low_ms": a,
                      "itl_p50_high_ms": z, "threshold_factor": t.itl_growth},
            advice=ITL_ADVICE,
            benchmark=None,
        ))
    return findings


def _throughput(b: Benchmark) -> float | None:
    tp = b.summary.throughput
    return tp.output_tokens_per_s if tp.output_tokens_per_s else tp.requests_per_s


def throughput_knee(result: RunResult, t: Thresholds) -> list[Finding]:
    findings = []
    for dimension, group in _sweeps(result):
        points = [(load, b, tp, b.summary.e2e_ms.p50) for load, _, b in group
                  if (tp := _throughput(b)) and b.summary.e2e_ms.p50]
        if len({load for load, *_ in points}) < 3:
            continue
        best = max(tp for _, _, tp, _ in points)
        knee_load, _, knee_tp, knee_e2e = next(p for p in points if p[2] >= (1 - t.knee_gain) * best)
        beyond = [(load, e2e) for load, _, _, e2e in points if load > knee_load and e2e is not None and knee_e2e
                  and e2e >= t.knee_latency_growth * knee_e2e]
        if not beyond or knee_e2e is None:
            continue
        far_load, far_e2e = beyond[-1]
        assert far_e2e is not None
        unit = "tok/s" if points[0][1].summary.throughput.output_tokens_per_s else "req/s"
        findings.append(Finding(
            rule="throughput_knee",
            severity="info",
            title=f"throughput levels off at {dimension} {knee_load:g} ({knee_tp:.1f} {unit}, within "
            f"{t.knee_gain:.0%} of the sweep's best {best:.1f}); up to {dimension} {far_load:g} E2E p50 grew "
            f"{far_e2e / knee_e2e:.1f}× ({knee_e2e:.0f} → {far_e2e:.0f} ms)",
            evidence={"dimension": dimension, "knee_load": knee_load, "knee_throughput": knee_tp,
                      "best_throughput": best, "unit": unit, "far_load": far_load, "e2e_p50_knee_ms": knee_e2e,
                      "e2e_p50_far_ms": far_e2e, "threshold_gain": t.knee_gain},
            advice=KNEE_ADVICE,
            benchmark=None,
        ))
    return findings


# kv_cache_pressure ----------------------------------------------------------------------------
def kv_cache_pressure(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for scope in telemetry_scopes(result) if (f := _kv(scope, t))]


def _kv(scope: Scope, t: Thresholds) -> Finding | None:
    server = scope.telemetry.server
    if server is None:
        return None
    kv, preempted = server.kv_cache_usage_pct.max, server.preemptions
    if kv is None or kv < t.kv_cache_full_pct or not preempted:
        return None
    return Finding(
        rule="kv_cache_pressure",
        severity="warning",
        title=f"the KV cache reached {kv:.0f}% and the server preempted {preempted:.0f} requests: "
        "evicted requests are recomputed, adding latency",
        evidence={"kv_cache_usage_max_pct": kv, "kv_cache_usage_mean_pct": server.kv_cache_usage_pct.mean,
                  "preemptions": preempted, "server_waiting_mean": server.waiting.mean,
                  "threshold_pct": t.kv_cache_full_pct},
        advice=KV_PRESSURE_ADVICE,
        benchmark=scope.benchmark,
    )


# server_bound -----------------------------------------------------------------------------------
def server_bound(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for i, b in enumerate(result.benchmarks) if (f := _server_bound(i, b, t))]


def _server_bound(index: int, bench: Benchmark, t: Thresholds) -> Finding | None:
    s = bench.summary
    done, arriving = s.throughput.sustained_requests_per_s, s.throughput.window_arrivals_per_s
    late = s.lateness_ms.p99
    if bench.profile.get("kind") != "rate" or done is None or not arriving or done >= t.server_keep_up * arriving:
        return None
    if late is None or late > t.lateness_critical_ms:
        return None  # the client fell far behind too: client_bound's critical case says so first
    return Finding(
        rule="server_bound",
        severity="warning",
        title=f"the server is the bottleneck: it completed {done:.3g} of {arriving:.3g} req/s arriving "
        f"({done / arriving:.0%}) as sent (send lateness p99 {late:.1f} ms)",
        evidence={"sustained_requests_per_s": done, "arrivals_per_s": arriving, "share": done / arriving,
                  "lateness_p99_ms": late, "threshold_share": t.server_keep_up},
        advice=SERVER_BOUND_ADVICE,
        benchmark=index,
    )
