"""Turn a sweep or a capacity search into the load points the runner measures.

Both are `PointSource`s for `execute_points`: they yield a `LoadPoint` (config,
backend, workload) per benchmark and are sent each finished `Benchmark`. What
they learned (the sweep's fit, the capacity and its probes) is their return
value, which the runner stores on the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokspeed.backends.base import Backend
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.load.capacity import (
    CLIENT_SHORT,
    CLIENT_SHORT_SAID,
    Capacity,
    Outcome,
    ProbeLog,
    Search,
    bracket,
    crossing,
    judge,
)
from tokspeed.load.sweep import Sweep
from tokspeed.metrics.fit import fit_line
from tokspeed.metrics.sustained import window_arrivals
from tokspeed.results import Benchmark, CapacityProbe, CapacityResult, SweepInfo
from tokspeed.runner.run import LoadPoint, PointSource, SourceStopped, Workload

Build = Callable[[RunConfig], "tuple[Backend, Workload]"]


def point_config(base: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """The base config with one point's overrides, validated as a whole."""
    data = base.model_dump()
    data.update(overrides)
    if data.get("profile") != "rate":
        data["max_concurrency"] = None
    try:
        return RunConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"sweep point {overrides}: {exc}") from exc


def sweep_points(
    base: RunConfig,
    targets: list[str | None],
    make_sweep: Callable[[], Sweep],
    build: Build,
    info: SweepInfo,
) -> PointSource:
    """Every point of the sweep, for each target in turn (the same workload on each)."""
    lengths: list[tuple[float, float]] = []
    for target in targets:
        sweep = make_sweep()
        point = next(sweep)
        while True:
            cfg = point_config(base, {**point.overrides, "target": target})
            name = point.label if len(targets) == 1 else f"{target or 'embedded'} · {point.label}"
            bench = yield LoadPoint(name, cfg, *build(cfg))
            s = bench.summary
            if s.input_tokens.mean is not None and s.ttft_ms.mean is not None:
                lengths.append((s.input_tokens.mean, s.ttft_ms.mean))
            try:  # what the server sustained, not completions over a window holding the ramp and the drain
                point = sweep.send(s.throughput.sustained_requests_per_s or s.throughput.requests_per_s)
            except StopIteration:
                break
    if info.dimension == "input_tokens" and lengths:
        x, y = (np.asarray(v, dtype=float) for v in zip(*lengths))
        info = info.model_copy(update={"ttft_vs_input_tokens": fit_line(x, y)})
    return {"sweep": info}


@dataclass(frozen=True)
class ProbeSettings:
    """How long each capacity probe holds its load (see `capacity_points`)."""

    duration_s: float = 10.0  # the measured (steady) window of a probe
    warmup_s: float = 3.0  # the load held before it, so the window starts on a loaded server
    min_requests: int | None = None  # --requests: a rate probe lasts at least this many arrivals
    max_time_s: float | None = 1800.0  # the whole search's budget (--max-time)
    max_value: float | None = None  # never probe above this rate/concurrency (--max-rate)
    precision: float = 0.05  # the search narrows its bracket to this, relative (--precision)


DEFAULT_MIN_REQUESTS = 200  # a rate probe's arrivals, when --requests is not given ...
MAX_AUTO_PROBE_S = 60.0  # ... unless that would take longer than this
BASELINE_REQUESTS = 20  # the synchronous baseline: one request at a time, at most this many


