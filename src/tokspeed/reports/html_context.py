"""What the HTML templates show, computed from a saved run (or a comparison): plain data.

Pure: results and records in, a dict of strings, rows and figure specs out;
`tokspeed.reports.html` only fills the templates with it. Record-based charts
appear only where the records can be attributed to a benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tokspeed.compare.comparison import Comparison
from tokspeed.compare.evidence import RunData
from tokspeed.errors import ConfigError
from tokspeed.metrics.samples import request_samples
from tokspeed.metrics.slo import parse_slo
from tokspeed.metrics.table import WITH_INTERVALS
from tokspeed.records import RequestRecord
from tokspeed.reports import figures as fg
from tokspeed.reports.compare_text import (
    HEADERS,
    LEGEND,
    bench_title,
    highlights,
    method_note,
    row,
)
from tokspeed.reports.diagnosis_text import evidence_text, where
from tokspeed.reports.groups_text import group_lines
from tokspeed.reports.headline import headlines
from tokspeed.reports.summary_text import (
    ROWS,
    ci_lines,
    dist_stat,
    fmt,
    header_lines,
    iteration_lines,
    stat_columns,
    totals_lines,
)
from tokspeed.reports.telemetry_text import server_profile_line, telemetry_lines
from tokspeed.reports.timeline import latency_over_time, server_over_time, timeline
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.records import records_by_benchmark
from tokspeed.stats.distribution import Distribution

# (family, label, what a value is per) of the distributions drawn: those with intervals in the metric table
DISTRIBUTIONS = tuple((m.name, m.label, "tokens" if m.over == "tokens" else "requests") for m in WITH_INTERVALS)


@dataclass
class FigureSet:
    """Figures of one page, each under an id the template gives to its <div>."""

    figures: dict[str, fg.Figure] = field(default_factory=dict)

    def add(self, title: str, figure: fg.Figure | None, caption: str = "") -> dict[str, str] | None:
        if figure is None:
            return None
        fid = f"fig-{len(self.figures)}"
        self.figures[fid] = figure
        return {"id": fid, "title": title, "caption": caption}

    def json(self) -> str:
        """The figures as JSON, safe inside a <script> element."""
        text = orjson.dumps(self.figures, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _findings(result: RunResult) -> list[dict[str, str]]:
    """The diagnosis, most severe first, as the template shows it."""
    return [
        {
            "severity": f.severity,
            "rule": f.rule,
            "where": where(f, result),
            "title": f.title,
            "evidence": evidence_text(f.evidence),
            "advice": f.advice,
        }
        for f in result.diagnosis
    ]


def run_context(result: RunResult, records: Sequence[RequestRecord], source: str,
                telemetry: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """`telemetry`: the run's telemetry.jsonl lines (the server's running and waiting requests over time)."""
    figs = FigureSet()
    groups = records_by_benchmark(result.benchmarks, list(records)) if records else None
    benches = [
        _benchmark(b, groups[i] if groups is not None else None, figs, result.config.get("percentiles") or (), telemetry)
        for i, b in enumerate(result.benchmarks)
    ]
    sweep = [f for title, fig in fg.sweep_figures(result.benchmarks, sweep_context(result))
             if (f := figs.add(title, fig, _sweep_caption(title))) is not None]
    model = result.target.get("model") or "unknown model"
    return {
        "title": f"tokspeed report · {model}",
        "subtitle": f"{result.started_at} · {source}",
        "status": result.status,
        "error": result.error,
        "header": header_lines(result),
        "warnings": result.warnings,
        "findings": _findings(result),
        "telemetry": telemetry_lines(result.telemetry, "whole run") if len(result.benchmarks) > 1 else [],
        "overview": _overview(result.benchmarks) if len(result.benchmarks) > 1 else None,
        "sweep": sweep,
        "benchmarks": benches,
        "tables": _tables(result),
        "sample": result.samples[0] if result.samples else None,
        "tool": f"{result.tool.get('name', 'tokspeed')} {result.tool.get('version', '')}".strip(),
        "figures_json": figs.json(),
    }


def _benchmark(bench: Benchmark, records: list[RequestRecord] | None, figs: FigureSet,
               percentiles: Sequence[float] = (), telemetry: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    s = bench.summary
    charts: list[dict[str, str] | None] = []
    note = None
    if records is None:
        note = "The per-request records of this benchmark are not available, so only its summary is shown."
    else:
        samples = request_samples(records)
        for family, label, per in DISTRIBUTIONS:
            values, _owner = samples.values(family)
            charts.append(figs.add(f"{label} distribution", fg.distribution_figure(label, "ms", values, per), _caption(family)))
        tl = timeline(records)
        if tl is not None:
            server = server_over_time(records, tl, telemetry)
            charts.append(figs.add("Over time", fg.timeline_figure(tl, latency_over_time(records, tl), server),
                                   "Per time bin: output tokens per second; TTFT (by send time) and ITL (by arrival) at p50 "
                                   "and p99; the average number of requests in flight"
                                   + ("; the server's own running and waiting requests (its /metrics)" if server else "")
                                   + "; errors by kind."))
        charts.append(figs.add("TTFT vs input tokens", fg.scatter_figure(samples.input_tokens, samples.ttft_ms),
                               "Each point is a request: prefill time grows with the prompt; queueing shows as a vertical spread."))
    charts.append(figs.add("Per-iteration stability", fg.iterations_figure(bench), "Rule of thumb: 5–10% spread between iterations is normal; more is a warning."))
    return {
        "name": bench.name,
        "profile": _profile_text(bench),
        "headlines": headlines(s),
        "rows": _metric_rows(bench, percentiles),
        "stats": [header for _stat, header in stat_columns(percentiles)],
        "lines": iteration_lines(bench) + totals_lines(bench) + ci_lines(bench) + group_lines(bench)
        + telemetry_lines(bench.telemetry) + server_profile_line(bench.server_profile),
        "slo": [{"text": v.slo, "met": v.met} for v in s.slo],
        "charts": [c for c in charts if c is not None],
        "note": note,
    }


def sweep_context(result: RunResult) -> fg.SweepContext:
    """The swept knob, the run's SLOs and the capacity point, for the sweep charts."""
    dimension: str | None = None
    if result.capacity is not None:
        dimension = result.capacity.by
    elif result.sweep is not None and result.sweep.dimension in ("concurrency", "rate"):
        dimension = result.sweep.dimension
    slos = []
    for text in result.config.get("slo") or []:
        try:
            slos.append(parse_slo(text))
        except ConfigError:  # an SLO this version cannot read only loses its shading
            continue
    best = None
    if result.capacity is not None and result.capacity.value is not None:
        best = next((p.benchmark for p in result.capacity.probes if p.passed and p.value == result.capacity.value), None)
    index, why = fg.capacity_point(result.benchmarks, best)
    return fg.SweepContext(dimension=dimension, slos=slos, capacity=index, capacity_why=why)


