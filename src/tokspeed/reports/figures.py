"""Plotly figure specs (plain dicts: `data` and `layout`) for the HTML reports.

Pure: arrays in, JSON-ready dicts out; plotly.js draws them in the browser, so
no plotting library runs here. Every series is bounded in size by
`tokspeed.reports.plotdata`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokspeed.metrics.slo import SLO
from tokspeed.reports.plotdata import ecdf, finite, histogram, subset
from tokspeed.reports.timeline import LatencyOverTime, ServerOverTime, Timeline
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
    """An axis with plotly's own 1-2-5 tick steps (`tickmode` auto: an overlaid axis is never synced to
    the other's gridlines, which gave steps like 2.42, 4.83) and plain numbers (no 1.32e+03)."""
    axis = {"title": {"text": title}, "gridcolor": "#e5e7eb", "zeroline": False, "automargin": True,
            "tickmode": "auto", "nticks": 8, "exponentformat": "none", "separatethousands": True}
    axis.update(extra)
    return axis


def num(value: float) -> str:
    """A value for a label: 1,320 · 132 · 13.2 · 1.32 · 0.132 (never 1.32e+03)."""
    a = abs(value)
    if float(value).is_integer() and a < 1e15:
        return f"{int(value):,}"
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    if a >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _count_axis(title: str, top: float, **extra: Any) -> dict[str, Any]:
    """An axis of counts: whole-number ticks only (no 0.501 errors)."""
    step = max(1, int(np.ceil(top / 4))) if top > 0 else 1
    return _axis(title, tickmode="linear", tick0=0, dtick=step, range=[0, max(top, 1) * 1.1], tickformat="d", **extra)


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
            {"x": v, "y": 1.0, "yref": "paper", "text": f"{k} {num(v)}", "showarrow": False, "yanchor": "bottom",
             "xanchor": "right" if k == "p50" else "left", "font": {"size": 11, "color": "#374151"}}
            for k, v in marks.items()
        ],
        showlegend=False,
    )
    return {"data": data, "layout": layout}


def _vline(x: float) -> dict[str, Any]:
    return {"type": "line", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#6b7280", "width": 1, "dash": "dot"}}


def timeline_figure(tl: Timeline, lat: LatencyOverTime | None = None, server: ServerOverTime | None = None) -> Figure:
    """Stacked panels on one time axis: output tokens/s; TTFT and ITL p50/p99 per bin (with `lat`);
    requests in flight (and the server's own running and waiting requests, with `server`); errors per
    bin by kind (only when there are errors)."""
    centers = tl.start_s + tl.bin_s / 2
    panels: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
        ("output tokens/s", [{
            "type": "scatter", "mode": "lines", "x": centers, "y": tl.output_tokens_per_s, "name": "output tok/s",
            "line": {"color": COLORS[0], "width": 1.5, "shape": "hvh"}, "fill": "tozeroy", "fillcolor": "rgba(37,99,235,0.12)",
            "hovertemplate": "t=%{x:.3g} s: %{y:,.0f} tok/s<extra></extra>",
        }], {"rangemode": "tozero"}),
    ]  # fmt: skip
    if lat is not None:
        for metric, label, color in (("ttft", "TTFT", COLORS[3]), ("itl", "ITL", COLORS[2])):
            p50, p99 = getattr(lat, f"{metric}_p50_ms"), getattr(lat, f"{metric}_p99_ms")
            if np.isfinite(p50).any():
                panels.append((f"{label}, ms", [
                    {"type": "scatter", "mode": "lines+markers", "x": centers, "y": p50, "name": f"{label} p50",
                     "line": {"color": color, "width": 1.5}, "marker": {"size": 3},
                     "hovertemplate": f"t=%{{x:.3g}} s: %{{y:.3g}} ms<extra>{label} p50</extra>"},
                    {"type": "scatter", "mode": "lines", "x": centers, "y": p99, "name": f"{label} p99",
                     "line": {"color": color, "width": 1, "dash": "dot"},
                     "hovertemplate": f"t=%{{x:.3g}} s: %{{y:.3g}} ms<extra>{label} p99</extra>"},
                ], {"rangemode": "tozero"}))  # fmt: skip
    panels.append(("in flight", [{
        "type": "scatter", "mode": "lines", "x": centers, "y": tl.in_flight, "name": "in flight",
        "line": {"color": COLORS[4], "width": 1.5, "shape": "hvh"}, "hovertemplate": "t=%{x:.3g} s: %{y:.1f} in flight<extra></extra>",
    }], {"rangemode": "tozero"}))  # fmt: skip
    if server is not None:
        panels.append(("server: running, waiting", [
            {"type": "scatter", "mode": "lines+markers", "x": centers, "y": series, "name": f"server {name}",
             "line": {"color": color, "width": 1.5, "shape": "hvh", "dash": dash}, "marker": {"size": 3},
             "hovertemplate": f"t=%{{x:.3g}} s: %{{y:.1f}} {name}<extra>server</extra>"}
            for name, series, color, dash in (("running", server.running, COLORS[1], "solid"),
                                              ("waiting", server.waiting, COLORS[5 % len(COLORS)], "dot"))
        ], {"rangemode": "tozero"}))  # fmt: skip
    kinds = lat.errors_by_kind if lat is not None else ({"errors": tl.errors} if tl.errors.any() else {})
    if kinds:
        bars = [
            {"type": "bar", "x": centers, "y": counts, "name": kind, "width": tl.bin_s * 0.9,
             "marker": {"color": ERROR_COLORS[n % len(ERROR_COLORS)]}, "hovertemplate": f"t=%{{x:.3g}} s: %{{y}} {kind}<extra></extra>"}
            for n, (kind, counts) in enumerate(kinds.items())
        ]
        top = float(np.sum([c for c in kinds.values()], axis=0).max())
        panels.append(("errors", bars, {"count_top": top}))
    return _stacked(f"Over time ({tl.bin_s:g} s bins): throughput, latency, load and errors", panels)


