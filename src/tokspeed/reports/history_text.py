"""Present the results history as console tables: the catalogued runs, a metric's trend, a check's verdicts.

Pure: catalogue entries, series and check reports in, rich renderables out.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.history.check import CheckReport, Judgement, PointCheck
from tokspeed.history.entry import RunEntry
from tokspeed.history.trend import Series
from tokspeed.reports.summary_text import fmt

SPARKS = "▁▂▃▄▅▆▇█"
_VERDICT_STYLE = {"regression": "bold red", "improvement": "bold green", "ok": "", "insufficient history": "yellow",
                  "missing": "bold red"}


def when(iso: str) -> str:
    """`2026-01-31T08:15:02+00:00` -> `2026-01-31 08:15`."""
    return iso.replace("T", " ")[:16] if iso and iso != "unknown" else "?"


def number(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric == "error_rate" or metric.endswith("_fraction"):
        return f"{v:.2%}"
    return fmt(v)


def runs_table(runs: Sequence[RunEntry], shown: str) -> RenderableType:
    """One line per run, oldest first, with its headline figures."""
    if not runs:
        return Text(f"No runs in the catalogue {shown} match.", style="yellow")
    table = Table(box=box.SIMPLE_HEAD, title=f"{len(runs)} run{'s' if len(runs) != 1 else ''} · {shown}", title_justify="left")
    for name in ("started (UTC)", "id", "status", "command", "target", "model", "points", "tags / commit"):
        table.add_column(name, overflow="fold")
    for name in ("TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "out tok/s", "errors"):
        table.add_column(name, justify="right")
    for r in runs:
        labels = [f"{k}={v}" for k, v in sorted(r.tags.items())]
        if r.deployment_commit:
            labels.append(f"@{r.deployment_commit[:12]}")
        h = r.headline
        figures = [number(n, h.get(n)) for n in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "output_tokens_per_s", "error_rate")]
        if r.capacity_requests_per_s is not None:
            figures[3] = f"cap {fmt(r.capacity_requests_per_s)} req/s"
        status = Text(r.status, style="" if r.status == "complete" else "yellow")
        table.add_row(when(r.started_at), r.id[:10], status, r.command, r.target or "?", r.model or "?",
                      str(r.point_count), " ".join(labels), *figures)
    return table


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - lo) / (hi - lo) * len(SPARKS)))] for v in values)


def trend_view(all_series: Sequence[Series], metric: str, last: int = 20) -> RenderableType:
    """Per comparable point: a sparkline over every run, then the last `last` runs with their change."""
    if not all_series:
        return Text(f"{metric}: no catalogued run has it.", style="yellow")
    parts: list[RenderableType] = []
    for s in all_series:
        values = [p.value for p in s.points]
        median = sorted(values)[len(values) // 2]
        head = Text.assemble((f"{metric}", "bold"), f" · {s.label} · {len(values)} runs  ", sparkline(values[-60:]),
                             f"  median {number(metric, median)}, latest {number(metric, values[-1])}")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in ("started (UTC)", "run", "commit", "tags", metric, "vs previous", "vs median"):
            table.add_column(name, justify="right" if name in (metric, "vs previous", "vs median") else "left")
        shown = s.points[-last:]
        prev = s.points[-last - 1].value if len(s.points) > last else None
        for p in shown:
            table.add_row(when(p.started_at), p.run_id[:10], (p.deployment_commit or "")[:12],
                          " ".join(f"{k}={v}" for k, v in p.tags), number(metric, p.value),
                          _change(p.value, prev), _change(p.value, median))
            prev = p.value
        parts += [head, table]
    return Group(*parts)


def _change(v: float, ref: float | None) -> str:
    if ref is None or ref == 0:
        return ""
    return f"{(v / ref - 1) * 100:+.1f}%"


def check_view(report: CheckReport) -> RenderableType:
    """The newest run, then one row per (metric, point) judged, then the verdict line."""
    r = report.run
    title = (f"Run {r.id[:10]} · {when(r.started_at)} · {r.target or '?'} · {r.model or '?'}"
             + (f" · @{r.deployment_commit[:12]}" if r.deployment_commit else "")
             + (" · " + " ".join(f"{k}={v}" for k, v in sorted(r.tags.items())) if r.tags else ""))
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for name in ("metric", "point", "value", "history", "centre", "spread", "limit", "change", "p", "verdict"):
        table.add_column(name, justify="left" if name in ("metric", "point", "verdict") else "right")
    for c in report.checks:
        j = c.judgement
        table.add_row(c.metric, c.point, number(c.metric, j.value), str(j.n), number(c.metric, j.center), _spread(j),
                      number(c.metric, j.limit), _relative(j), _p(j), Text(_verdict(j), style=_VERDICT_STYLE[j.verdict]))
    return Group(table, Text(verdict_line(report), style="bold red" if report.failed else "bold green"))


def verdict_line(report: CheckReport) -> str:
    s = report.settings
    judged = [c for c in report.checks if c.judgement.verdict in ("ok", "regression", "improvement")]
    if report.failed:
        return "; ".join(_failure(c) for c in report.failed)
    if not judged:
        return (f"Not judged: too little comparable history (needs {s.min_history} complete runs at the same target, "
                "model, workload and profile)")
    return (f"No regression: {len(judged)} check{'s' if len(judged) != 1 else ''} within the history's noise "
            f"(family-wise α = {s.alpha:g})")


def _failure(c: PointCheck) -> str:
    j = c.judgement
    if j.verdict == "missing":
        return f"{c.metric}: cannot be checked ({j.note})"
    if j.verdict == "insufficient history":
        return f"{c.metric} at {c.point}: not judged ({j.note}) and --require-history is set"
    return (f"REGRESSION {c.metric} at {c.point}: {number(c.metric, j.value)} against {number(c.metric, j.center)} "
            f"({_relative(j)}; limit {number(c.metric, j.limit)}, p = {_p(j)} < {j.alpha:.2g})")


def _verdict(j: Judgement) -> str:
    extra = f" ({len(j.outliers)} outlier{'s' if len(j.outliers) != 1 else ''} left out)" if j.outliers else ""
    note = f": {j.note}" if j.note and j.verdict in ("insufficient history", "missing") else ""
    return j.verdict + note + extra


def _spread(j: Judgement) -> str:
    if j.spread is None:
        return "—"
    return f"±{(pow(2.718281828459045, j.spread) - 1) * 100:.1f}%" if j.log_scale else f"±{fmt(j.spread)}"


def _relative(j: Judgement) -> str:
    if j.change is None:
        return "—"
    return f"{j.change * 100:+.1f}%" if j.log_scale else f"{j.change:+.4g}"


def _p(j: Judgement) -> str:
    if j.p_value is None:
        return "—"
    return f"{j.p_value:.2g}" if j.p_value >= 1e-4 else "<1e-4"
