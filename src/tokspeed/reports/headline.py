"""The headline numbers of a load point, in reading order (shared by HTML and markdown).

Pure: a Summary in, labelled and formatted values out, so every report leads
with the same figures formatted the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokspeed.metrics.schema import Summary
from tokspeed.reports.format import fmt


@dataclass(frozen=True, slots=True)
class Headline:
    """One headline figure: `value` already formatted, `detail` a short second line."""

    label: str
    value: str
    unit: str
    detail: str = ""


def headlines(s: Summary) -> list[Headline]:
    """Throughput, latency percentiles (those measured), then requests and errors (and goodput with SLOs)."""
    t, r = s.throughput, s.requests
    latencies = (("TTFT p50", s.ttft_ms), ("ITL p50", s.itl_ms), ("TPOT p50", s.tpot_ms), ("E2E latency p50", s.e2e_ms))
    items = [
        Headline("Output throughput", fmt(t.output_tokens_per_s), "tok/s", f"{fmt(t.total_tokens_per_s)} total tok/s"),
        Headline("Request throughput", fmt(t.requests_per_s), "req/s", f"window {fmt(s.window_s)} s"),
        *(Headline(label, fmt(d.p50), "ms", f"p99 {fmt(d.p99)} ms") for label, d in latencies if d.count),
        Headline("Requests", f"{r.completed:,}", "completed", f"{r.errored:,} errored, {r.incomplete:,} incomplete"
                 + (f", {r.cancelled:,} cancelled" if r.cancelled else "")),
        Headline("Error rate", "—" if s.error_rate is None else f"{s.error_rate:.2%}", "", _errors(s)),
    ]
    if s.goodput is not None:
        g = s.goodput
        share = "—" if g.fraction is None else f"{g.fraction:.1%}"
        items.append(Headline("Goodput", fmt(g.requests_per_s), "req/s", f"{share} met {', '.join(g.slos)}"))
    return items


def _errors(s: Summary) -> str:
    return ", ".join(f"{k} × {v}" for k, v in s.errors.items()) or "no errors"
