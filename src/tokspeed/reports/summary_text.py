"""Render a saved run result as rich renderables (pure: result in, renderables out).

Used at the end of `tokspeed run` and by `tokspeed report DIR`, so a run
re-rendered from disk looks exactly like the original printout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.metrics.schema import Schedule, Summary
from tokspeed.metrics.table import METRICS, WITH_INTERVALS
from tokspeed.reports.format import fmt
from tokspeed.results import Benchmark, RunResult
from tokspeed.stats.distribution import (
    STAT_NAMES,
    Distribution,
    min_samples_for_ci,
    percentile_name,
    required_samples,
)

# (Summary field, label, unit) of each distribution's row, in the metric table's order
ROWS: tuple[tuple[str, str, str], ...] = tuple((m.field, m.label, m.display_unit) for m in METRICS)
STATS = ("mean", "p50", "p90", "p95", "p99", "p999", "max")


def header_lines(result: RunResult) -> list[str]:
    from tokspeed.reports.cold_start_text import cold_start_lines

    t, cfg, w = result.target, result.config, result.workload
    lines = []
    if t:
        version = f" ({t['server_version']})" if t.get("server_version") else ""
        usage = "usage" if t.get("include_usage") else "no usage"
        mode = "stream" if t.get("stream") else "no stream"
        how = "embeddings" if t.get("api") == "embeddings" else f"{t.get('api')}, {mode}, {usage}"
        lines.append(f"Target    {t.get('url') or 'in-process (' + str(t.get('kind')) + ')'}  model {t.get('model')}{version}  ·  {how}")
        lines += cold_start_lines(t)
    if w:
        lines.append(f"Workload  {_describe_workload(w, embeddings=bool(t) and t.get('api') == 'embeddings')}")
        lines += choice_lines(w)
    if cfg:
        lines.append(f"Load      {_describe_load(result)}")
    return lines


def choice_lines(w: dict[str, Any]) -> list[str]:
    """The workload's per-request choices: a model mix's shares and policy, the client's cancellations."""
    lines = []
    models, cancel = w.get("models"), w.get("cancel")
    if isinstance(models, dict) and isinstance(models.get("shares"), dict):
        shares = ", ".join(f"{name} {share * 100:.0f}%" for name, share in models["shares"].items())
        lines.append(f"Models    {shares} ({models.get('policy')})")
    if isinstance(cancel, dict):
        lines.append(f"Cancel    {cancel.get('share', 0) * 100:g}% of requests, {cancel.get('after_ms', 0):g} ms after sending "
                     "(by the client, closing the connection)")
    return lines


def _describe_workload(w: dict[str, Any], embeddings: bool = False) -> str:
    parts = [str(w.get("name", "?"))]
    if w.get("items") is not None:
        parts.append(f"{w['items']} prompts")
    if w.get("output_tokens") is not None and not embeddings:
        parts.append(f"max_tokens {w['output_tokens']}")
    images = w.get("images")
    if isinstance(images, dict):
        parts.append(f"{images.get('per_request')} image(s) of {images.get('size')} per request")
    return ", ".join(parts)


def _describe_load(result: RunResult) -> str:
    cfg = result.config
    if result.capacity is not None:
        c = result.capacity
        return f"capacity search by {c.by} to {c.precision:.0%} under {', '.join(c.slos)} · {len(result.benchmarks)} load points"
    if result.sweep is not None:
        s = result.sweep
        what = "auto" if s.auto else (s.dimension or "targets")
        return f"sweep over {what} · {len(result.benchmarks)} load points" + (f" on {len(s.targets)} targets" if len(s.targets) > 1 else "")
    bench = result.benchmarks[0] if result.benchmarks else None
    label = bench.name if bench else cfg.get("profile", "?")
    limit = f"{cfg['requests']} requests" if cfg.get("requests") else ""
    if cfg.get("duration_s"):
        limit = (limit + " or " if limit else "") + f"{cfg['duration_s']:g} s"
    if bench is not None and bench.profile.get("open_loop") and not limit:  # a trace, stages or classes
        limit = f"{bench.profile.get('requests')} requests scheduled over {bench.profile.get('duration_s') or 0:g} s"
    if bench is not None and bench.profile.get("stages") is not None and not limit:  # concurrency stages
        limit = f"{bench.profile.get('duration_s') or 0:g} s of stages"
    if not limit:
        limit = "100 requests"
    if bench is not None and bench.profile.get("kind") == "conversations":  # --requests counts conversations
        limit = limit.replace(" requests", " conversations")
    iters = cfg.get("iterations", 1)
    return f"{label} · {limit}" + (f" × {iters} iterations" if iters > 1 else "")


