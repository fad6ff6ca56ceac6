"""reconnects: measured requests had to open new connections (keep-alive broken or too short).

Fires, per load point, when more than `reconnect_share` of the measured requests (and at
least `reconnect_min`) paid a TCP/TLS connect. tokspeed opens its connections before the
load, so a connect during the measurement means the server (or a proxy) closed a kept-alive
connection. The connect is recorded apart (`connect_duration_ns`) and is not inside TTFT or
E2E, which start when the request is sent: a real client that reconnects pays it on top.
"""

from __future__ import annotations

from tokspeed.diagnosis.context import PointData
from tokspeed.diagnosis.schema import Finding
from tokspeed.diagnosis.thresholds import Thresholds


def reconnects(p: PointData, t: Thresholds) -> list[Finding]:
    measured = [r for r in p.measured if r.sent_ns]
    paid = [r.connect_duration_ns for r in measured if r.connect_duration_ns is not None]
    if len(paid) < t.reconnect_min or len(paid) <= t.reconnect_share * len(measured):
        return []
    mean_ms = sum(paid) / len(paid) / 1e6
    return [
        Finding(
            rule="reconnects",
            severity="warning",
            title=f"{len(paid)} of {len(measured)} measured requests opened a new connection "
            f"(mean connect {mean_ms:.2f} ms, not included in TTFT or E2E)",
            evidence={"connects": len(paid), "requests": len(measured), "connect_mean_ms": round(mean_ms, 3),
                      "connect_max_ms": round(max(paid) / 1e6, 3)},
            advice="the server or a proxy closes kept-alive connections (Connection: close, or an idle timeout "
            "shorter than the gaps between requests): raise its keep-alive timeout (e.g. uvicorn's "
            "timeout_keep_alive), or count the connect time, which real clients pay as well",
            benchmark=p.index,
        )
    ]