ERROR_COLORS = ("#dc2626", "#f59e0b", "#7c3aed", "#db2777", "#0d9488", "#78350f")


def _stacked(title: str, panels: list[tuple[str, list[dict[str, Any]], dict[str, Any]]]) -> Figure:
    """Panels stacked top to bottom, sharing the x axis (seconds since the first measured send)."""
    n, gap = len(panels), 0.04
    height = (1.0 - gap * (n - 1)) / n
    data: list[dict[str, Any]] = []
    layout = _layout(title, height=150 + 130 * n, barmode="stack", showlegend=True,
                     legend={"orientation": "h", "x": 0.0, "y": -0.09, "yanchor": "top"},
                     margin={"l": 70, "r": 30, "t": 40, "b": 90})
    for i, (ytitle, traces, opts) in enumerate(panels):
        ref = "" if i == 0 else str(i + 1)
        top = 1.0 - i * (height + gap)
        for t in traces:
            data.append({**t, "xaxis": "x", "yaxis": f"y{ref}"})
        axis = (_count_axis(ytitle, opts["count_top"]) if "count_top" in opts else _axis(ytitle, **opts))
        layout[f"yaxis{ref}"] = {**axis, "domain": [max(0.0, top - height), top], "anchor": "x"}
    layout["xaxis"] = _axis("seconds since the first measured request", anchor=f"y{n if n > 1 else ''}", rangemode="tozero")
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


@dataclass(frozen=True)
class SweepContext:
    """What the sweep charts need besides the benchmarks: the swept knob, the SLOs, the capacity point."""

    dimension: str | None = None  # concurrency, rate, ...: the x of the latency-vs-load charts
    slos: Sequence[SLO] = ()
    capacity: int | None = None  # index of the capacity point in the benchmarks (None: no point meets every SLO)
    capacity_why: str = ""


def capacity_point(benchmarks: Sequence[Benchmark], best_probe: int | None = None) -> tuple[int | None, str]:
    """The point to mark: a capacity search's best passing probe, else the highest-throughput benchmark
    that met every SLO it was judged on (None without SLOs or when none met them)."""
    if best_probe is not None:
        return best_probe, "capacity: the highest load meeting every SLO"
    passing = [(b.summary.throughput.output_tokens_per_s or 0.0, i) for i, b in enumerate(benchmarks)
               if b.summary.slo and all(v.met for v in b.summary.slo)]
    if not passing:
        return None, ""
    return max(passing)[1], "capacity point: the highest throughput meeting every SLO"


