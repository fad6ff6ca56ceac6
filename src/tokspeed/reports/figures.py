"""Plotly figure specs (plain dicts: `data` and `layout`) for the HTML reports.

Pure: arrays in, JSON-ready dicts out; plotly.js draws them in the browser, so
no plotting library runs here. Every series is bounded in size by
`tokspeed.reports.plotdata`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tokspeed.reports.plotdata import ecdf, finite, histogram, subset
from tokspeed.reports.timeline import Timeline
from tokspeed.results import Benchmark

Figure = dict[str, Any]
COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
SCATTER_POINTS = 4000
FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12, "color": "#1f2937"}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}},
        "font": FONT,
        "margin": {"l": 60, "r": 60, "t": 40, "b": 90 if extra.get("showlegend", True) else 50},
        "height": 320,
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "hovermode": "closest",
        "legend": {"orientation": "h", "x": 0.0, "y": -0.3, "yanchor": "top"},
    }
    base.update(extra)
    return base


def _axis(title: str, **extra: Any) -> dict[str, Any]:
    axis = {"title": {"text": title}, "gridcolor": "#e5e7eb", "zeroline": False, "automargin": True}
    axis.update(extra)
    return axis


def distribution_figure(label: str, unit: str, values: np.ndarray, per: str = "requests") -> Figure | None:
    """Histogram (bars, left axis) and CDF (line, right axis) of one metric, p50 and p99 marked."""
    hist = histogram(values)
    if hist is None:
        return None
    x, p = ecdf(values)
    data = [
        {
            "type": "bar", "x": hist.centers, "y": hist.counts, "width": hist.width, "name": per,
            "marker": {"color": "#93c5fd", "line": {"width": 0}}, "hovertemplate": f"%{{x:.3g}} {unit}: %{{y}} {per}<extra></extra>",
        },
        {
            "type": "scatter", "mode": "lines", "x": x, "y": p, "yaxis": "y2", "name": "CDF",
            "line": {"color": COLORS[0], "width": 2, "shape": "hv"}, "hovertemplate": f"%{{x:.3g}} {unit}: %{{y:.1%}}<extra>CDF</extra>",
        },
    ]
    sample = finite(values)
    marks = {name: float(np.percentile(sample, q)) for name, q in (("p50", 50), ("p99", 99))}
    clipped = f" · {hist.beyond} above p99.9 not drawn" if hist.beyond else ""
    layout = _layout(
        f"{label} ({unit})",
        xaxis=_axis(f"{label}, {unit}{clipped}", range=[hist.lo - hist.width, max(hist.hi, *marks.values()) + hist.width]),
        yaxis=_axis(per, rangemode="tozero"),
        yaxis2=_axis("fraction ≤ x", overlaying="y", side="right", range=[0, 1.02], tickformat=".0%", dtick=0.25, showgrid=False),
        shapes=[_vline(v) for v in marks.values()],
        annotations=[
            {"x": v, "y": 1.0, "yref": "paper", "text": f"{k} {v:.3g}", "showarrow": False, "yanchor": "bottom", "font": {"size": 11, "color": "#374151"}}
            for k, v in marks.items()
        ],
        showlegend=False,
    )
    return {"data": data, "layout": layout}


def _vline(x: float) -> dict[str, Any]:
    return {"type": "line", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#6b7280", "width": 1, "dash": "dot"}}


def timeline_figure(tl: Timeline) -> Figure:
    """Output tokens/s (top) and requests in flight (bottom) over time, 1 s bins."""
    centers = tl.start_s + tl.bin_s / 2
    data: list[dict[str, Any]] = [
        {
            "type": "scatter", "mode": "lines", "x": centers, "y": tl.output_tokens_per_s, "name": "output tok/s",
            "line": {"color": COLORS[0], "width": 1.5, "shape": "hvh"}, "fill": "tozeroy", "fillcolor": "rgba(37,99,235,0.12)",
            "hovertemplate": "t=%{x:.3g} s: %{y:,.0f} tok/s<extra></extra>",
        },
        {
            "type": "scatter", "mode": "lines", "x": centers, "y": tl.in_flight, "name": "in flight", "xaxis": "x", "yaxis": "y2",
            "line": {"color": COLORS[4], "width": 1.5, "shape": "hvh"},
            "hovertemplate": "t=%{x:.3g} s: %{y:.1f} in flight<extra></extra>",
        },
    ]
    if tl.errors.any():
        hit = tl.errors > 0
        data.append(
            {
                "type": "bar", "x": centers[hit], "y": tl.errors[hit], "name": "errors", "yaxis": "y3",
                "marker": {"color": COLORS[1]}, "hovertemplate": "t=%{x:.3g} s: %{y} errors<extra></extra>",
            }
        )
    layout = _layout(
        f"Throughput and load over time ({tl.bin_s:g} s bins)",
        height=420,
        xaxis=_axis("seconds since the first measured request", anchor="y2"),
        yaxis=_axis("output tokens/s", domain=[0.45, 1.0], rangemode="tozero"),
        yaxis2=_axis("requests in flight", domain=[0.0, 0.35], rangemode="tozero"),
        yaxis3=_axis("errors", overlaying="y2", side="right", rangemode="tozero", showgrid=False),
        showlegend=False,
    )
    return {"data": data, "layout": layout}


def scatter_figure(input_tokens: np.ndarray, ttft_ms: np.ndarray) -> Figure | None:
    """TTFT against prompt length, one point per request (a seeded subset above 4,000)."""
    keep = np.isfinite(input_tokens) & np.isfinite(ttft_ms)
    x, y = input_tokens[keep], ttft_ms[keep]
    if x.size == 0:
        return None
    idx = subset(x.size, SCATTER_POINTS)
    shown = "" if idx.size == x.size else f" ({idx.size:,} of {x.size:,} requests)"
    data = [
        {
            "type": "scatter", "mode": "markers", "x": x[idx], "y": y[idx], "name": "requests",
            "marker": {"color": COLORS[0], "size": 5, "opacity": 0.55},
            "hovertemplate": "%{x:.0f} input tokens: %{y:.3g} ms<extra></extra>",
        }
    ]
    layout = _layout(f"TTFT vs input tokens{shown}", xaxis=_axis("input tokens", rangemode="tozero"), yaxis=_axis("TTFT, ms", rangemode="tozero"), showlegend=False)
    return {"data": data, "layout": layout}


def iterations_figure(bench: Benchmark) -> Figure | None:
    """One bar per iteration for output tokens/s (left) and TTFT p50 (right), each with its mean."""
    its = bench.iterations
    if len(its) < 2:
        return None
    labels = [f"#{it.iteration}" for it in its]
    panels = (("output_tokens_per_s", "output tokens/s", "x", "y"), ("ttft_p50_ms", "TTFT p50, ms", "x2", "y2"))
    data, shapes = [], []
    for n, (name, title, xa, ya) in enumerate(panels):
        values = [it.summary.flat().get(name) for it in its]
        known = [v for v in values if v is not None]
        data.append(
            {
                "type": "bar", "x": labels, "y": values, "name": title, "xaxis": xa, "yaxis": ya,
                "marker": {"color": COLORS[n * 4]}, "hovertemplate": f"iteration %{{x}}: %{{y:,.4g}}<extra>{title}</extra>",
            }
        )
        if known:
            mean = float(np.mean(known))
            ref = "" if n == 0 else "2"
            shapes.append({"type": "line", "xref": f"x{ref} domain", "x0": 0, "x1": 1, "yref": f"y{ref}", "y0": mean, "y1": mean,
                           "line": {"color": "#111827", "width": 1.5, "dash": "dash"}})
    verdict = bench.across_iterations.verdict if bench.across_iterations else ""
    layout = _layout(
        f"Per-iteration stability ({verdict}; dashed line: mean)",
        xaxis=_axis("iteration", domain=[0.0, 0.45], type="category"),
        yaxis=_axis("output tokens/s", rangemode="tozero"),
        xaxis2=_axis("iteration", domain=[0.55, 1.0], anchor="y2", type="category"),
        yaxis2=_axis("TTFT p50, ms", anchor="x2", rangemode="tozero"),
        shapes=shapes,
        showlegend=False,
    )
    return {"data": data, "layout": layout}


def sweep_figures(benchmarks: Sequence[Benchmark]) -> list[tuple[str, Figure]]:
    """Curves across ≥ 2 benchmarks: throughput vs latency, goodput vs offered rate, TTFT vs prompt length."""
    if len(benchmarks) < 2:
        return []
    flats = [b.summary.flat() for b in benchmarks]
    names = [b.name for b in benchmarks]
    out = [("Throughput vs latency", _throughput_latency(flats, names))]
    rates = [b.profile.get("rate") for b in benchmarks]
    if all(isinstance(r, (int, float)) for r in rates) and any(f.get("goodput_requests_per_s") is not None for f in flats):
        out.append(("Goodput vs offered rate", _curve("Goodput vs offered rate", rates, flats, names, ("goodput_requests_per_s", "requests_per_s"), "offered rate, req/s", "req/s")))
    lengths = [f.get("input_tokens_mean") for f in flats]
    if len({round(v) for v in lengths if v is not None}) > 1:
        out.append(("TTFT vs prompt length", _curve("TTFT vs mean prompt length", lengths, flats, names, ("ttft_p50_ms", "ttft_p99_ms"), "mean input tokens", "ms")))
    return out


def _throughput_latency(flats: list[dict[str, float | None]], names: list[str]) -> Figure:
    x = [f.get("output_tokens_per_s") for f in flats]
    data = []
    for n, (metric, label) in enumerate((("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("tpot_p50_ms", "TPOT p50"))):
        data.append(
            {
                "type": "scatter", "mode": "lines+markers+text", "x": x, "y": [f.get(metric) for f in flats], "name": label,
                "text": names if n == 0 else None, "textposition": "top center", "line": {"color": COLORS[n]},
                "yaxis": "y2" if metric == "tpot_p50_ms" else "y",
                "hovertemplate": f"%{{x:,.0f}} tok/s: %{{y:.3g}} ms<extra>{label}</extra>",
            }
        )
    layout = _layout(
        "Throughput vs latency (one point per benchmark)",
        height=380,
        xaxis=_axis("output tokens/s", rangemode="tozero"),
        yaxis=_axis("TTFT, ms", rangemode="tozero"),
        yaxis2=_axis("TPOT p50, ms", overlaying="y", side="right", rangemode="tozero", showgrid=False),
    )
    return {"data": data, "layout": layout}


def _curve(title: str, x: Sequence[float | None], flats: list[dict[str, float | None]], names: list[str],
           metrics: tuple[str, ...], xtitle: str, ytitle: str) -> Figure:
    data = [
        {"type": "scatter", "mode": "lines+markers", "x": list(x), "y": [f.get(m) for f in flats], "name": m, "text": names,
         "line": {"color": COLORS[n]}, "hovertemplate": "%{text}: %{y:.4g}<extra>" + m + "</extra>"}
        for n, m in enumerate(metrics)
    ]
    return {"data": data, "layout": _layout(title, height=340, xaxis=_axis(xtitle, rangemode="tozero"), yaxis=_axis(ytitle, rangemode="tozero"))}


def overlaid_cdfs(label: str, unit: str, series: Sequence[tuple[str, np.ndarray]]) -> Figure | None:
    """One CDF per run, overlaid, for a comparison."""
    data = []
    for n, (name, values) in enumerate(series):
        x, p = ecdf(values)
        if x.size:
            data.append(
                {
                    "type": "scatter", "mode": "lines", "x": x, "y": p, "name": name,
                    "line": {"color": COLORS[n % len(COLORS)], "width": 2, "shape": "hv"},
                    "hovertemplate": f"%{{x:.3g}} {unit}: %{{y:.1%}}<extra>{name}</extra>",
                }
            )
    if not data:
        return None
    layout = _layout(
        f"{label} CDF ({unit})",
        xaxis=_axis(f"{label}, {unit}", rangemode="tozero"),
        yaxis=_axis("fraction ≤ x", range=[0, 1.02], tickformat=".0%", dtick=0.25),
        # a CDF leaves its upper left corner empty: the legend goes there
        legend={"x": 0.01, "y": 0.98, "bgcolor": "rgba(255,255,255,0.8)", "bordercolor": "#e5e7eb", "borderwidth": 1},
        margin={"l": 60, "r": 30, "t": 40, "b": 50},
    )
    return {"data": data, "layout": layout}


def bars_figure(title: str, names: Sequence[str], values: Sequence[float | None], unit: str) -> Figure:
    data = [
        {"type": "bar", "x": list(names), "y": list(values), "marker": {"color": [COLORS[n % len(COLORS)] for n in range(len(names))]},
         "hovertemplate": "%{x}: %{y:,.4g} " + unit + "<extra></extra>"}
    ]
    return {"data": data, "layout": _layout(title, xaxis=_axis("run"), yaxis=_axis(unit, rangemode="tozero"), showlegend=False)}