def capacity_points(
    base: RunConfig,
    by: str,
    make_search: Callable[[float, float | None], Search],
    start: float | None,
    build: Build,
    settings: ProbeSettings = ProbeSettings(),
) -> PointSource:
    """Probe load levels as the search asks until it settles; return the capacity.

    Every probe holds its load: `settings.warmup_s` of the same rate (or width) runs
    before its measured window of `settings.duration_s` (a rate probe: at least
    --requests arrivals, by default 200 capped at 60 s), so its percentiles and its
    keep-up verdict are the server's steady state, never a start from empty nor a
    drain; each draws its own arrival seed. Without a given start, a rate search
    first measures one request at a time (at most 20 requests): if that already
    misses an SLO the search ends there, saying so; else it starts at twice that
    rate. Stopped early (budget, Ctrl-C), it returns the probes and the bracket so far.
    """
    slos = [str(s) for s in base.slos if s.kind != "per_request"]
    if not slos:
        raise ConfigError(
            "capacity search needs at least one percentile or run-level SLO",
            hint="e.g. --slo 'ttft_p99_ms<=500' --slo 'itl_p99_ms<=50'",
        )
    probes: list[tuple[float, Benchmark]] = []
    logs: list[ProbeLog] = []
    first = 0
    spent = _Spent(time.monotonic())
    try:
        floor: float | None = None
        if start is None and by == "rate":
            first = 1
            cfg = point_config(base, _baseline_overrides(base, settings))
            baseline = yield LoadPoint("baseline: synchronous", cfg, *build(cfg))
            spent.add(baseline)
            verdict = _outcome(baseline, "rate", None)
            if not verdict.passed:
                return _result(by, slos, probes, logs, first, base, spent, settings.precision, "baseline",
                               f"no load meets the SLOs: even one request at a time {verdict.reason}")
            one_stream = baseline.summary.throughput.requests_per_s
            start = 2 * one_stream if one_stream else None  # one stream's rate always "keeps up": begin above it
            floor = one_stream / 8 if one_stream else None
        search = make_search(start or 1.0, floor)
        value = next(search)
        while True:
            length = _probe_seconds(by, value, settings)
            if settings.max_time_s is not None and spent.seconds() + length > settings.max_time_s:
                return _result(by, slos, probes, logs, first, base, spent, settings.precision, "budget",
                               f"the search's --max-time ({settings.max_time_s:g} s) ran out")
            cfg = point_config(base, _probe_overrides(by, value, settings, base.seed + len(probes) + 1))
            label = f"probe {value:.4g}/s" if by == "rate" else f"probe concurrency {int(value)}"
            bench = yield LoadPoint(label, cfg, *build(cfg))
            spent.add(bench)
            probes.append((value, bench))
            outcome = _outcome(bench, by, value)
            judged = judge(outcome, value)  # as the search will judge it: kept for a search stopped early
            logs.append(ProbeLog(rate=value, passed=judged.passed, reason=judged.reason))
            try:
                value = search.send(outcome)
            except StopIteration as stop:
                cap: Capacity = stop.value
                return _result(by, slos, probes, cap.probes, first, base, spent, settings.precision,
                               cap.stopped_by, "", cap)
    except SourceStopped:
        return _result(by, slos, probes, logs, first, base, spent, settings.precision, "interrupted", "")


@dataclass
class _Spent:
    began: float
    requests: int = 0

    def add(self, bench: Benchmark) -> None:
        self.requests += bench.summary.requests.total

    def seconds(self) -> float:
        return time.monotonic() - self.began


def _baseline_overrides(base: RunConfig, settings: ProbeSettings) -> dict[str, Any]:
    return {"profile": "synchronous", "requests": min(base.requests or BASELINE_REQUESTS, BASELINE_REQUESTS),
            "duration_s": settings.duration_s}


def _probe_seconds(by: str, value: float, settings: ProbeSettings) -> float:
    """A probe's measured window: the set duration, longer for a rate probe whose arrivals would be few."""
    if by != "rate":
        return settings.duration_s
    if settings.min_requests is not None:
        return max(settings.duration_s, settings.min_requests / value)
    return max(settings.duration_s, min(DEFAULT_MIN_REQUESTS / value, MAX_AUTO_PROBE_S))


def _probe_overrides(by: str, value: float, settings: ProbeSettings, seed: int) -> dict[str, Any]:
    held = {"duration_s": _probe_seconds(by, value, settings), "requests": None, "warmup": None,
            "warmup_s": settings.warmup_s or None, "seed": seed}
    if by == "rate":
        return {"profile": "rate", "rate": round(value, 6), **held}
    return {"profile": "concurrency", "concurrency": max(1, int(round(value))), **held}


def _outcome(bench: Benchmark, by: str, asked: float | None) -> Outcome:
    s = bench.summary
    failed = [v for v in s.slo if v.kind != "per_request" and not v.met]
    reason = "missed " + ", ".join(f"{v.slo} ({_observed(v.observed)})" for v in failed) if failed else ""
    if not failed and not s.requests.completed:
        reason = "no request completed"
    t = s.throughput
    sent = s.schedule.sent_requests_per_s if s.schedule is not None else None
    limited = by == "rate" and asked is not None and sent is not None and sent < CLIENT_SHORT * asked
    if limited:
        reason = f"{CLIENT_SHORT_SAID} {sent:.3g} of {asked:.3g} req/s asked" + (f"; {reason}" if reason else "")
    return Outcome(
        passed=not failed and s.requests.completed > 0,
        achieved_rate=t.sustained_requests_per_s if by == "rate" else None,
        reason=reason,
        offered_rate=t.window_arrivals_per_s if by == "rate" else None,
        arrived=window_arrivals(t),
        client_limited=limited,
    )