def sweep_figures(benchmarks: Sequence[Benchmark], ctx: SweepContext | None = None) -> list[tuple[str, Figure]]:
    """Curves across ≥ 2 benchmarks: latency vs load (p50 line, p50–p99 band), the per-user vs system
    throughput trade-off (vLLM's Pareto plot), throughput vs latency, goodput vs offered rate, TTFT vs
    prompt length."""
    if len(benchmarks) < 2:
        return []
    ctx = ctx or SweepContext()
    flats = [b.summary.flat() for b in benchmarks]
    names = [b.name for b in benchmarks]
    out: list[tuple[str, Figure]] = []
    knob = [b.profile.get(ctx.dimension) for b in benchmarks] if ctx.dimension else []
    if knob and all(isinstance(v, (int, float)) for v in knob):
        for family, label in (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E latency")):
            fig = _latency_band(family, label, [float(v) for v in knob if v is not None], flats, names, ctx)
            if fig is not None:
                out.append((f"{label} vs {ctx.dimension}", fig))
    pareto = _pareto(flats, names, ctx)
    if pareto is not None:
        out.append(("Per-user vs system throughput", pareto))
    out.append(("Throughput vs latency", _throughput_latency(flats, names)))
    rates = [b.profile.get("rate") for b in benchmarks]
    if all(isinstance(r, (int, float)) for r in rates) and any(f.get("goodput_requests_per_s") is not None for f in flats):
        out.append(("Goodput vs offered rate", _curve("Goodput vs offered rate", rates, flats, names, ("goodput_requests_per_s", "requests_per_s"), "offered rate, req/s", "req/s")))
    lengths = [f.get("input_tokens_mean") for f in flats]
    if len({round(v) for v in lengths if v is not None}) > 1:
        out.append(("TTFT vs prompt length", _curve("TTFT vs mean prompt length", lengths, flats, names, ("ttft_p50_ms", "ttft_p99_ms"), "mean input tokens", "ms")))
    return out


def _latency_band(family: str, label: str, x: list[float], flats: list[dict[str, float | None]], names: list[str],
                  ctx: SweepContext) -> Figure | None:
    """p50 as a line and the p50–p99 band shaded, against the swept knob; an SLO on the metric as a
    dashed limit with the region beyond it shaded; the capacity point as a vertical line."""
    p50 = [f.get(f"{family}_p50_ms") for f in flats]
    p99 = [f.get(f"{family}_p99_ms") for f in flats]
    if all(v is None for v in p50):
        return None
    color = COLORS[{"ttft": 3, "itl": 2, "tpot": 5, "e2e": 0}[family]]
    fill = _rgba(color, 0.18)
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "x": x, "y": p99, "name": "p99", "line": {"color": color, "width": 1, "dash": "dot"},
         "text": names, "hovertemplate": "%{text}: p99 %{y:.3g} ms<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "x": x, "y": p50, "name": "p50 (band: p50–p99)", "fill": "tonexty",
         "fillcolor": fill, "line": {"color": color, "width": 2}, "marker": {"size": 7}, "text": names,
         "hovertemplate": "%{text}: p50 %{y:.3g} ms<extra></extra>"},
    ]  # fmt: skip
    shapes, annotations = [], []
    for slo in ctx.slos:
        if slo.metric == family and slo.unit == "ms" and slo.op in ("<=", "<"):
            shapes.append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": slo.value, "y1": max(v or 0 for v in p99 + p50) * 1.15 + slo.value,
                           "fillcolor": "rgba(220,38,38,0.06)", "line": {"width": 0}, "layer": "below"})
            shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": slo.value, "y1": slo.value,
                           "line": {"color": "#dc2626", "width": 1.5, "dash": "dash"}})
            annotations.append({"xref": "paper", "x": 0.0, "y": slo.value, "yanchor": "bottom", "xanchor": "left", "showarrow": False,
                                "text": f"SLO {slo.name} {slo.op} {num(slo.value)}", "font": {"size": 11, "color": "#b91c1c"}})
    log = len(x) > 2 and min(x) > 0 and max(x) / min(x) >= 8  # 1, 2, 4, ... 64: a log axis spaces them evenly
    if ctx.capacity is not None:
        cx = x[ctx.capacity]
        at = float(np.log10(cx)) if log else cx  # annotations on a log axis are placed in log10 units, shapes are not
        shapes.append({"type": "line", "x0": cx, "x1": cx, "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#16a34a", "width": 1.5, "dash": "dash"}})
        annotations.append({"x": at, "y": 1.0, "yref": "paper", "yanchor": "bottom", "showarrow": False,
                            "text": f"capacity: {ctx.dimension} {num(cx)}", "font": {"size": 11, "color": "#15803d"}})
    layout = _layout(f"{label} vs {ctx.dimension} (p50, band to p99)", height=340,
                     xaxis=_axis(ctx.dimension or "", **_knob_axis(x, log)),
                     yaxis=_axis(f"{label}, ms", rangemode="tozero"), shapes=shapes, annotations=annotations)
    return {"data": data, "layout": layout}


