"""The Prometheus exporter: a collector on its own registry, served over HTTP by aiohttp.

`MonitorCollector` turns the monitor's latest `ExportState` into metric
families at scrape time (no prometheus_client global state: the registry is
the collector's own). `serve_exporter` serves `/metrics` (text format 0.0.4)
on the monitor's event loop and returns the runner and the bound port.
Names are in `tokspeed.monitor.names`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tokspeed.monitor import names
from tokspeed.monitor.server_window import ServerFigures
from tokspeed.monitor.window import WindowFigures


@dataclass
class ExportState:
    """What the exporter shows: the latest figures, lifetime counters, alert states, GPU readings."""

    target: str
    figures: WindowFigures | None = None
    ok_total: int = 0
    error_total: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    up: bool = False
    last_probe_s: float | None = None
    alerts: list[tuple[str, str, float | None]] = field(default_factory=list)  # (alert, state, value)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    webhook_failures: int = 0
    server: ServerFigures | None = None  # with --server-metrics: the server-side window (None: not scraped)
    server_scrapes_ok: int = 0
    server_scrapes_failed: int = 0


class MonitorCollector:
    """A prometheus_client custom collector over `state()`."""

    def __init__(self, state: Callable[[], ExportState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self._state()
        t = s.target
        yield from _latency(s, GaugeMetricFamily)
        for key, name in names.RUN_LEVEL.items():
            g = GaugeMetricFamily(name, f"{key} over the rolling window", labels=["target"])
            g.add_metric([t], _num(getattr(s.figures, key) if s.figures else None))
            yield g
        g = GaugeMetricFamily(names.WINDOW_REQUESTS, "Probes that ended inside the rolling window", labels=["target"])
        g.add_metric([t], float(s.figures.completed + s.figures.errored) if s.figures else 0.0)
        yield g
        c = CounterMetricFamily(names.REQUESTS_TOTAL, "Probe requests ended, by outcome", labels=["target", "outcome"])
        c.add_metric([t, "ok"], float(s.ok_total))
        c.add_metric([t, "error"], float(s.error_total))
        yield c
        c = CounterMetricFamily(names.ERRORS_TOTAL, "Failed probe requests, by error kind", labels=["target", "kind"])
        for kind, n in sorted(s.errors_by_kind.items()):
            c.add_metric([t, kind], float(n))
        yield c
        g = GaugeMetricFamily(names.UP, "1 when the last probe completed, else 0", labels=["target"])
        g.add_metric([t], 1.0 if s.up else 0.0)
        yield g
        g = GaugeMetricFamily(names.LAST_PROBE, "Unix time the last probe ended", labels=["target"])
        g.add_metric([t], _num(s.last_probe_s))
        yield g
        yield from _alerts(s, GaugeMetricFamily)
        yield from _gpus(s, GaugeMetricFamily)
        c = CounterMetricFamily(names.WEBHOOK_FAILURES, "Alert webhook deliveries that failed", labels=["target"])
        c.add_metric([t], float(s.webhook_failures))
        yield c
        if s.server is not None:
            yield from _server(s, s.server, GaugeMetricFamily, CounterMetricFamily)


def _latency(s: ExportState, gauge: Any) -> Iterator[Any]:
    for metric, (family, scale, help_text) in names.LATENCY.items():
        dist = s.figures.dists.get(metric) if s.figures else None
        count = dist.count if dist is not None else 0
        mean = dist.mean if dist is not None else None
        yield _summary(family, help_text, s.target,
                       [(q, _num(getattr(dist, stat) if dist else None, scale)) for stat, q in names.QUANTILE_OF_STAT.items()],
                       count, 0.0 if mean is None else mean * scale * count)
        m = gauge(names.mean_name(metric), f"Mean of {metric} over the rolling window", labels=["target"])
        m.add_metric([s.target], _num(mean, scale))
        yield m


def _summary(family: str, help_text: str, target: str, quantiles: list[tuple[str, float]], count: float,
             total: float) -> Any:
    """A summary family: the window's quantiles, `_count` and `_sum` (Prometheus allows the `quantile` label
    on summaries only; on gauges `promtool check metrics` rejects it)."""
    from prometheus_client.core import Metric

    m = Metric(family, help_text, "summary")
    for q, value in quantiles:
        m.add_sample(family, {"target": target, "quantile": q}, value)
    m.add_sample(family + "_sum", {"target": target}, float(total))
    m.add_sample(family + "_count", {"target": target}, float(count))
    return m


def _alerts(s: ExportState, gauge: Any) -> Iterator[Any]:
    firing = gauge(names.ALERT_FIRING, "1 while the alert fires", labels=["alert", "target"])
    pending = gauge(names.ALERT_PENDING, "1 while the alert's condition holds but its 'for' has not passed",
                    labels=["alert", "target"])
    value = gauge(names.ALERT_VALUE, "The value the alert read at its last evaluation", labels=["alert", "target"])
    for alert, state, observed in s.alerts:
        firing.add_metric([alert, s.target], 1.0 if state == "firing" else 0.0)
        pending.add_metric([alert, s.target], 1.0 if state == "pending" else 0.0)
        value.add_metric([alert, s.target], _num(observed))
    yield from (firing, pending, value)


def _gpus(s: ExportState, gauge: Any) -> Iterator[Any]:
    util = gauge(names.GPU_UTIL, "GPU utilisation (NVML), percent", labels=["gpu", "target"])
    mem = gauge(names.GPU_MEMORY, "GPU memory used (NVML), bytes", labels=["gpu", "target"])
    for reading in s.gpus:
        gpu = str(reading.get("gpu"))
        util.add_metric([gpu, s.target], _num(reading.get("utilization_pct")))
        used = reading.get("memory_used_mib")
        mem.add_metric([gpu, s.target], _num(used, 2**20))
    yield from (util, mem)


def _server(s: ExportState, f: ServerFigures, gauge: Any, counter: Any) -> Iterator[Any]:
    """The server-side families (--server-metrics): quantiles from its histograms, rates, gauges."""
    t = s.target
    for metric, (family, help_text) in names.SERVER_LATENCY.items():
        count = f.observations.get(metric) or 0
        mean = f.means.get(metric)
        yield _summary(family, help_text + "; quantiles interpolated within its buckets, _sum/_count exact", t,
                       [(q, _num(f.quantiles.get(metric, {}).get(stat))) for stat, q in names.SERVER_QUANTILE_OF_STAT.items()],
                       count, 0.0 if mean is None else mean * count)
        m = gauge(names.server_mean_name(metric), f"Server-side mean {metric} over the rolling window (Δsum/Δcount)",
                  labels=["target"])
        m.add_metric([t], _num(f.means.get(metric)))
        yield m
    values = f.values()
    for key, name in names.SERVER_SCALARS.items():
        g = gauge(name, f"{key} from the server's own /metrics", labels=["target"])
        g.add_metric([t], _num(values[key]))
        yield g
    g = gauge(names.SERVER_WINDOW_REQUESTS, "Requests the server finished inside the rolling window", labels=["target"])
    g.add_metric([t], _num(f.requests))
    yield g
    g = gauge(names.SERVER_WINDOW_SECONDS, "Time the server-side window covers, ending at the last good scrape",
              labels=["target"])
    g.add_metric([t], f.span_s)
    yield g
    g = gauge(names.SERVER_LAST_SCRAPE, "Unix time of the last good scrape of the server's /metrics", labels=["target"])
    g.add_metric([t], _num(f.last_scrape_unix_s))
    yield g
    c = counter(names.SERVER_SCRAPES_TOTAL, "Scrapes of the server's /metrics, by outcome", labels=["target", "outcome"])
    c.add_metric([t, "ok"], float(s.server_scrapes_ok))
    c.add_metric([t, "error"], float(s.server_scrapes_failed))
    yield c
    c = counter(names.SERVER_RESETS_TOTAL, "Server restarts seen (its counters went down)", labels=["target"])
    c.add_metric([t], float(f.resets))
    yield c


def _num(value: float | None, scale: float = 1.0) -> float:
    """NaN for a missing value (Prometheus' "no data" within a present series)."""
    return math.nan if value is None else float(value) * scale


def make_registry(state: Callable[[], ExportState]) -> Any:
    """A fresh CollectorRegistry holding only the monitor's collector."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(state))  # type: ignore[arg-type]
    return registry


def render(registry: Any) -> bytes:
    from prometheus_client import generate_latest

    return bytes(generate_latest(registry))


async def serve_exporter(registry: Any, host: str, port: int) -> tuple[Any, int]:
    """Serve `/metrics` of `registry` on host:port (0 picks a free port); (AppRunner, bound port)."""
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics), web.get("/", metrics)])
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return runner, bound
