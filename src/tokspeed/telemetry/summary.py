"""Reduce the telemetry.jsonl lines of one time window to a `TelemetrySummary` (pure functions).

A window runs from one `Mark` to another: exact snapshots of the process CPU time and of each
GPU's energy counter, so `cpu_seconds` and `energy_j` are differences of two readings, not sums
of samples. Everything else is the samples whose `t_ns` lies in the window, reduced by
`series_stats` (mean, max, min, p99). Formulas:

* energy_j (per GPU) = energy counter at the end − at the start, in J
* energy_j (the window's) = Σ energy_j over every GPU (None unless every GPU gave its energy;
  absent, never 0, without a GPU)
* energy_per_output_token_j = energy_j / output tokens of the window's completed requests
* output_tokens_per_j = output tokens of the window's completed requests / energy_j (its inverse;
  None when the energy is 0: a counter that did not move says nothing)
* cpu_seconds = process user+sys CPU time at the end − at the start
* cpu_ms_per_request = cpu_seconds × 1000 / requests finished in the window
* prefix_cache_hit_rate = Δ hits / Δ queries (vLLM's counters), or the mean of a hit-rate gauge
* preemptions = Δ of the engine's preemption counter
* spec_decode (vLLM's counters, as its own client reports them): acceptance_rate =
  Δ accepted tokens / Δ draft tokens; mean_acceptance_length = 1 + Δ accepted tokens / Δ drafts;
  per_position_acceptance_rate[i] = Δ accepted at position i / Δ drafts
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tokspeed.telemetry.engines import EngineMetrics
from tokspeed.telemetry.gpu import GPU_FIELDS, GpuInfo
from tokspeed.telemetry.log import Line
from tokspeed.telemetry.schema import (
    ClientSummary,
    GPUSummary,
    ServerSummary,
    SpecDecodeSummary,
    TelemetrySummary,
)
from tokspeed.telemetry.stats import counter_delta, series_stats

NS = 1_000_000_000


@dataclass(frozen=True)
class Mark:
    """A window boundary: when (epoch ns), the process CPU time, each GPU's energy counter, the log position."""

    t_ns: int
    cpu_s: float
    energy_mj: dict[int, int | None] = field(default_factory=dict)
    offset: int = 0


@dataclass(frozen=True)
class Setup:
    """What is being sampled: the interval, the GPUs, the server endpoint (url, engine), notes."""

    interval_s: float
    gpus: list[GpuInfo] = field(default_factory=list)
    server_url: str | None = None
    engine: EngineMetrics | None = None
    cpu_count: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Work:
    """What the load did in the window: output tokens of completed requests, requests finished."""

    output_tokens: int | None = None
    requests: int | None = None


def summarise(lines: Iterable[Line], begin: Mark, end: Mark, setup: Setup, work: Work = Work(),
              server: bool = True) -> TelemetrySummary:
    """The summary of the samples in [begin, end]; `server=False` leaves the server out."""
    by_kind: dict[str, list[Line]] = {"gpu": [], "client": [], "server": []}
    for line in lines:
        t = line.get("t_ns")
        if isinstance(t, int) and begin.t_ns <= t <= end.t_ns and line.get("kind") in by_kind:
            by_kind[line["kind"]].append(line)
    gpus = [_gpu(info, by_kind["gpu"], begin, end) for info in setup.gpus]
    energy = total_energy([g.energy_j for g in gpus])
    return TelemetrySummary(
        interval_s=setup.interval_s,
        window_s=(end.t_ns - begin.t_ns) / NS,
        gpus=gpus,
        client=_client(by_kind["client"], begin, end, setup, work),
        server=_server(by_kind["server"], setup) if server and setup.server_url and setup.engine else None,
        energy_j=energy,
        energy_per_output_token_j=energy_per_token([g.energy_j for g in gpus], work.output_tokens),
        output_tokens_per_j=tokens_per_energy(energy, work.output_tokens),
        notes=list(setup.notes),
    )


def energy_per_token(energies_j: list[float | None], output_tokens: int | None) -> float | None:
    """Σ energy / output tokens; None without GPUs, with a GPU's energy unknown, or with no tokens."""
    if not energies_j or any(e is None for e in energies_j) or not output_tokens:
        return None
    return sum(e for e in energies_j if e is not None) / output_tokens


def total_energy(energies_j: list[float | None]) -> float | None:
    """Σ energy of every GPU; None without GPUs or with a GPU's energy unknown."""
    if not energies_j or any(e is None for e in energies_j):
        return None
    return sum(e for e in energies_j if e is not None)


def tokens_per_energy(energy_j: float | None, output_tokens: int | None) -> float | None:
    """Output tokens / energy; None without an energy, with none used, or with no tokens."""
    if not energy_j or not output_tokens:
        return None
    return output_tokens / energy_j


