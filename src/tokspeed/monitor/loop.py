"""The monitor: probes, rolling window, alerts, exporter, webhook and files, until a duration or a signal.

Every `interval_s` the window is read, GPU telemetry sampled (when NVML has a
GPU), the alert rules evaluated, the exporter's state replaced and one status
line written to the log. With `server_metrics` the server's own /metrics is
scraped at each tick too (server_source.py) and its figures join the exported
ones and the alert values; with a probe rate of 0 nothing is probed at all
(passive monitoring) and target_up follows the scrapes. Alert events go to the
log, to `alerts.jsonl` and, in order, to the webhook (a queue drained by one
task; delivery failures are logged and counted). Memory stays flat: records are folded into the bounded
window and written out, never kept.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.credentials import redact_url
from tokspeed.monitor.alerts import AlertEvent, AlertTracker
from tokspeed.monitor.exporter import ExportState, make_registry, serve_exporter
from tokspeed.monitor.files import CappedJsonl
from tokspeed.monitor.probe import Prober, ProbeSettings
from tokspeed.monitor.rules import AlertRule
from tokspeed.monitor.server_source import ServerSource
from tokspeed.monitor.server_window import ServerFigures, ServerWindow
from tokspeed.monitor.webhook import WebhookSender
from tokspeed.monitor.window import RollingWindow, WindowFigures
from tokspeed.records import RequestRecord, Status

WEBHOOK_QUEUE = 1000  # events waiting for delivery; more are dropped (and counted as failures)


@dataclass(frozen=True)
class MonitorSettings:
    probe: ProbeSettings
    rules: list[AlertRule]
    interval_s: float = 15.0
    window_s: float = 300.0
    webhook_url: str | None = None
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int | None = 9464  # None: no exporter
    out_dir: Path | None = None
    max_file_bytes: int = 100 * 2**20
    duration_s: float | None = None
    gpu: bool = True
    quiet: bool = False
    server_metrics: str | None = None  # "auto" (the target's /metrics) or a URL; None: no scraping


@dataclass
class MonitorSummary:
    ok: int = 0
    errors: int = 0
    skipped: int = 0
    fired: int = 0
    resolved: int = 0
    firing_at_end: list[str] = field(default_factory=list)
    webhook_failures: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    server_scrapes: int | None = None  # None: the server's metrics were not scraped
    server_scrape_failures: int = 0
    probing: bool = True

    def lines(self) -> list[str]:
        probes = (
            f"{self.ok} probes completed, {self.errors} failed"
            + (f", {self.skipped} skipped (too many in flight)" if self.skipped else "")
            if self.probing else "no probes (passive)"
        )
        out = [
            f"monitored {self.elapsed_s:.0f} s: {probes}",
            f"alerts: {self.fired} fired, {self.resolved} resolved"
            + (f"; still firing: {', '.join(self.firing_at_end)}" if self.firing_at_end else ""),
        ]
        if self.webhook_failures:
            out.append(f"webhook: {self.webhook_failures} deliveries failed")
        if self.server_scrapes is not None:
            out.append(f"server metrics: {self.server_scrapes} scrapes, {self.server_scrape_failures} failed")
        return out


class Monitor:
    """One monitoring session. `log` receives every human-readable line (the CLI prints them to stderr)."""

    def __init__(self, settings: MonitorSettings, log: Callable[[str], None], nvml: Any | None = None) -> None:
        self.s = settings
        self._log = log
        self._nvml = nvml
        self.target = redact_url(settings.probe.target)
        self.summary = MonitorSummary()
        self.state = ExportState(target=self.target)
        self.tracker = AlertTracker(settings.rules)
        self.epoch_offset_ns = time.time_ns() - perf_counter_ns()
        self.window = RollingWindow(settings.window_s, settings.interval_s, started_s=time.monotonic())
        self.exporter_port: int | None = None
        self._requests: CappedJsonl | None = None
        self._alerts_file: CappedJsonl | None = None
        self._queue: asyncio.Queue[AlertEvent] | None = None
        self._sender: WebhookSender | None = None
        self._gpus: Any = None
        self._stop = asyncio.Event()
        self.server = self._server_source()
        self._short: set[str] = set()  # alerts waiting for enough samples (logged once)

    def _server_source(self) -> ServerSource | None:
        from tokspeed.telemetry.server import default_metrics_url, same_origin

        spec = self.s.server_metrics
        if spec is None:
            return None
        url = default_metrics_url(self.s.probe.target) if spec == "auto" else spec
        if url is None:
            self._log(f"server metrics off: no /metrics URL for {self.target}")
            return None
        key = self.s.probe.api_key
        headers = {"Authorization": f"Bearer {key}"} if key and same_origin(url, self.s.probe.target) else {}
        window = ServerWindow(self.s.window_s, self.s.interval_s)
        return ServerSource(url, spec == "auto", headers, window, self._log, self.s.probe.policy)

    @property
    def passive(self) -> bool:
        """No probes: only the server's own metrics are watched."""
        return self.s.probe.rate <= 0

    def stop(self, interrupted: bool = False) -> None:
        self.summary.interrupted = self.summary.interrupted or interrupted
        self._stop.set()

    # lifecycle -------------------------------------------------------------------------
    async def run(self, on_ready: Callable[[Monitor], None] | None = None) -> MonitorSummary:
        started = time.monotonic()
        runner = None
        tasks: list[asyncio.Task[Any]] = []
        unhook = self._hook_signals()
        try:
            self._open_files()
            self._open_gpus()
            if self.s.prometheus_port is not None:
                runner, self.exporter_port = await serve_exporter(
                    make_registry(lambda: self.state), self.s.prometheus_host, self.s.prometheus_port
                )
            self.state.alerts = [(r.alert_name, "inactive", None) for r in self.s.rules]
            self._warn_unreachable()
            if on_ready is not None:
                on_ready(self)
            prober = None if self.passive else Prober(self.s.probe, self._on_record, self._log)
            if prober is not None:
                tasks.append(asyncio.create_task(prober.run()))
            self.summary.probing = prober is not None
            if self.server is not None:
                await self.server.poll()  # the base of the first interval's deltas
            self._check_something_to_watch()
            if self.s.webhook_url:
                self._queue = asyncio.Queue(WEBHOOK_QUEUE)
                self._sender = WebhookSender(self.s.webhook_url, self.target, self._log)
                tasks.append(asyncio.create_task(self._deliver()))
            await self._evaluate_until_stopped(started)
            self.summary.skipped = prober.skipped if prober is not None else 0
        finally:
            await self._shutdown(tasks, runner)
            unhook()
        self.summary.elapsed_s = time.monotonic() - started
        self.summary.firing_at_end = [r.alert_name for r in self.tracker.firing()]
        self.summary.webhook_failures = self.state.webhook_failures
        return self.summary

    def _check_something_to_watch(self) -> None:
        """Passive (no probes) with no usable server metrics leaves nothing to monitor: a usage error."""
        if self.passive and (self.server is None or self.server.disabled):
            from tokspeed.errors import ConfigError

            raise ConfigError(
                f"--probe-rate 0 but {self.target} has no server metrics tokspeed can read",
                hint="give --server-metrics URL of its Prometheus endpoint, or probe it (--probe-rate above 0)",
            )

    async def _evaluate_until_stopped(self, started: float) -> None:
        deadline = None if self.s.duration_s is None else started + self.s.duration_s
        next_at = started + self.s.interval_s
        while True:
            wait = next_at - time.monotonic()
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=max(wait, 0.0))
                return
            except asyncio.TimeoutError:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                return
            await self.evaluate()
            next_at += self.s.interval_s
            if next_at < time.monotonic():  # fell behind (suspended laptop, ...): do not catch up in a burst
                next_at = time.monotonic() + self.s.interval_s

    async def _shutdown(self, tasks: list[asyncio.Task[Any]], runner: Any) -> None:
        if self._queue is not None:  # give events already queued a moment to go out
            try:
                await asyncio.wait_for(self._queue.join(), timeout=5.0)
            except asyncio.TimeoutError:
                pass
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._sender is not None:
            await self._sender.close()
        if runner is not None:
            await runner.cleanup()
        if self.server is not None:
            self.summary.server_scrapes = self.server.scrapes
            self.summary.server_scrape_failures = self.server.failures
            await self.server.close()
        for f in (self._requests, self._alerts_file):
            if f is not None:
                f.close()
        if self._gpus is not None:
            self._gpus.close()

    def _hook_signals(self) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        hooked = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop, True)
            except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
                continue
            hooked.append(sig)

        def unhook() -> None:
            for sig in hooked:
                loop.remove_signal_handler(sig)

        return unhook

    def _open_files(self) -> None:
        if self.s.out_dir is None:
            return
        self._requests = CappedJsonl(self.s.out_dir / "requests.jsonl", self.s.max_file_bytes)
        self._alerts_file = CappedJsonl(self.s.out_dir / "alerts.jsonl", self.s.max_file_bytes)

    def _open_gpus(self) -> None:
        if not self.s.gpu:
            return
        from tokspeed.telemetry.gpu import load_nvml, open_nvml

        self._gpus, why = open_nvml(self._nvml if self._nvml is not None else load_nvml())
        if why:
            self._log(f"{why}; GPU figures left out")

    # data in -------------------------------------------------------------------------------
    def _on_record(self, record: RequestRecord) -> None:
        if record.status is Status.INCOMPLETE:
            return
        now_mono = time.monotonic()
        self.window.add(record, now_mono)
        st = self.state
        if record.ok:
            st.ok_total += 1
            self.summary.ok += 1
        else:
            st.error_total += 1
            self.summary.errors += 1
            kind = record.error_kind.value if record.error_kind is not None else "other"
            st.errors_by_kind[kind] = st.errors_by_kind.get(kind, 0) + 1
        st.up = record.ok
        st.last_probe_s = time.time()
        if self._requests is not None:
            self._requests.write(record.to_json_dict(self.epoch_offset_ns))

    # evaluation ------------------------------------------------------------------------------
    async def evaluate(self) -> list[AlertEvent]:
        """One tick: read the window and GPUs, evaluate the alerts, publish, report."""
        figures = self.window.figures(time.monotonic())
        values = figures.values()
        if self._gpus is not None:
            readings = await asyncio.to_thread(self._gpus.read)
            self.state.gpus = readings
            utils = [r["utilization_pct"] for r in readings if r.get("utilization_pct") is not None]
            values["gpu_utilization_pct"] = sum(utils) / len(utils) if utils else None
        counts = figures.counts()
        server = await self._scrape_server()
        if server is not None:
            values.update(server.values())
            counts.update({f"server_{role}": int(n or 0) for role, n in server.observations.items()})
        events = self.tracker.evaluate(values, time.time(), counts)
        self._say_short()
        self.state.figures = figures
        self.state.alerts = [(r.alert_name, self.tracker.state(r).value, self.tracker.value(r)) for r in self.s.rules]
        if not self.s.quiet:
            self._log(status_line(figures, server, probes=not self.passive))
        for event in events:
            self._announce(event)
        return events

    def _say_short(self) -> None:
        """Log once when a percentile alert starts or stops waiting for enough samples to be read."""
        for rule in self.s.rules:
            short = self.tracker.short(rule)
            was = rule.alert_name in self._short
            if short is not None and not was:
                self._short.add(rule.alert_name)
                self._log(f"alert {rule.alert_name} cannot fire yet: {short[0]} of the {short[1]} samples its "
                          f"{rule.stat} needs in the window (one outlier would decide it)")
            elif short is None and was:
                self._short.discard(rule.alert_name)
                self._log(f"alert {rule.alert_name} has its {rule.min_samples} samples: it is evaluated")

    def _warn_unreachable(self) -> None:
        """At start: percentile alerts on per-probe metrics that the probe rate and window can never feed."""
        if self.passive:
            return
        per_window = self.s.probe.rate * self.s.window_s
        for rule in self.s.rules:
            if rule.metric in ("ttft", "tpot", "e2e", "decode") and rule.min_samples > per_window:
                self._log(f"alert {rule.alert_name} needs {rule.min_samples} probes in the window for its "
                          f"{rule.stat}, but {self.s.probe.rate:g} probes/s over {self.s.window_s:g} s give about "
                          f"{per_window:.0f}: it cannot fire — widen --window or raise --probe-rate")

    async def _scrape_server(self) -> ServerFigures | None:
        """Scrape the server's /metrics (when configured) and publish its window; passive: it decides target_up."""
        if self.server is None or self.server.disabled:
            return None
        await self.server.poll()
        figures = self.server.figures()
        st = self.state
        st.server, st.server_scrapes_ok, st.server_scrapes_failed = figures, self.server.scrapes, self.server.failures
        if self.passive:
            st.up = figures.up
        return figures

    def _announce(self, event: AlertEvent) -> None:
        value = "no data" if event.value is None else f"{event.value:g}"
        self._log(f"ALERT {event.status.upper()} {event.rule.alert_name}: {event.rule} (value {value})")
        if event.status == "firing":
            self.summary.fired += 1
        else:
            self.summary.resolved += 1
        if self._alerts_file is not None:
            self._alerts_file.write(event.to_json_dict(self.target))
        if self._queue is not None:
            try:
                self._queue.put_nowait(event)
            except asyncio.QueueFull:
                self.state.webhook_failures += 1
                self._log(f"webhook queue full: {event.rule.alert_name} {event.status} dropped")

    async def _deliver(self) -> None:
        assert self._queue is not None and self._sender is not None
        while True:
            event = await self._queue.get()
            try:
                await self._sender.send(event)
                self.state.webhook_failures = self._sender.failures
            finally:
                self._queue.task_done()


