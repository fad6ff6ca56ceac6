"""Render a run with several load points (a sweep or a capacity search) as one table and its findings."""

from __future__ import annotations

from rich.table import Table

from tokspeed.reports.format import fmt
from tokspeed.results import CapacityResult, RunResult

COLUMNS = (
    ("req/s", "steady_requests_per_s"),
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
    """One row per benchmark: offered rate (open loop), throughput, latency percentiles (ms), error rate, goodput.

    req/s is what the point sustained at steady state (completions between its first end and last
    send, `throughput.sustained_requests_per_s`), not completions over a window holding the drain;
    the whole-window figure where a point is too short for one.
    """
    table = Table(title="Load points (latencies in ms)", title_justify="left", header_style="bold")
    table.add_column("point")
    open_loop = any(b.summary.schedule is not None for b in result.benchmarks)
    columns = (OFFERED, *COLUMNS) if open_loop else COLUMNS
    for title, _ in columns:
        table.add_column(title, justify="right")
    table.add_column("SLOs")
    verdicts = probe_verdicts(result)
    for i, bench in enumerate(result.benchmarks):
        flat = bench.summary.flat()
        flat["steady_requests_per_s"] = flat.get("sustained_requests_per_s") or flat.get("requests_per_s")
        slo = bench.summary.slo
        verdict = "" if not slo else ("met" if all(v.met for v in slo) else "missed")
        cells = [_cell(key, flat.get(key)) for _, key in columns]
        table.add_row(bench.name, *cells, verdicts.get(i, verdict))
    return table


def probe_verdicts(result: RunResult) -> dict[int, str]:
    """A capacity probe's verdict as the search took it: a probe that met its SLOs but fell behind failed."""
    if result.capacity is None:
        return {}
    return {p.benchmark: "met" if p.passed else ("saturated" if "over-saturated" in p.reason else "missed")
            for p in result.capacity.probes}


def _cell(key: str, value: float | None) -> str:
    if key == "error_rate":
        return "—" if value is None else f"{value * 100:.1f}%"
    return fmt(value, 1)


def capacity_lines(cap: CapacityResult) -> list[str]:
    """The capacity headline (req/s really offered at steady state, with its interval), why the search
    stopped, and what it cost."""
    spent = (f"{len(cap.probes)} probes, {cap.requests_spent:,} requests, {cap.seconds_spent:.0f} s"
             + (f" (stopped: {cap.stopped_by})" if cap.stopped_by != "bracket" else ""))
    if cap.value is None or cap.requests_per_s is None:
        return [f"Capacity: none — {cap.finding or 'no probed load met ' + ', '.join(cap.slos)}", f"  search: {spent}"]
    knob = (f"fitted across the probes; highest pass {fmt(cap.value)}/s" if cap.fitted
            else f"probed at {fmt(cap.value)}/s" if cap.by == "rate" else f"at concurrency {fmt(cap.value, 0)}")
    interval = cap.interval_requests_per_s or [None, None]
    between = (f"; between {fmt(interval[0])} and {fmt(interval[1])} req/s" if interval[1] is not None
               else "; no probe above it failed: a lower bound")
    goodput = f"; goodput there {fmt(cap.goodput_requests_per_s)} req/s" if cap.goodput_requests_per_s else ""
    lines = [f"Capacity: {fmt(cap.requests_per_s)} req/s at steady state ({knob}){between} under {', '.join(cap.slos)}{goodput}"]
    if cap.finding and cap.stopped_by not in ("bracket", "probes"):
        lines.append(f"  {cap.finding}")
    lines.append(f"  search: {spent}")
    return lines


def findings(result: RunResult) -> list[str]:
    """The capacity found, and the prefill-cost fit of an input-length sweep."""
    lines: list[str] = []
    cap = result.capacity
    if cap is not None:
        lines.extend(capacity_lines(cap))
    fit = result.sweep.ttft_vs_input_tokens if result.sweep else None
    if fit is not None and fit.slope_ms_per_1k_tokens is not None:
        lines.append(
            f"Prefill cost: TTFT ≈ {fmt(fit.intercept_ms)} ms + {fmt(fit.slope_ms_per_1k_tokens)} ms per 1k input tokens "
            f"(r² {fmt(fit.r2, 3)}, {fit.points} points)"
        )
    return lines