def _observed(value: float | None) -> str:
    return "no value" if value is None else f"{value:.4g}"


def _result(
    by: str,
    slos: list[str],
    probes: list[tuple[float, Benchmark]],
    logs: list[ProbeLog],
    first: int,
    base: RunConfig,
    spent: _Spent,
    precision: float,
    stopped_by: str,
    finding: str,
    cap: Capacity | None = None,
) -> dict[str, Any]:
    logs = logs[: len(probes)]
    low, high = (cap.low, cap.high) if cap is not None else bracket(logs)
    models = [
        CapacityProbe(value=v, passed=log.passed, reason=log.reason, benchmark=first + i,
                      offered_requests_per_s=b.summary.throughput.window_arrivals_per_s,
                      sustained_requests_per_s=b.summary.throughput.sustained_requests_per_s)
        for i, ((v, b), log) in enumerate(zip(probes, logs))
    ]
    best = _last_bench_at(low, probes)
    ceiling = _ceiling([b for _, b in probes])
    fitted = fitted_value(models, [b for _, b in probes], low, high, base) if by == "rate" else None
    rps = _capacity_rps(best, fitted if fitted is not None else low, by, ceiling)
    interval = capacity_interval(models, [b for _, b in probes], low, high, base, by)
    if interval is not None and rps is not None:  # the fit may lie past a bracketing probe that was noise
        interval = [min(interval[0], rps) if interval[0] is not None else rps,
                    max(interval[1], rps) if interval[1] is not None else None]
    result = CapacityResult(
        by=by,  # type: ignore[arg-type]
        requests_per_s=rps,
        value=low,
        low=low,
        high=high,
        uncertainty=(high - low) / 2 if low is not None and high is not None else None,
        precision=precision,
        slos=slos,
        goodput_requests_per_s=best.summary.goodput.requests_per_s if best and best.summary.goodput else None,
        probes=models,
        interval_requests_per_s=interval,
        fitted=fitted is not None,
        stopped_by=stopped_by,
        requests_spent=spent.requests,
        seconds_spent=round(spent.seconds(), 3),
    )
    result.finding = finding or capacity_finding(result)
    return {"capacity": result}


def _capacity_rps(best: Benchmark | None, low: float | None, by: str, ceiling: float | None = None) -> float | None:
    """What the best passing probe really carried, in req/s.

    A rate probe: its rate as sent (its schedule, rescaled over warm-up and window, offers its
    label; a late client sent less: the label × sent / scheduled rate of its requests), never above `ceiling`, the most the server completed at steady
    state in any probe of the search (a short probe just past saturation can pass while the queue
    grows slowly: it still cannot carry more than the server completes). A concurrency probe: the
    server's sustained completions.
    """
    if best is None:
        return None
    t, schedule = best.summary.throughput, best.summary.schedule
    if by != "rate":
        return t.sustained_requests_per_s or t.requests_per_s
    if low is None:
        return None
    sent = low  # the rescaled schedule offers its label; a late client sent less, by sent/offered
    if schedule is not None and schedule.sent_requests_per_s and schedule.offered_requests_per_s:
        sent = low * min(1.0, schedule.sent_requests_per_s / schedule.offered_requests_per_s)
    return min(sent, ceiling) if ceiling else sent


