"""The samplers of one run: start them, mark each load point's window, summarise, stop.

Three asyncio tasks sample every `interval_s` on absolute deadlines, apart from the request
path: the client (psutil; the task's own wake-up delay is the event-loop lag), the GPUs (NVML
in a thread of its own, as NVML calls block) and the server (an HTTP scrape). Each sample is
appended to telemetry.jsonl and flushed at once. A source that is missing (no pynvml, no
driver, no endpoint) becomes a note; nothing here raises into the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.credentials import redact_url, url_auth_replacing
from tokspeed.backends.http_policy import HttpPolicy
from tokspeed.telemetry import server as srv
from tokspeed.telemetry.client import ClientProbe, client_cpu_seconds
from tokspeed.telemetry.gpu import NvmlGpus, load_nvml, open_nvml
from tokspeed.telemetry.log import TelemetryLog, read_lines
from tokspeed.telemetry.schema import TELEMETRY_FILE, TelemetrySummary
from tokspeed.telemetry.summary import (
    NS,
    Mark,
    Setup,
    Work,
    energy_per_token,
    summarise,
    tokens_per_energy,
    total_energy,
)

LOAD = object()  # TelemetryOptions.nvml default: import pynvml when the run starts
OFF = "off"
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TelemetryOptions:
    """How to sample: every `interval_s`; `server_metrics` a URL, "off", or None for the target's /metrics."""

    interval_s: float = 0.25
    server_metrics: str | None = None
    target: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # the target's (sent only to the same origin)
    policy: HttpPolicy = field(default_factory=HttpPolicy)  # TLS of the target's clients, for /metrics too
    nvml: Any = LOAD  # the pynvml module, a fake with its functions, or None for "not installed"