def _knob_axis(x: list[float], log: bool) -> dict[str, Any]:
    """The swept knob's axis: ticks at the values swept (a log axis for 1, 2, 4, ... 64), a margin either side."""
    lo, hi = min(x), max(x)
    if log:
        span = np.log10(hi) - np.log10(lo)
        return {"type": "log", "tickmode": "array", "tickvals": x, "ticktext": [num(v) for v in x],
                "range": [float(np.log10(lo) - 0.06 * span), float(np.log10(hi) + 0.06 * span)]}
    pad = (hi - lo) * 0.06 or 1.0
    return {"type": "linear", "range": [lo - pad, hi + pad]}


def _pareto(flats: list[dict[str, float | None]], names: list[str], ctx: SweepContext) -> Figure | None:
    """Per-user decode speed (x) against system output tokens/s (y), one point per benchmark, the
    Pareto frontier drawn through the points no other beats on both; an SLO on decode speed or TPOT
    shades the region meeting it; the capacity point is a star."""
    pts: list[tuple[float, float, str]] = [
        (x, y, n) for f, n in zip(flats, names)
        if (x := f.get("decode_p50_tokens_per_s")) is not None and (y := f.get("output_tokens_per_s")) is not None
    ]
    if len(pts) < 2:
        return None
    frontier = sorted((p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)), key=lambda p: p[0])
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "markers+text", "x": [p[0] for p in pts], "y": [p[1] for p in pts], "name": "benchmarks",
         "text": [_short(p[2]) for p in pts], "textposition": _positions(len(pts)), "marker": {"color": COLORS[0], "size": 9},
         "customdata": [p[2] for p in pts], "hovertemplate": "%{customdata}: %{x:.3g} tok/s per user, %{y:,.0f} tok/s<extra></extra>"},
        {"type": "scatter", "mode": "lines", "x": [p[0] for p in frontier], "y": [p[1] for p in frontier], "name": "Pareto frontier",
         "line": {"color": COLORS[0], "width": 1.5, "dash": "dot"}, "hoverinfo": "skip"},
    ]  # fmt: skip
    shapes, annotations = [], []
    limit = _decode_floor(ctx.slos)
    if limit is not None:
        shapes.append({"type": "rect", "x0": limit, "x1": max(p[0] for p in pts) * 1.2 + limit, "yref": "paper", "y0": 0, "y1": 1,
                       "fillcolor": "rgba(22,163,74,0.08)", "line": {"width": 0}, "layer": "below"})
        shapes.append({"type": "line", "x0": limit, "x1": limit, "yref": "paper", "y0": 0, "y1": 1, "line": {"color": "#16a34a", "width": 1.5, "dash": "dash"}})
        annotations.append({"x": limit, "y": 1.0, "yref": "paper", "yanchor": "bottom", "xanchor": "left", "showarrow": False,
                            "text": f"meets the SLO: ≥ {num(limit)} tok/s per user", "font": {"size": 11, "color": "#15803d"}})
    if ctx.capacity is not None and flats[ctx.capacity].get("decode_p50_tokens_per_s") is not None:
        f = flats[ctx.capacity]
        data.append({"type": "scatter", "mode": "markers", "x": [f["decode_p50_tokens_per_s"]], "y": [f["output_tokens_per_s"]],
                     "name": ctx.capacity_why or "capacity point", "marker": {"symbol": "star", "size": 18, "color": "#16a34a",
                     "line": {"color": "#14532d", "width": 1}}, "hovertemplate": f"{names[ctx.capacity]}<extra>capacity</extra>"})
    layout = _layout("Per-user decode speed vs system throughput (up and right is better)", height=380,
                     xaxis=_axis("per-user decode speed p50, tokens/s (1 / TPOT)"),
                     yaxis=_axis("system output tokens/s", range=[0, max(p[1] for p in pts) * 1.15]), shapes=shapes,
                     annotations=annotations)
    return {"data": data, "layout": layout}


