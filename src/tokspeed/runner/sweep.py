"""Turn a sweep or a capacity search into the load points the runner measures.

Both are `PointSource`s for `execute_points`: they yield a `LoadPoint` (config,
backend, workload) per benchmark and are sent each finished `Benchmark`. What
they learned (the sweep's fit, the capacity and its probes) is their return
value, which the runner stores on the result.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from tokspeed.backends.base import Backend
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.load.capacity import Capacity, Outcome, Search
from tokspeed.load.sweep import Sweep
from tokspeed.metrics.fit import fit_line
from tokspeed.results import Benchmark, CapacityProbe, CapacityResult, SweepInfo
from tokspeed.runner.run import LoadPoint, PointSource, Workload

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
            try:
                point = sweep.send(s.throughput.requests_per_s)
            except StopIteration:
                break
    if info.dimension == "input_tokens" and lengths:
        x, y = (np.asarray(v, dtype=float) for v in zip(*lengths))
        info = info.model_copy(update={"ttft_vs_input_tokens": fit_line(x, y)})
    return {"sweep": info}


def capacity_points(
    base: RunConfig, by: str, make_search: Callable[[float], Search], start: float | None, build: Build
) -> PointSource:
    """Probe load levels as the search asks until it settles; return the capacity.

    Without a given start, a rate search first measures one request at a time and starts
    at twice that rate (what one stream achieves), so it does not crawl up from 1 req/s.
    """
    slos = [str(s) for s in base.slos if s.kind != "per_request"]
    if not slos:
        raise ConfigError(
            "capacity search needs at least one percentile or run-level SLO",
            hint="e.g. --slo 'ttft_p99_ms<=500' --slo 'itl_p99_ms<=50'",
        )
    probes: list[tuple[float, Benchmark]] = []
    baseline_measured = start is None and by == "rate"
    if baseline_measured:
        cfg = point_config(base, {"profile": "synchronous"})
        baseline = yield LoadPoint("baseline: synchronous", cfg, *build(cfg))
        one_stream = baseline.summary.throughput.requests_per_s
        start = 2 * one_stream if one_stream else None  # one stream's rate always "keeps up": begin above it
    search = make_search(start or 1.0)
    value = next(search)
    while True:
        overrides = _probe_overrides(by, value)
        cfg = point_config(base, overrides)
        label = f"probe {value:.4g}/s" if by == "rate" else f"probe concurrency {int(value)}"
        bench = yield LoadPoint(label, cfg, *build(cfg))
        probes.append((value, bench))
        try:
            value = search.send(_outcome(bench, by))
        except StopIteration as stop:
            first = 1 if baseline_measured else 0
            return {"capacity": _capacity_result(stop.value, by, slos, probes, first)}


def _probe_overrides(by: str, value: float) -> dict[str, Any]:
    if by == "rate":
        return {"profile": "rate", "rate": round(value, 6)}
    return {"profile": "concurrency", "concurrency": max(1, int(round(value)))}


def _outcome(bench: Benchmark, by: str) -> Outcome:
    s = bench.summary
    failed = [v.slo for v in s.slo if v.kind != "per_request" and not v.met]
    reason = f"missed {', '.join(failed)}" if failed else ""
    achieved = s.throughput.requests_per_s if by == "rate" else None
    offered = s.schedule.offered_requests_per_s if by == "rate" and s.schedule is not None else None
    return Outcome(
        passed=not failed and s.requests.completed > 0, achieved_rate=achieved, reason=reason, offered_rate=offered
    )


def _capacity_result(
    cap: Capacity, by: str, slos: list[str], probes: list[tuple[float, Benchmark]], first_probe_index: int
) -> CapacityResult:
    logs: Iterator[Any] = iter(cap.probes)
    offset = first_probe_index
    probe_models = [
        CapacityProbe(value=value, passed=log.passed, reason=log.reason, benchmark=offset + i)
        for i, ((value, _), log) in enumerate(zip(probes, logs))
    ]
    best = _last_bench_at(cap.low, probes)
    return CapacityResult(
        by=by,  # type: ignore[arg-type]
        requests_per_s=(best.summary.throughput.requests_per_s if best and by == "concurrency" else cap.low),
        value=cap.low,
        low=cap.low,
        high=cap.high,
        uncertainty=cap.uncertainty,
        precision=cap.precision,
        slos=slos,
        goodput_requests_per_s=best.summary.goodput.requests_per_s if best and best.summary.goodput else None,
        probes=probe_models,
    )


def _last_bench_at(value: float | None, probes: list[tuple[float, Benchmark]]) -> Benchmark | None:
    matching = [b for v, b in probes if value is not None and v == value]
    return matching[-1] if matching else None
