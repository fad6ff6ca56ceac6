"""client_bound: the load generator, not the server, limited what was measured.

Fires, per load point, when any of these holds:

* open-loop rate profile without --max-concurrency and schedule lag
  (sent − scheduled) p99 > `lateness_p99_ms` (critical above `lateness_critical_ms`):
  requests left later than the schedule asked, so the offered rate was lower;
* event-loop lag p99 > `loop_lag_p99_ms` (client telemetry): timers fired late,
  so timestamps carry the client's own delay;
* tokspeed's process CPU mean ≥ `client_cpu_pct` (100 = one core; the event
  loop runs on one thread).

The last two are not judged for an in-process target (embedded, hf:, vllm:): its engine runs in
tokspeed's own process, so that process's CPU is the engine's work, and its tokens are stamped by
the engine's thread as they are generated, not by the event loop — neither says the client held
the measurement back, and no advice about the client would apply.
"""

from __future__ import annotations

from tokspeed.diagnosis.scopes import Scope, telemetry_scopes
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding, Severity

IN_PROCESS = frozenset({"embedded", "hf", "vllm"})  # target kinds whose engine shares tokspeed's process
ADVICE = (
    "the numbers understate the server: give the client more room — run tokspeed on an idle machine "
    "(not the server's host), close other load, install uvloop, lower --rate/--concurrency per process "
    "and run several tokspeed processes side by side, or use --max-concurrency to bound in-flight requests"
)


def client_bound(result: RunResult, t: Thresholds) -> list[Finding]:
    findings = [f for i, b in enumerate(result.benchmarks) if (f := _schedule_lag(i, b, t))]
    findings += [f for scope in telemetry_scopes(result) if (f := _client_telemetry(scope, t))]
    return findings


def _schedule_lag(index: int, bench: Benchmark, t: Thresholds) -> Finding | None:
    p = bench.profile
    lag = bench.summary.lateness_ms
    if p.get("kind") != "rate" or p.get("max_concurrency") or lag.p99 is None or lag.p99 <= t.lateness_p99_ms:
        return None
    severity: Severity = "critical" if lag.p99 > t.lateness_critical_ms else "warning"
    return Finding(
        rule="client_bound",
        severity=severity,
        title=f"the client fell behind its open-loop schedule: send lateness p99 {lag.p99:.1f} ms "
        f"(threshold {t.lateness_p99_ms:g} ms); the offered rate was lower than {p.get('rate')}/s",
        evidence={
            "lateness_p99_ms": lag.p99,
            "lateness_mean_ms": lag.mean,
            "lateness_max_ms": lag.max,
            "rate_per_s": p.get("rate"),
            "achieved_requests_per_s": bench.summary.throughput.requests_per_s,
            "threshold_ms": t.lateness_p99_ms,
        },
        advice=ADVICE,
        benchmark=index,
    )


def _client_telemetry(scope: Scope, t: Thresholds) -> Finding | None:
    client = scope.telemetry.client
    if client is None or scope.target.get("kind") in IN_PROCESS:
        return None
    lag, cpu = client.loop_lag_ms.p99, client.process_cpu_pct.mean
    causes = []
    if lag is not None and lag > t.loop_lag_p99_ms:
        causes.append(f"event-loop lag p99 {lag:.1f} ms (threshold {t.loop_lag_p99_ms:g} ms)")
    if cpu is not None and cpu >= t.client_cpu_pct:
        causes.append(f"tokspeed's CPU {cpu:.0f}% of a core (threshold {t.client_cpu_pct:g}%)")
    if not causes:
        return None
    return Finding(
        rule="client_bound",
        severity="warning",
        title="the client was saturated: " + "; ".join(causes),
        evidence={
            "loop_lag_p99_ms": lag,
            "loop_lag_max_ms": client.loop_lag_ms.max,
            "process_cpu_mean_pct": cpu,
            "process_cpu_max_pct": client.process_cpu_pct.max,
            "host_cpu_mean_pct": client.host_cpu_pct.mean,
            "cpu_count": client.cpu_count,
        },
        advice=ADVICE,
        benchmark=scope.benchmark,
    )