def _decode_floor(slos: Sequence[SLO]) -> float | None:
    """The per-user decode speed an SLO demands: `decode… >= X` directly, `tpot… <= Y` as 1000 / Y."""
    floors = [s.value for s in slos if s.metric == "decode" and s.op in (">=", ">")]
    floors += [1000.0 / s.value for s in slos if s.metric == "tpot" and s.op in ("<=", "<") and s.value > 0]
    return max(floors) if floors else None


def _short(name: str) -> str:
    """A point label: `concurrency 16` -> `c=16`, `rate 4` -> `r=4` (the full name is in the hover)."""
    for word, short in (("concurrency ", "c="), ("rate ", "r="), ("synchronous", "sync")):
        if name.startswith(word):
            return short + name[len(word):].split(" ")[0] if short.endswith("=") else short
    return name if len(name) <= 14 else name[:13] + "…"


def _positions(n: int) -> list[str]:
    """Labels alternate above and below their points, so neighbours do not print over each other."""
    return ["top center" if i % 2 == 0 else "bottom center" for i in range(n)]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _throughput_latency(flats: list[dict[str, float | None]], names: list[str]) -> Figure:
    x = [f.get("output_tokens_per_s") for f in flats]
    data = []
    for n, (metric, label) in enumerate((("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("tpot_p50_ms", "TPOT p50"))):
        data.append(
            {
                "type": "scatter", "mode": "lines+markers+text" if n == 0 else "lines+markers", "x": x,
                "y": [f.get(metric) for f in flats], "name": label,
                "text": [_short(v) for v in names] if n == 0 else None, "textposition": _positions(len(names)),
                "customdata": names, "line": {"color": COLORS[n]},
                "yaxis": "y2" if metric == "tpot_p50_ms" else "y",
                "hovertemplate": f"%{{customdata}}: %{{x:,.0f}} tok/s, %{{y:.3g}} ms<extra>{label}</extra>",
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


def overlaid_cdfs(label: str, unit: str, series: Sequence[tuple[str, np.ndarray]], verdict: str = "") -> Figure | None:
    """One CDF per run, overlaid, for a comparison; `verdict` (compare's words for this metric) under the title.

    The x axis spans the data (a little either side), not 0 to max: 40–52 ms is not squeezed into
    the right tenth of a 0–52 ms axis.
    """
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
    lo = min(float(np.min(np.asarray(d["x"], dtype=np.float64))) for d in data)
    hi = max(float(np.max(np.asarray(d["x"], dtype=np.float64))) for d in data)
    pad = (hi - lo) * 0.04 or max(abs(hi) * 0.02, 1e-3)
    layout = _layout(
        f"{label} CDF ({unit})",
        xaxis=_axis(f"{label}, {unit}", range=[lo - pad, hi + pad]),
        yaxis=_axis("fraction ≤ x", range=[0, 1.02], tickformat=".0%", dtick=0.25),
        # a CDF leaves its upper left corner empty: the legend goes there
        legend={"x": 0.01, "y": 0.98, "bgcolor": "rgba(255,255,255,0.8)", "bordercolor": "#e5e7eb", "borderwidth": 1},
        margin={"l": 60, "r": 30, "t": 62 if verdict else 40, "b": 50},
        annotations=[{"xref": "paper", "yref": "paper", "x": 0.0, "y": 1.02, "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                      "text": verdict, "font": {"size": 11, "color": "#374151"}}] if verdict else [],
    )
    return {"data": data, "layout": layout}


def bars_figure(title: str, names: Sequence[str], values: Sequence[float | None], unit: str, verdict: str = "") -> Figure:
    data = [
        {"type": "bar", "x": list(names), "y": list(values), "marker": {"color": [COLORS[n % len(COLORS)] for n in range(len(names))]},
         "hovertemplate": "%{x}: %{y:,.4g} " + unit + "<extra></extra>"}
    ]
    notes = [{"xref": "paper", "yref": "paper", "x": 0.0, "y": 1.02, "xanchor": "left", "yanchor": "bottom", "showarrow": False,
              "text": verdict, "font": {"size": 11, "color": "#374151"}}] if verdict else []
    return {"data": data, "layout": _layout(title, xaxis=_axis("run", type="category"), yaxis=_axis(unit, rangemode="tozero"),
                                            showlegend=False, annotations=notes, margin={"l": 60, "r": 30, "t": 62 if verdict else 40, "b": 50})}
