"""Console rendering of compatibility views (`tokspeed report DIR --as TOOL`).

The numbers come from `tokspeed.metrics.compat`; this module only lays them out:
one table per load point with the peer's metric names, mean/p50/p90/p99, tokspeed's
own figure for the same quantity, and a one-line note on how the two differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.metrics.compat import STATS, CompatMetric, CompatView


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def _tokspeed(m: CompatMetric) -> str:
    if "value" in m.tokspeed:
        return f"{_fmt(m.tokspeed['value'])} ({m.tokspeed_metric})"
    return f"{_fmt(m.tokspeed.get('mean'))} / {_fmt(m.tokspeed.get('p99'))} ({m.tokspeed_metric} mean / p99)"


def render_view(v: CompatView) -> RenderableType:
    title = f"{v.benchmark or 'benchmark'} as {v.tool}: {v.requests} completed requests" + (
        f" over {v.duration_s:.2f} s" if v.duration_s else ""
    )
    t = Table(title=title, title_justify="left")
    t.add_column(f"{v.tool} metric")
    for s in STATS:
        t.add_column(s, justify="right")
    t.add_column("tokspeed", justify="right")
    t.add_column("how it differs")
    for m in v.metrics:
        label = f"{m.name} ({m.unit})"
        if "value" in m.stats:
            cells = [_fmt(m.stats["value"]), "", "", ""]
        else:
            cells = [_fmt(m.stats.get(s)) for s in STATS]
        t.add_row(label, *cells, _tokspeed(m), m.note)
    notes = Text("\n".join(f"  approximated: {a}" for a in v.approximations), style="dim")
    return Group(t, notes)


def render_views(tool: str, views: Sequence[CompatView]) -> RenderableType:
    if not views:
        return Text(f"no load points to show as {tool}")
    head = Text(f"{views[0].version} — formulas from {views[0].source}; computed from this run's request records")
    return Group(head, *(render_view(v) for v in views))