def _left_out(partial: list[int]) -> str:
    return f" (partial iteration {', '.join(map(str, partial))} left out)" if partial else ""


def iteration_lines(bench: Benchmark) -> list[str]:
    """One line per iteration (total time, tokens generated, tok/s, mean latency), then their spread."""
    lines = []
    for it in bench.iterations:
        s = it.summary
        if not s.tokens.output_total and s.tokens.input_total:  # embeddings: nothing generated
            lines.append(
                f"Iteration {it.iteration}: total {fmt(s.window_s)} s · {s.tokens.input_total:,} input tokens · "
                f"{fmt(s.throughput.total_tokens_per_s)} input tok/s · mean latency {fmt(_s(s.e2e_ms.mean), 3)} s"
            )
            continue
        lines.append(
            f"Iteration {it.iteration}: total {fmt(s.window_s)} s · {s.tokens.output_total:,} tokens generated · "
            f"{fmt(s.throughput.output_tokens_per_s)} tok/s · mean latency {fmt(_s(s.e2e_ms.mean), 3)} s"
            + (f" · PARTIAL ({s.requests.total} requests): left out of the average" if it.partial else "")
        )
    a = bench.across_iterations
    if a is not None:
        tps = a.metrics.get("output_tokens_per_s")
        e2e = a.metrics.get("e2e_mean_ms")
        if tps is not None and tps.mean is not None:
            lines.append(
                f"Averaged over {a.n} iterations{_left_out(a.partial)}: {fmt(tps.mean)} ± {fmt(tps.stdev)} tok/s "
                f"(CV {fmt((tps.cv or 0) * 100, 1)}%, 95% CI {fmt(tps.ci95_low)}–{fmt(tps.ci95_high)}, {a.verdict})"
                + (_latency_across(e2e) if e2e is not None and e2e.mean is not None else "")
            )
    return lines


def _latency_across(e2e: Any) -> str:
    """` · mean latency 2.612 ± 0.003 s (95% CI 2.604–2.620)`: the per-iteration mean E2E, with its spread."""
    text = f" · mean latency {fmt(_s(e2e.mean), 3)}"
    if e2e.stdev is not None:
        text += f" ± {fmt(_s(e2e.stdev), 3)}"
    text += " s"
    if e2e.ci95_low is not None and e2e.ci95_high is not None:
        text += f" (95% CI {fmt(_s(e2e.ci95_low), 3)}–{fmt(_s(e2e.ci95_high), 3)})"
    return text


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def stat_columns(percentiles: Sequence[float] = ()) -> list[tuple[str, str]]:
    """(stat name, column header) of the table: mean, the percentiles (--percentiles, else the
    standard p50 … p99.9), max."""
    if not percentiles:
        return [(stat, "p99.9" if stat == "p999" else stat) for stat in STATS]
    return [("mean", "mean"), *((percentile_name(q), f"p{q:g}") for q in sorted(percentiles)), ("max", "max")]


def dist_stat(s: Summary, field: str, stat: str) -> float | None:
    """One stat of a summary's distribution, the --percentiles beyond the standard ones included."""
    dist: Distribution = getattr(s, field)
    if stat in STAT_NAMES:
        return dist.stat(stat)
    return s.percentiles.get(field, {}).get(stat)


def metric_table(bench: Benchmark, percentiles: Sequence[float] = ()) -> Table:
    s = bench.summary
    columns = stat_columns(percentiles)
    table = Table(title=f"{bench.name}", title_justify="left", header_style="bold")
    table.add_column("metric")
    table.add_column("unit")
    table.add_column("count", justify="right")
    for _stat, header in columns:
        table.add_column(header, justify="right")
    for field, label, unit in ROWS:
        dist: Distribution = getattr(s, field)
        if (field == "ttfa_ms" and _same(dist, s.ttft_ms)) or (field == "chunk_gap_ms" and _same(dist, s.itl_ms)):
            continue  # identical rows: no reasoning tokens / one token per chunk
        if not dist.count or (field == "output_tokens" and not dist.max):  # embeddings generate nothing
            continue
        table.add_row(label, unit, str(dist.count), *(fmt(dist_stat(s, field, stat)) for stat, _ in columns))
    return table