def _sweep_caption(title: str) -> str:
    if title == "Per-user vs system throughput":
        return ("Each point is a load point: what one user sees (decode speed, 1 / TPOT) against what the system delivers. "
                "The dotted line joins the points no other beats on both; the star is the capacity point.")
    if " vs " in title and title.split(" vs ")[1] in ("concurrency", "rate"):
        return "The line is p50, the shaded band reaches p99; a dashed red line is an SLO (the red region misses it)."
    return ""


def _profile_text(bench: Benchmark) -> str:
    """The load profile's settings, unless the benchmark's name already says all of them."""
    text = ", ".join(f"{k} {v}" for k, v in bench.profile.items() if v is not None and k != "kind")
    return "" if text in bench.name else text


def _caption(family: str) -> str:
    return {
        "ttft": "Time to first token: bars count requests per bin (left axis); the line is the share at or below x (right axis).",
        "itl": "Inter-token latency, one value per generated token (a chunk's gap is spread over its tokens).",
        "tpot": "Time per output token after the first: (E2E − TTFT) / (output tokens − 1), one value per request.",
        "e2e": "End-to-end latency: from sending the request to the last byte received.",
    }[family]


def _metric_rows(bench: Benchmark, percentiles: Sequence[float] = ()) -> list[list[str]]:
    rows = []
    for name, label, unit in ROWS:
        dist: Distribution = getattr(bench.summary, name)
        if dist.count:
            rows.append([label, unit, f"{dist.count:,}",
                         *(fmt(dist_stat(bench.summary, name, st)) for st, _ in stat_columns(percentiles))])
    return rows


