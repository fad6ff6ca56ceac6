"""Tables of a scheduled point's stages and workload classes (pure: benchmark in, renderables out).

One row per stage (or ramp window) and per class: what it asked for, how many
requests, the rate offered and sent, send lateness (schedule lag), TTFT and E2E
percentiles, and goodput against the group's SLOs. Used by `tokspeed run` and
`tokspeed report DIR` alike.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.results import Benchmark, GroupResult

COLUMNS = ("requests", "offered/s", "sent/s", "lateness p50", "lateness p99", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "goodput")


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _row(name: str, g: GroupResult, asked: str) -> list[str]:
    s = g.summary
    sc = s.schedule
    good = s.goodput
    goodput = "—" if good is None else f"{_f(good.requests_per_s, 2)}/s ({_f(None if good.fraction is None else good.fraction * 100, 0)}%)"
    return [
        name,
        asked,
        f"{s.requests.completed}/{s.requests.total}",
        _f(sc.offered_requests_per_s if sc else None, 2),
        _f(sc.sent_requests_per_s if sc else None, 2),
        _f(s.lateness_ms.p50, 2),
        _f(s.lateness_ms.p99, 2),
        _f(s.ttft_ms.p50),
        _f(s.ttft_ms.p99),
        _f(s.e2e_ms.p50),
        _f(s.e2e_ms.p99),
        goodput,
    ]


def _table(title: str, rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(title.split()[0].lower())
    table.add_column("asked")
    for c in COLUMNS:
        table.add_column(c + (" ms" if c.startswith(("lateness", "TTFT", "E2E")) else ""), justify="right")
    for r in rows:
        table.add_row(*r)
    return table


def _asked_stage(g: GroupResult) -> str:
    p = g.profile
    if "concurrency" in p:
        return f"concurrency {p['concurrency']}, {p.get('start_s', 0):g}–{p.get('end_s', 0):g} s"
    rate = f"{p.get('rate', 0):g}" + (f"→{p['rate_end']:g}" if "rate_end" in p else "")
    return f"{rate}/s, {p.get('start_s', 0):g}–{p.get('end_s', 0):g} s"


def group_tables(bench: Benchmark) -> list[RenderableType]:
    """The stage table and the class table of `bench` (nothing for an ordinary point)."""
    parts: list[RenderableType] = []
    if bench.stages:
        rows = [_row(name, g, _asked_stage(g)) for name, g in bench.stages.items()]
        parts.append(_table("Stages (each request in the stage it was scheduled in)", rows))
    if bench.classes:
        rows = [_row(name, g, _asked_class(g)) for name, g in bench.classes.items()]
        parts.append(_table("Classes (goodput on each class's own SLOs)", rows))
        t = bench.classes_goodput
        if t is not None:
            parts.append(
                Text(
                    f"Goodput, all classes: {_f(t.requests_per_s, 2)} req/s · {t.good} good"
                    f" ({_f(None if t.fraction is None else t.fraction * 100, 1)}% of completed)"
                )
            )
    if bench.models:
        rows = [_row(name, g, _asked_model(g)) for name, g in bench.models.items()]
        parts.append(_table("Models (each request's model in the mix)", rows))
    return parts


def group_lines(bench: Benchmark) -> list[str]:
    """The same figures as `group_tables`, one plain line per stage and class (HTML report, logs)."""
    lines = []
    for kind, groups, asked in (("Stage", bench.stages, _asked_stage), ("Class", bench.classes, _asked_class),
                                ("Model", bench.models, _asked_model)):
        for name, g in (groups or {}).items():
            cells = dict(zip(("requests", *COLUMNS[1:]), _row(name, g, asked(g))[2:]))
            lines.append(
                f"{kind} {name} ({asked(g)}): {cells['requests']} completed · sent {cells['sent/s']}/s · "
                f"lateness p99 {cells['lateness p99']} ms · TTFT p50 {cells['TTFT p50']} / p99 {cells['TTFT p99']} ms · "
                f"E2E p50 {cells['E2E p50']} / p99 {cells['E2E p99']} ms · goodput {cells['goodput']}"
            )
    t = bench.classes_goodput
    if t is not None:
        lines.append(f"Goodput, all classes: {_f(t.requests_per_s, 2)} req/s · {t.good} good")
    return lines


def _asked_class(g: GroupResult) -> str:
    return f"{g.profile.get('rate', 0):g}/s {', '.join(g.profile.get('slo') or [])}".strip()


def _asked_model(g: GroupResult) -> str:
    p = g.profile
    return f"weight {p.get('weight', 0):g} ({p.get('share', 0) * 100:.0f}%, {p.get('policy', '')})"
