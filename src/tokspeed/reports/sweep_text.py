"""Render a run with several load points (a sweep or a capacity search) as one table and its findings."""

from __future__ import annotations

from rich.table import Table

from tokspeed.reports.summary_text import fmt
from tokspeed.results import RunResult

COLUMNS = (
    ("req/s", "requests_per_s"),
    ("out tok/s", "output_tokens_per_s"),
    ("TTFT p50", "ttft_p50_ms"),
    ("TTFT p99", "ttft_p99_ms"),
    ("ITL p50", "itl_p50_ms"),
    ("TPOT p50", "tpot_p50_ms"),
    ("E2E p50", "e2e_p50_ms"),
    ("errors", "error_rate"),
    ("goodput", "goodput_requests_per_s"),
)


OFFERED = ("offered/s", "offered_requests_per_s")  # shown when some point is open loop


def sweep_table(result: RunResult) -> Table:
    """One row per benchmark: offered rate (open loop), throughput, latency percentiles (ms), error rate, goodput."""
    table = Table(title="Load points (latencies in ms)", title_justify="left", header_style="bold")
    table.add_column("point")
    open_loop = any(b.summary.schedule is not None for b in result.benchmarks)
    columns = (OFFERED, *COLUMNS) if open_loop else COLUMNS
    for title, _ in columns:
        table.add_column(title, justify="right")
    table.add_column("SLOs")
    for bench in result.benchmarks:
        flat = bench.summary.flat()
        slo = bench.summary.slo
        verdict = "" if not slo else ("met" if all(v.met for v in slo) else "missed")
        cells = [_cell(key, flat.get(key)) for _, key in columns]
        table.add_row(bench.name, *cells, verdict)
    return table


def _cell(key: str, value: float | None) -> str:
    if key == "error_rate":
        return "—" if value is None else f"{value * 100:.1f}%"
    return fmt(value, 1)


def findings(result: RunResult) -> list[str]:
    """The capacity found, and the prefill-cost fit of an input-length sweep."""
    lines: list[str] = []
    cap = result.capacity
    if cap is not None:
        unit = "req/s offered" if cap.by == "rate" else "concurrent requests"
        if cap.value is None:
            lines.append(f"Capacity: no probed load met {', '.join(cap.slos)} ({len(cap.probes)} probes)")
        else:
            rps = f" = {fmt(cap.requests_per_s)} req/s completed" if cap.by == "concurrency" else ""
            lines.append(
                f"Capacity: {fmt(cap.value)} {unit}{rps} (between {fmt(cap.low)} and {fmt(cap.high)}, "
                f"± {fmt(cap.uncertainty)}) under {', '.join(cap.slos)}; {len(cap.probes)} probes"
                + (f"; goodput there {fmt(cap.goodput_requests_per_s)} req/s" if cap.goodput_requests_per_s else "")
            )
    fit = result.sweep.ttft_vs_input_tokens if result.sweep else None
    if fit is not None and fit.slope_ms_per_1k_tokens is not None:
        lines.append(
            f"Prefill cost: TTFT ≈ {fmt(fit.intercept_ms)} ms + {fmt(fit.slope_ms_per_1k_tokens)} ms per 1k input tokens "
            f"(r² {fmt(fit.r2, 3)}, {fit.points} points)"
        )
    return lines