def cooldown_lines(bench: Benchmark) -> list[str]:
    """--cooldown: what the trim cut, and the headline figures without it."""
    c = bench.summary.cooldown
    if c is None:
        return []
    how = f"last {c.share:.0%} of the planned duration" if c.mode == "duration" else f"last {c.share:.0%} of requests to finish"
    head = (f"Cool-down trimmed ({how}): cut at {c.cut_s:.2f} s of {c.full_window_s:.2f} s, "
            f"{c.dropped} request(s) sent after it left out, {c.requests} kept")
    if c.summary is None:
        return [head]
    t = c.summary
    return [head, f"  without it: TTFT p99 {fmt(t.ttft_ms.p99)} ms · E2E p99 {fmt(t.e2e_ms.p99)} ms · "
                  f"{fmt(t.throughput.output_tokens_per_s)} tok/s · {fmt(t.throughput.requests_per_s)} req/s"]


CI_ROWS: tuple[tuple[str, str], ...] = tuple((m.field, m.short) for m in WITH_INTERVALS)
CI_PRECISION = 0.10  # the hint: requests for a p99 CI within ±10% of p99


def ci_lines(bench: Benchmark) -> list[str]:
    """One line per latency metric: p99, its 95% CI and n, and how many samples a ±10% CI needs.

    E.g. `p99 TTFT 52.50 ms (95% CI 51.90–53.10, n=400)`; ITL counts tokens and says how
    many requests its interval resampled, the others count requests. Empty for results saved before the intervals existed.
    """
    s = bench.summary
    lines = []
    for field, label in CI_ROWS:
        dist: Distribution = getattr(s, field)
        if field not in s.percentile_ci or not dist.count:
            continue
        ci = s.percentile_ci[field].get("p99")
        if ci is None and field == "itl_ms":
            lines.append(f"p99 {label} {fmt(dist.p99)} ms (no 95% CI: too few values beyond it to resample by request, n={dist.count})")
            continue
        if ci is None:
            lines.append(f"p99 {label} {fmt(dist.p99)} ms (no 95% CI: needs n ≥ {min_samples_for_ci(99.0)}, n={dist.count})")
            continue
        if ci.method == "request-bootstrap":  # per-token values: the interval resamples requests
            lines.append(f"p99 {label} {fmt(dist.p99)} ms (95% CI {fmt(ci.low)}–{fmt(ci.high)}, "
                         f"n={dist.count:,} tokens of {ci.units:,} requests, resampled by request)")
            continue
        line = f"p99 {label} {fmt(dist.p99)} ms (95% CI {fmt(ci.low)}–{fmt(ci.high)}, n={dist.count})"
        need = required_samples(ci, dist.p99, dist.count, 99.0, CI_PRECISION)
        if need is not None and need > dist.count:
            line += f" · ±{CI_PRECISION:.0%} needs n ≈ {need:,}"
        lines.append(line)
    if s.approximate:
        lines.append(f"Within 0.01% (past 262,144 values, from a log histogram): {', '.join(s.approximate)}")
    return lines


def _same(a: Distribution, b: Distribution) -> bool:
    return a.count == b.count and a.mean == b.mean


def _sources(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in sorted(counts.items())) or "—"


def totals_lines(bench: Benchmark) -> list[str]:
    s = bench.summary
    r, t = s.requests, s.throughput
    lines = [
        f"Requests  {r.completed} completed, {r.errored} errored, {r.incomplete} incomplete"
        + (f", {r.cancelled} cancelled by the client (not errors)" if r.cancelled else "")
        + (f"  ·  error rate {fmt((s.error_rate or 0) * 100, 1)}%" if s.error_rate else ""),
        f"Throughput  {fmt(t.requests_per_s)} req/s · {_token_rates(s)}  (window {fmt(s.window_s)} s)",
    ]
    if s.schedule is not None:
        lines.append(schedule_line(s.schedule))
    if s.tokens.output_sources or s.tokens.input_sources:
        lines.append(f"Tokens counted by  input: {_sources(s.tokens.input_sources)} · output: {_sources(s.tokens.output_sources)}")
    if s.goodput is not None:
        g = s.goodput
        lines.append(
            f"Goodput  {fmt(g.requests_per_s)} req/s ({fmt((g.fraction or 0) * 100, 1)}% of completed requests met "
            f"{', '.join(g.slos)})"
        )
    for v in s.slo:
        mark = "PASS" if v.met else "FAIL"
        observed = f"{fmt((v.observed or 0) * 100, 1)}% of requests" if v.kind == "per_request" else fmt(v.observed)
        lines.append(f"SLO {mark}  {v.slo}  (observed {observed})")
    return lines


