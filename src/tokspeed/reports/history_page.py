"""The results history as one self-contained HTML page: a chart per metric, a line per comparable point.

Pure: series in, HTML out, through the report machinery of `reports/html.py` (plotly.js inlined,
jinja2 templates), so the page opens offline like every tokspeed report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokspeed.history.trend import Series
from tokspeed.reports import figures as fg
from tokspeed.reports.history_text import number, when
from tokspeed.reports.html_context import FigureSet


def trend_figure(metric: str, all_series: Sequence[Series]) -> fg.Figure | None:
    """One line per comparable point over the runs' start times; hover names the run, commit and tags."""
    if not all_series:
        return None
    data = []
    for i, s in enumerate(all_series):
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": s.label,
            "x": [p.started_at for p in s.points], "y": [p.value for p in s.points],
            "line": {"color": fg.COLORS[i % len(fg.COLORS)], "width": 1.5}, "marker": {"size": 6},
            "text": [f"run {p.run_id[:10]}" + (f" @{p.deployment_commit[:12]}" if p.deployment_commit else "")
                     + "".join(f"<br>{k}={v}" for k, v in p.tags) for p in s.points],
            "hovertemplate": "%{x}<br>%{y:,.4g}<br>%{text}<extra>%{fullData.name}</extra>",
        })
    rows = -(-len(data) // 2)  # the legend below, two entries a row
    layout = fg._layout(metric, xaxis=fg._axis("", type="date"), yaxis=fg._axis(metric, rangemode="tozero"),
                        height=300 + 22 * rows, legend={"orientation": "h", "x": 0.0, "y": -0.2, "yanchor": "top"},
                        margin={"l": 60, "r": 40, "t": 40, "b": 60 + 22 * rows})
    return {"data": data, "layout": layout}


def trend_html(by_metric: Mapping[str, Sequence[Series]], source: str) -> str:
    """The page: per metric its chart, then a table of each series' latest runs."""
    from tokspeed.reports.html import render_page

    figs = FigureSet()
    sections: list[dict[str, Any]] = []
    for metric, all_series in by_metric.items():
        chart = figs.add(metric, trend_figure(metric, all_series))
        tables = []
        for s in all_series:
            rows = [[when(p.started_at), p.run_id[:10], (p.deployment_commit or "")[:12],
                     " ".join(f"{k}={v}" for k, v in p.tags), number(metric, p.value)] for p in s.points[-20:]]
            tables.append({"label": s.label, "runs": len(s.points), "rows": rows[::-1]})
        sections.append({"metric": metric, "chart": chart, "tables": tables})
    runs = {p.run_id for ss in by_metric.values() for s in ss for p in s.points}
    return render_page("history.html.j2", {
        "title": "tokspeed history · " + ", ".join(by_metric),
        "subtitle": f"{len(runs)} runs from {source}; one line per comparable point (target · model · profile · workload); "
                    "times are UTC",
        "sections": sections,
        "figures_json": figs.json(),
        "tool": "tokspeed",
    })