def _overview(benchmarks: Sequence[Benchmark]) -> dict[str, Any]:
    headers = ["benchmark", "completed", "output tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "E2E p50 ms", "error rate"]
    rows = []
    for b in benchmarks:
        s = b.summary
        rows.append([
            b.name, f"{s.requests.completed:,}", fmt(s.throughput.output_tokens_per_s), fmt(s.throughput.requests_per_s),
            fmt(s.ttft_ms.p50), fmt(s.ttft_ms.p99), fmt(s.tpot_ms.p50), fmt(s.e2e_ms.p50),
            "—" if s.error_rate is None else f"{s.error_rate:.2%}",
        ])  # fmt: skip
    return {"headers": headers, "rows": rows}


def _tables(result: RunResult) -> list[dict[str, Any]]:
    sections = (("Target", result.target), ("Workload", result.workload), ("Configuration", result.config), ("Environment", result.environment))
    return [{"title": title, "rows": flatten(data)} for title, data in sections if data]


def flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested dicts as (dotted.key, value) rows; lists and scalars shown as compact JSON."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows += flatten(value, name + ".")
        elif isinstance(value, str):
            rows.append((name, value))
        else:
            rows.append((name, orjson.dumps(value, default=str).decode()))
    return rows


def _verdicts(c: Comparison, bench: int, family: str | None = None, name: str | None = None) -> str:
    """Compare's verdict on the rows a chart shows, per other run: `pr: p50 1.05× worse · p99 n.s.`."""
    from tokspeed.compare.comparison import compared_metrics

    wanted = {m.name: m for m in compared_metrics(c.settings.percentiles)
              if (family is not None and m.family == family) or m.name == name}
    parts = []
    for run_cmp in c.runs:
        if bench >= len(run_cmp.benchmarks):
            continue
        bits = []
        for m in run_cmp.benchmarks[bench].metrics:
            if m.metric not in wanted:
                continue
            stat = f"p{wanted[m.metric].quantile:g} " if wanted[m.metric].quantile is not None else ""
            ratio = f"{m.ratio:.2f}× " if m.ratio is not None and m.verdict in ("better", "worse") else ""
            bits.append(f"{stat}{ratio}{_VERDICT_WORDS.get(m.verdict, m.verdict)}")
        if bits:
            parts.append(f"{run_cmp.run.label}: " + " · ".join(bits))
    return "<br>".join(parts)


_VERDICT_WORDS = {"no significant difference": "n.s.", "untested": "not tested"}


def comparison_context(c: Comparison, runs: Sequence[RunData]) -> dict[str, Any]:
    """The comparison page: differences, per-benchmark tables and sentences, overlaid CDFs."""
    figs = FigureSet()
    groups = [r.benchmark_records() for r in runs]
    sections = []
    for run_cmp in c.runs:
        for i, b in enumerate(run_cmp.benchmarks):
            sections.append({
                "title": bench_title(c, run_cmp, b),
                "headers": [h.format(base=c.base.label, other=run_cmp.run.label) for h in HEADERS],
                "rows": [{"cells": row(m), "verdict": m.verdict} for m in b.metrics],
                "sentences": highlights(b),
                "differences": run_cmp.differences if i == 0 else [],
                "other": run_cmp.run.label,
            })  # fmt: skip
    n_bench = min(len(r.result.benchmarks) for r in runs)
    charts = []
    for i in range(n_bench):
        per_run = [(r.label, request_samples(g[i]) if g is not None else None) for r, g in zip(runs, groups)]
        suffix = f" · {runs[0].result.benchmarks[i].name}" if n_bench > 1 else ""
        for family, label, _per in DISTRIBUTIONS:
            series = [(name, s.values(family)[0]) for name, s in per_run if s is not None]
            charts.append(figs.add(f"{label}{suffix}", fg.overlaid_cdfs(label, "ms", series, _verdicts(c, i, family=family))))
        tps = [r.result.benchmarks[i].summary.throughput.output_tokens_per_s for r in runs]
        charts.append(figs.add(f"Output throughput{suffix}", fg.bars_figure("Output tokens/s", [r.label for r in runs], tps, "tok/s",
                                                                             _verdicts(c, i, name="output_tokens_per_s"))))
    return {
        "title": f"tokspeed compare · baseline {c.base.label}",
        "subtitle": " · ".join(f"{r.label}: {r.path}" for r in runs),
        "sections": sections,
        "charts": [ch for ch in charts if ch is not None],
        "settings": c.settings,
        "legend": LEGEND,
        "method": method_note(c),
        "figures_json": figs.json(),
        "tool": "tokspeed",
    }
