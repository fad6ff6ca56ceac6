"""gpu_underutilised: the GPU idles while requests wait.

Fires, per load point with GPU telemetry (or the run's, when no point has its
own) and a target on this machine (in-process or loopback: the GPUs sampled are
this machine's), for each GPU whose utilisation mean < `gpu_util_low_pct` while
requests queue: the server's `waiting` mean > `queue_waiting_mean`, or the
client kept ≥ `busy_concurrency` requests in flight.
"""

from __future__ import annotations

from tokspeed.diagnosis.scopes import (
    Scope,
    in_flight_cap,
    target_is_local,
    telemetry_scopes,
)
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results import RunResult
from tokspeed.results.findings import Finding
from tokspeed.telemetry.schema import GPUSummary

ADVICE = (
    "the bottleneck is before the GPU: raise the server's batch limits (vLLM --max-num-seqs, "
    "--max-num-batched-tokens; SGLang --max-running-requests), look for CPU-bound work on the server "
    "(tokenisation, detokenisation, Python overhead: check its CPU with top) and for a saturated client "
    "(see client_bound); watch `nvidia-smi dmon` during the run to confirm"
)


def gpu_underutilised(result: RunResult, t: Thresholds) -> list[Finding]:
    return [f for scope in telemetry_scopes(result) if target_is_local(scope.target) for f in _scope(scope, t)]


def _scope(scope: Scope, t: Thresholds) -> list[Finding]:
    server = scope.telemetry.server
    waiting = server.waiting.mean if server is not None else None
    in_flight = in_flight_cap(scope.profile)
    queued = waiting is not None and waiting > t.queue_waiting_mean
    busy = in_flight is not None and in_flight >= t.busy_concurrency
    if not (queued or busy):
        return []
    return [_finding(scope, gpu, waiting, in_flight, t) for gpu in scope.telemetry.gpus if _idle(gpu, t)]


def _idle(gpu: GPUSummary, t: Thresholds) -> bool:
    util = gpu.utilization_pct
    return util.samples > 0 and util.mean is not None and util.mean < t.gpu_util_low_pct


def _finding(scope: Scope, gpu: GPUSummary, waiting: float | None, in_flight: int | None, t: Thresholds) -> Finding:
    util = gpu.utilization_pct.mean or 0.0
    why = f"{waiting:.1f} requests waiting in the server on average" if waiting else f"{in_flight} requests in flight"
    return Finding(
        rule="gpu_underutilised",
        severity="warning",
        title=f"GPU {gpu.index} was busy only {util:.0f}% of the time (threshold {t.gpu_util_low_pct:g}%) with {why}",
        evidence={
            "gpu": gpu.index,
            "gpu_name": gpu.name,
            "utilization_mean_pct": util,
            "utilization_max_pct": gpu.utilization_pct.max,
            "memory_used_max_mib": gpu.memory_used_mib.max,
            "server_waiting_mean": waiting,
            "client_in_flight": in_flight,
            "threshold_pct": t.gpu_util_low_pct,
        },
        advice=ADVICE,
        benchmark=scope.benchmark,
    )