def status_line(f: WindowFigures, server: ServerFigures | None = None, probes: bool = True) -> str:
    """One line of the window's figures for the log (probes, then the server's own when scraped)."""
    parts = [_probe_status(f)] if probes else []
    if server is not None:
        parts.append(server_status(server))
    return " || ".join(parts) or "no data"


def server_status(f: ServerFigures) -> str:
    """The server-side part of the status line."""
    if not f.up:
        return "server: down"

    def ms(metric: str, stat: str) -> str:
        v = f.quantiles.get(metric, {}).get(stat)
        return "-" if v is None else f"~{v * 1000:.1f}"  # ~: interpolated within the server's histogram buckets

    def mean(metric: str) -> str:
        v = f.means.get(metric)
        return "-" if v is None else f"{v * 1000:.1f}"  # exact: Δsum / Δcount

    def num(v: float | None, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    return (
        f"server {f.span_s:.0f}s: {num(f.requests_per_s, '.2f')} req/s {num(f.generation_tokens_per_s)} tok/s | "
        f"ttft mean {mean('ttft')} p50 {ms('ttft', 'p50')} p99 {ms('ttft', 'p99')} ms | "
        f"itl mean {mean('itl')} p50 {ms('itl', 'p50')} ms | e2e mean {mean('e2e')} p99 {ms('e2e', 'p99')} ms "
        f"(~ bucket-interpolated) | running {num(f.running, 'g')} waiting {num(f.waiting, 'g')} "
        f"kv {num(f.kv_cache_usage_pct)}%"
    )


def _probe_status(f: WindowFigures) -> str:

    def ms(metric: str, stat: str) -> str:
        v = getattr(f.dists[metric], stat)
        return "-" if v is None else f"{v:.1f}"

    err = "-" if f.error_rate is None else f"{f.error_rate:.3f}"
    return (
        f"window {f.span_s:.0f}s: {f.completed} ok {f.errored} err (error_rate {err}) | "
        f"ttft p50 {ms('ttft', 'p50')} p99 {ms('ttft', 'p99')} ms | itl p50 {ms('itl', 'p50')} ms | "
        f"e2e p99 {ms('e2e', 'p99')} ms"
    )