def _gpu(info: GpuInfo, lines: list[Line], begin: Mark, end: Mark) -> GPUSummary:
    mine = [line for line in lines if line.get("gpu") == info.index]
    stats = {name: series_stats(line.get(name) for line in mine) for name in GPU_FIELDS if name != "energy_mj"}
    return GPUSummary(index=info.index, name=info.name, memory_total_mib=info.memory_total_mib,
                      energy_j=_energy_j(info.index, mine, begin, end), **stats)


def _energy_j(index: int, lines: list[Line], begin: Mark, end: Mark) -> float | None:
    first, last = begin.energy_mj.get(index), end.energy_mj.get(index)
    if first is not None and last is not None:
        return (last - first) / 1000 if last >= first else None
    delta = counter_delta([line.get("energy_mj") for line in lines])
    return None if delta is None else delta / 1000


def _client(lines: list[Line], begin: Mark, end: Mark, setup: Setup, work: Work) -> ClientSummary:
    cpu_s = end.cpu_s - begin.cpu_s
    per_request = cpu_s * 1000 / work.requests if work.requests else None
    return ClientSummary(
        process_cpu_pct=series_stats(line.get("process_cpu_pct") for line in lines),
        host_cpu_pct=series_stats(line.get("host_cpu_pct") for line in lines),
        rss_mib=series_stats(line.get("rss_mib") for line in lines),
        loop_lag_ms=series_stats(line.get("loop_lag_ms") for line in lines),
        cpu_seconds=cpu_s,
        cpu_ms_per_request=per_request,
        cpu_count=setup.cpu_count,
    )


def _server(lines: list[Line], setup: Setup) -> ServerSummary:
    engine = setup.engine
    assert engine is not None and setup.server_url is not None
    ok = [line for line in lines if line.get("ok")]
    values: list[dict[str, Any]] = [line.get("values") or {} for line in ok]
    return ServerSummary(
        url=setup.server_url,
        engine=engine.engine,
        scrapes=len(ok),
        errors=len(lines) - len(ok),
        running=series_stats(line.get("running") for line in ok),
        waiting=series_stats(line.get("waiting") for line in ok),
        kv_cache_usage_pct=series_stats(line.get("kv_cache_usage_pct") for line in ok),
        prefix_cache_hit_rate=_hit_rate(engine, values),
        preemptions=_delta_of(engine.preemptions, values),
        metrics=_other_metrics(engine, values),
        spec_decode=spec_decode(engine, values),
    )


def spec_decode(engine: EngineMetrics, values: list[dict[str, Any]]) -> SpecDecodeSummary | None:
    """Speculative decoding over the window; None without its counters or with no draft in the window."""
    names = engine.spec_decode
    if names is None:
        return None
    drafts, proposed, accepted = (_delta_of((n,), values) for n in (names.drafts, names.draft_tokens, names.accepted))
    if drafts is None or proposed is None or accepted is None or not drafts:
        return None
    return SpecDecodeSummary(
        drafts=drafts, draft_tokens=proposed, accepted_tokens=accepted,
        acceptance_rate=accepted / proposed if proposed else None,
        mean_acceptance_length=1 + accepted / drafts,
        per_position_acceptance_rate=[(d or 0.0) / drafts for d in _per_position(names.accepted_per_pos, values)],
    )


def _per_position(name: str, values: list[dict[str, Any]]) -> list[float | None]:
    """Δ of `name[0]`, `name[1]`, ... in position order, as far as the positions run unbroken."""
    out: list[float | None] = []
    while any(f"{name}[{len(out)}]" in v for v in values):
        out.append(_delta_of((f"{name}[{len(out)}]",), values))
    return out


def _series(names: tuple[str, ...], values: list[dict[str, Any]]) -> list[float | None]:
    """Per scrape, the first of `names` that the server serves (the same name throughout)."""
    for name in names:
        if any(name in v for v in values):
            return [v.get(name) for v in values]
    return []


def _delta_of(names: tuple[str, ...], values: list[dict[str, Any]]) -> float | None:
    return counter_delta(_series(names, values)) if names else None


def _hit_rate(engine: EngineMetrics, values: list[dict[str, Any]]) -> float | None:
    hits, queries = _delta_of(engine.prefix_hits, values), _delta_of(engine.prefix_queries, values)
    if hits is not None and queries:
        return hits / queries
    return series_stats(_series(engine.prefix_hit_rate, values)).mean if engine.prefix_hit_rate else None


def _other_metrics(engine: EngineMetrics, values: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in engine.counters:
        delta = counter_delta([v.get(name) for v in values])
        if delta is not None:
            out[name] = delta
    for name in engine.gauges:
        last = next((v[name] for v in reversed(values) if name in v), None)
        if last is not None:
            out[name] = float(last)
    return out