def schedule_line(sc: Schedule) -> str:
    """Open loop: the rate asked, the rate the drawn schedule offered, the rate requests went out at."""
    return (
        f"Schedule  target {fmt(sc.target_requests_per_s)} req/s · offered {fmt(sc.offered_requests_per_s)} req/s "
        f"(as scheduled) · sent {fmt(sc.sent_requests_per_s)} req/s · gap CV {fmt(sc.scheduled_gap_cv, 3)} scheduled, "
        f"{fmt(sc.sent_gap_cv, 3)} sent"
    )


def _token_rates(s: Summary) -> str:
    """Output and total tokens/s; input tokens/s alone when nothing was generated (embeddings)."""
    t = s.throughput
    if not s.tokens.output_total and s.tokens.input_total:
        return f"{fmt(t.input_tokens_per_s)} input tok/s"
    return f"{fmt(t.output_tokens_per_s)} output tok/s · {fmt(t.total_tokens_per_s)} total tok/s"


def sample_lines(result: RunResult, limit: int = 300) -> list[str]:
    """The first prompt and its response, one line each, shortened (no response line when there is none)."""
    if not result.samples:
        return []
    sample = result.samples[0]
    lines = [f"Sample prompt:   {_one_line(sample.prompt, limit)}"]
    if sample.response:
        lines.append(f"Sample response: {_one_line(sample.response, limit)}")
    return lines


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text[:limit] + ("…" if len(text) > limit else "")


def render_result(result: RunResult, directory: Path | None = None) -> RenderableType:
    """The full printout of a run: header, per-iteration lines, table, totals, sample, warnings, diagnosis.

    `directory` (where the run is saved) goes into the hint to run `tokspeed diagnose` on it.
    """
    from tokspeed.reports.conversation_text import conversation_parts
    from tokspeed.reports.diagnosis_text import short_lines
    from tokspeed.reports.groups_text import group_tables
    from tokspeed.reports.server_timing_text import server_timing_lines
    from tokspeed.reports.sweep_text import findings, sweep_table
    from tokspeed.reports.telemetry_text import server_profile_line, telemetry_lines

    parts: list[RenderableType] = [Text(line) for line in header_lines(result)]
    if len(result.benchmarks) > 1:
        parts += [Text(""), sweep_table(result)]
        parts += [Text(line, style="bold") for line in findings(result)]
        parts += [Text(line) for line in telemetry_lines(result.telemetry, "whole run")]
    for bench in result.benchmarks if len(result.benchmarks) == 1 else ():
        parts.append(Text(""))
        parts += [Text(line) for line in iteration_lines(bench)]
        parts.append(metric_table(bench, result.config.get("percentiles") or ()))
        parts += [Text(line) for line in cooldown_lines(bench)]
        parts += [Text(line) for line in ci_lines(bench)]
        parts += [Text(line) for line in totals_lines(bench)]
        parts += group_tables(bench)  # a scheduled load's stages and classes
        parts += [Text(line) for line in server_timing_lines(bench.summary, bench.telemetry or result.telemetry)]
        parts += conversation_parts(bench.summary)  # per turn, per conversation, prefix cache (when present)
        shown = telemetry_lines(bench.telemetry) if bench.telemetry else telemetry_lines(result.telemetry, "whole run")
        parts += [Text(line) for line in shown]
    for bench in result.benchmarks:  # --profile: where each point's trace went
        prefix = f"{bench.name}: " if len(result.benchmarks) > 1 else ""
        parts += [Text(prefix + line) for line in server_profile_line(bench.server_profile)]
    parts += [Text(line, style="dim") for line in sample_lines(result)]
    for w in result.warnings:
        parts.append(Text(f"Warning: {w}", style="yellow"))
    parts += short_lines(result, directory)
    if result.status != "complete":
        parts.append(Text(f"Run status: {result.status}" + (f" ({result.error})" if result.error else ""), style="bold red"))
    return Group(*parts)
