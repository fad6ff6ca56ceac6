"""reconnects: measured requests had to open new connections (keep-alive broken or too short).

Fires, per load point, when more than `reconnect_share` of the measured requests (and at
least `reconnect_min`) paid a TCP/TLS connect. tokspeed opens its connections before the
load, so a connect during the measurement means the server (or a proxy) closed a kept-alive
connection. The connect is recorded apart (`connect_duration_ns`) and is not inside TTFT or
E2E, which start when the request is sent: a real client that reconnects pays it on top.

A request the client cancelled (`--cancel-share`) closes its own connection, so up to one
connect per cancelled request is the client's doing: only the connects beyond them count.
"""

from __future__ import annotations

from tokspeed.diagnosis.context import PointData
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results.findings import Finding


def reconnects(p: PointData, t: Thresholds) -> list[Finding]:
    d = p.digest
    paid, measured = d.connects, d.measured_sent
    cancelled = p.bench.summary.requests.cancelled
    unexplained = paid - cancelled
    if unexplained < t.reconnect_min or unexplained <= t.reconnect_share * measured:
        return []
    mean_ms = d.connect_sum_ns / paid / 1e6
    beyond = f", {unexplained} more than the {cancelled} the client cancelled" if cancelled else ""
    return [
        Finding(
            rule="reconnects",
            severity="warning",
            title=f"{paid} of {measured} measured requests opened a new connection{beyond} "
            f"(mean connect {mean_ms:.2f} ms, not included in TTFT or E2E)",
            evidence={"connects": paid, "requests": measured, "connect_mean_ms": round(mean_ms, 3),
                      "connect_max_ms": round(d.connect_max_ns / 1e6, 3),
                      **({"cancelled": cancelled} if cancelled else {})},
            advice="the server or a proxy closes kept-alive connections (Connection: close, or an idle timeout "
            "shorter than the gaps between requests): raise its keep-alive timeout (e.g. uvicorn's "
            "timeout_keep_alive), or count the connect time, which real clients pay as well",
            benchmark=p.index,
        )
    ]