class Telemetry:
    """Samplers running beside a load, writing telemetry.jsonl in `directory`."""

    def __init__(self, options: TelemetryOptions, directory: Path, epoch_offset_ns: int) -> None:
        self.options = options
        self.path = directory / TELEMETRY_FILE
        self._offset = epoch_offset_ns
        self._log = TelemetryLog(self.path)
        self._notes: list[str] = []
        self._gpus: NvmlGpus | None = None
        self._client: ClientProbe | None = None
        self._endpoint: srv.Endpoint | None = None
        self._http: Any = None  # aiohttp.ClientSession while scraping
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._start: Mark | None = None
        self._energy: list[float | None] = []  # per finished window: energy of all GPUs
        self._tokens = 0

    # lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Open every source that is there, write the `start` line, start sampling."""
        if self._log.error:
            self._notes.append(f"no telemetry file: {self._log.error}")
        self._open_client()
        await self._open_gpus()
        await self._open_server()
        self._start = self.mark()
        self._log.append({"kind": "start", **_mark_fields(self._start), **self._describe()})
        interval = self.options.interval_s
        if self._client is not None:
            self._tasks.append(asyncio.ensure_future(_every(interval, self._sample_client)))
        if self._gpus is not None:
            self._tasks.append(asyncio.ensure_future(_every(interval, self._sample_gpus)))
        if self._endpoint is not None:
            self._tasks.append(asyncio.ensure_future(_every(interval, self._sample_server)))

    async def stop(self) -> TelemetrySummary:
        """Stop sampling, close every source; the summary of the whole run (J/token over the load points)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        end = self.mark()
        self._log.append({"kind": "stop", **_mark_fields(end)})
        begin = self._start or end
        summary = summarise(read_lines(self.path), begin, end, self._setup())
        energy = total_energy(self._energy)  # the load points' windows, not the idle time between them
        summary.energy_j = energy
        summary.energy_per_output_token_j = energy_per_token(self._energy, self._tokens) if self._energy else None
        summary.output_tokens_per_j = tokens_per_energy(energy, self._tokens)
        await self._close()
        return summary

    async def _close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._gpus is not None:
            gpus, self._gpus = self._gpus, None
            try:  # after any read still in the thread; a hung driver must not hang the run's end
                await asyncio.wait_for(self._in_thread(gpus.close), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:  # the process ends soon after; the driver cleans up then
                pass
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._log.close()

    # windows ----------------------------------------------------------------------------
    def now_ns(self) -> int:
        return perf_counter_ns() + self._offset

    def mark(self) -> Mark:
        """A snapshot now: the client's CPU time (workers included) and each GPU's energy counter."""
        energy = self._gpus.energy_mj() if self._gpus is not None else {}
        return Mark(t_ns=self.now_ns(), cpu_s=client_cpu_seconds(), energy_mj=energy, offset=self._log.position())

    def window(self, event: str, benchmark: int) -> Mark:
        """Mark a load point's measured window opening ("begin") or closing ("end"), in the file too."""
        m = self.mark()
        self._log.append({"kind": "window", "event": event, "benchmark": benchmark, **_mark_fields(m)})
        return m

    async def scrape_edge(self) -> None:
        """Scrape the server now, at a window's edge (after its begin mark, before its end mark).

        Counter deltas then cover the whole window — every measured request's tokens, drafts and
        cache hits — instead of starting at the first periodic scrape inside it. Nothing without
        an endpoint; a failed scrape is a `server` line with `ok: false`, as ever.
        """
        if self._endpoint is not None and self._http is not None:
            try:
                await self._sample_server(0)
            except Exception:  # noqa: BLE001, S110 - as a periodic sample's: never the run
                pass

    def summarise(self, begin: Mark, end: Mark, work: Work, server: bool = True) -> TelemetrySummary:
        """The summary of one window, read back from telemetry.jsonl; counts toward the run's J/token."""
        summary = summarise(read_lines(self.path, begin.offset), begin, end, self._setup(), work, server)
        if summary.gpus:
            energies = [g.energy_j for g in summary.gpus]
            self._energy.append(None if None in energies else sum(e for e in energies if e is not None))
            self._tokens += work.output_tokens or 0
        return summary

    # sources ----------------------------------------------------------------------------
    def _open_client(self) -> None:
        try:
            self._client = ClientProbe()
        except Exception as exc:  # noqa: BLE001 - psutil missing or unsupported here: CPU time still comes from os.times
            self._notes.append(f"no client CPU/memory sampling: {exc}")

    async def _open_gpus(self) -> None:
        nvml = load_nvml() if self.options.nvml is LOAD else self.options.nvml
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokspeed-nvml")
        gpus, note = await self._in_thread(lambda: open_nvml(nvml))
        self._gpus = gpus
        if note:
            self._notes.append(note)

    async def _open_server(self) -> None:
        url, explicit = self._server_url()
        if url is None:
            return
        self._http = self.options.policy.session()
        headers = self.options.headers if self.options.target and srv.same_origin(url, self.options.target) else {}
        url, headers = url_auth_replacing(url, headers)  # its own user:password@ wins over the target's
        endpoint, note = await srv.probe(self._http, url, headers)
        if endpoint is None:
            await self._http.close()
            self._http = None
            hint = "" if explicit else "; --server-metrics URL names another endpoint"
            self._notes.append(_redacted(note or "", url) + hint)
        self._endpoint = endpoint

    def _server_url(self) -> tuple[str | None, bool]:
        chosen = self.options.server_metrics
        if chosen is not None and chosen.strip().lower() == OFF:
            return None, True
        if chosen:
            return chosen, True
        return srv.default_metrics_url(self.options.target), False

    # samplers ---------------------------------------------------------------------------
    async def _sample_client(self, lag_ns: int) -> None:
        assert self._client is not None
        reading = self._client.read()
        self._log.append({"kind": "client", "t_ns": self.now_ns(), **reading, "loop_lag_ms": lag_ns / 1e6})

    async def _sample_gpus(self, lag_ns: int) -> None:
        gpus = self._gpus
        if gpus is None:
            return
        readings = await self._in_thread(gpus.read)
        t = self.now_ns()
        for reading in readings:
            self._log.append({"kind": "gpu", "t_ns": t, **reading})

    async def _sample_server(self, lag_ns: int) -> None:
        assert self._endpoint is not None and self._http is not None
        fields = await srv.scrape(self._http, self._endpoint)
        self._log.append({"kind": "server", "t_ns": self.now_ns(), **fields})

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # description ------------------------------------------------------------------------
    def _setup(self) -> Setup:
        notes = [*self._notes, *(self._gpus.notes if self._gpus is not None else ())]
        if self._log.error and self._log.error not in " ".join(self._notes):
            notes.append(f"telemetry file incomplete: {self._log.error}")
        endpoint = self._endpoint
        return Setup(
            interval_s=self.options.interval_s,
            gpus=list(self._gpus.infos) if self._gpus is not None else [],
            server_url=redact_url(endpoint.url) if endpoint is not None else None,
            engine=endpoint.engine if endpoint is not None else None,
            cpu_count=self._client.cpu_count if self._client is not None else None,
            notes=notes,
        )

    def _describe(self) -> dict[str, Any]:
        setup = self._setup()
        return {
            "interval_s": setup.interval_s,
            "gpus": [dataclasses.asdict(g) for g in setup.gpus],
            "server": {"url": setup.server_url, "engine": setup.engine.engine} if setup.engine else None,
            "notes": setup.notes,
        }


def _mark_fields(m: Mark) -> dict[str, Any]:
    return {"t_ns": m.t_ns, "cpu_s": m.cpu_s, "energy_mj": {str(k): v for k, v in m.energy_mj.items()}}


def _redacted(note: str, url: str) -> str:
    return note.replace(url, redact_url(url))


async def _every(interval_s: float, take: Callable[[int], Awaitable[None]]) -> None:
    """Call `take(lag_ns)` every interval on absolute deadlines; lag_ns = how late the timer woke us.

    A call that overruns skips the deadlines it missed rather than firing them in a burst.
    """
    step = max(1, int(interval_s * NS))
    due = perf_counter_ns() + step
    while True:
        now = perf_counter_ns()
        if now < due:
            await asyncio.sleep((due - now) / NS)
        lag = perf_counter_ns() - due
        try:
            await take(max(0, lag))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001, S110 - a sampler bug must not end sampling, let alone the run
            pass
        due += step
        after = perf_counter_ns()
        if due <= after:
            due += ((after - due) // step + 1) * step