def fitted_value(probes: list[CapacityProbe], benches: list[Benchmark], low: float | None, high: float | None,
                 base: RunConfig) -> float | None:
    """The rate where the SLOs' figures, fitted across the probes near [low, high], meet their limits.

    For each percentile or run-level SLO `crossing` fits the probes' figures against their rates (a
    probe whose client could not send its rate is left out: that rate is not what ran);
    the capacity is the lowest crossing, never at or above a probe that failed as saturated (its
    queue grew whatever its percentiles said): there the highest pass below it stands. None without
    a bracket or a crossing (the highest passing rate stands).
    """
    if low is None or high is None:
        return None
    found: list[float] = []
    for slo in base.slos:
        if slo.kind == "per_request" or slo.op not in ("<=", "<", ">=", ">"):
            continue
        points = [(p.value, v.observed) for p, b in zip(probes, benches) for v in b.summary.slo
                  if v.slo == str(slo) and v.observed is not None and CLIENT_SHORT_SAID not in p.reason]
        x = crossing(points, slo.value, slo.op in ("<=", "<"), low, high)
        if x is not None:
            found.append(x)
    if not found:
        return None
    value = min(found)
    # where a probe's client sent short of its label, the server fell behind the rate that was sent
    saturated = [min(p.value, p.offered_requests_per_s) if CLIENT_SHORT_SAID in p.reason and p.offered_requests_per_s
                 else p.value for p in probes if not p.passed and p.reason.startswith("over-saturated")]
    if saturated and value >= min(saturated):
        return max((p.value for p in probes if p.passed and p.value < min(saturated)), default=None)
    return value


def _ceiling(benches: list[Benchmark]) -> float | None:
    """The most requests per second the server completed at steady state in any probe."""
    rates = [b.summary.throughput.sustained_requests_per_s for b in benches]
    return max((r for r in rates if r), default=None)


def capacity_interval(
    probes: list[CapacityProbe], benches: list[Benchmark], low: float | None, high: float | None,
    base: RunConfig, by: str,
) -> list[float | None] | None:
    """[low, high] req/s: the bracketing probes, each widened one probe out where its verdict is marginal (low ≤ high).

    Marginal: an SLO's observed percentile lies within its own 95% interval of the limit
    (the probe could as well have gone the other way). Lower end: the best passing probe's
    requests/s (or the next lower pass's, if marginal); upper end: the lowest failing probe's
    offered rate (or the next higher fail's, if marginal; None when nothing failed).
    """
    if low is None:
        return None
    passes = sorted(((p.value, b) for p, b in zip(probes, benches) if p.passed and p.value <= low), key=_value)
    fails = sorted(((p.value, b) for p, b in zip(probes, benches) if not p.passed and high is not None and p.value >= high),
                   key=_value)
    lo_bench = _pick(passes[::-1], base)
    hi_bench = _pick(fails, base)
    lo = _capacity_rps(lo_bench, low, by, _ceiling(benches)) if lo_bench is not None else None
    hi = None
    if hi_bench is not None:
        t = hi_bench.summary.throughput
        hi = (t.window_arrivals_per_s if by == "rate" else t.sustained_requests_per_s) or t.requests_per_s
    return [lo, hi]


def _value(probe: tuple[float, Benchmark]) -> float:
    return probe[0]


def _pick(ordered: list[tuple[float, Benchmark]], base: RunConfig) -> Benchmark | None:
    """The first probe of `ordered` (nearest the boundary), or the next one when its verdict is marginal."""
    if not ordered:
        return None
    if len(ordered) > 1 and _marginal(ordered[0][1], base):
        return ordered[1][1]
    return ordered[0][1]


def _marginal(bench: Benchmark, base: RunConfig) -> bool:
    s = bench.summary
    for slo in base.slos:
        if slo.kind != "percentile" or slo.stat is None:
            continue
        ci = (s.percentile_ci.get(f"{slo.metric}_{slo.unit}") or {}).get(slo.stat)
        if ci is not None and ci.low <= slo.value <= ci.high:
            return True
    return False


def capacity_finding(c: CapacityResult) -> str:
    """The search's outcome in one sentence."""
    unit = "req/s" if c.by == "rate" else "concurrent requests"
    if c.value is None:
        return f"no probed load met {', '.join(c.slos)} ({len(c.probes)} probes, stopped: {c.stopped_by})"
    held = f"{c.value:.4g} {unit}" + (f" = {c.requests_per_s:.4g} req/s" if c.requests_per_s else "")
    if c.stopped_by == "max_value":
        return f"the SLOs held up to {held}, the highest load probed (--max-rate): the capacity is at least that"
    if c.stopped_by == "client":
        return f"the SLOs held up to {held}; above it the client could not send the asked rate, so the server's limit was not reached"
    if c.high is None:
        return f"the SLOs held up to {held}; no probe failed (stopped: {c.stopped_by})"
    return f"capacity {held} under {', '.join(c.slos)}"


def _last_bench_at(value: float | None, probes: list[tuple[float, Benchmark]]) -> Benchmark | None:
    matching = [b for v, b in probes if value is not None and v == value]
    return matching[-1] if matching else None
