"""The server-timing section of a run's printout: TTFT split into the server's parts and the rest, decode speeds.

Shown only when the server reported its own timings (native protocols; see
`tokspeed.metrics.server_timing`). Every figure is a mean over the requests that reported it.
"""

from __future__ import annotations

from tokspeed.metrics.schema import Summary
from tokspeed.metrics.server_timing import ServerTimingSummary, histogram_ttft
from tokspeed.telemetry.schema import TelemetrySummary


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def server_timing_lines(summary: Summary, telemetry: TelemetrySummary | None = None) -> list[str]:
    """The per-request decomposition (when reported) and the /metrics TTFT histogram comparison (when scraped)."""
    return _per_request(summary) + _histogram(summary, telemetry)


def _histogram(summary: Summary, telemetry: TelemetrySummary | None) -> list[str]:
    server = telemetry.server if telemetry is not None else None
    if server is None:
        return []
    h = histogram_ttft(server.engine, server.metrics, summary.ttft_ms.mean)
    if h is None:
        return []
    line = (f"Server /metrics TTFT  mean {_ms(h.server_mean_ms)} ms over {h.server_requests:,.0f} requests vs client "
            f"{_ms(h.client_mean_ms)} ms (client − server {_ms(h.difference_ms)} ms)")
    return [line]


def _per_request(summary: Summary) -> list[str]:
    st: ServerTimingSummary | None = getattr(summary, "server_timing", None)
    if st is None or not st.requests:
        return []
    lines = [f"Server timing  (as {st.requests} requests' server reported it; means)"]
    if st.server_ttft_ms.count:
        parts = [f"{label} {_ms(d.mean)}" for label, d in
                 (("queue", st.queue_ms), ("load", st.load_ms), ("prefill", st.prefill_ms)) if d.count]
        lines.append(
            f"  TTFT {_ms(st.client_ttft_ms.mean)} ms = server {' + '.join(parts)} + network/unreported "
            f"{_ms(st.network_ms.mean)} ms (p99 {_ms(st.network_ms.p99)} ms)"
        )
    if st.server_decode_tokens_per_s.count:
        ratio = f" (client/server {st.decode_speed_ratio:.3f})" if st.decode_speed_ratio is not None else ""
        lines.append(
            f"  Decode speed  server {_ms(st.server_decode_tokens_per_s.mean)} tok/s · client "
            f"{_ms(st.client_decode_tokens_per_s.mean)} tok/s{ratio}"
        )
    if st.total_ms.count:
        lines.append(f"  Server total  {_ms(st.total_ms.mean)} ms per request")
    return lines if len(lines) > 1 else []  # counts only (TGI's stream): nothing to decompose
