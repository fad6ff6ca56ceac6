"""`tokspeed sim --profile-endpoints`: vLLM's POST /start_profile and /stop_profile, logged, profiling nothing.

Each call answers 200 with a line of text (as SGLang does; vLLM answers an empty body) and
appends a line to the log (`api` "start_profile" or "stop_profile", `received_ns` when it
arrived, `end_ns` when it was answered), so a test can check when a client called them against
the requests around. A stop with no profile running answers 400, as a server would refuse it.
Without the flag the routes do not exist: POST answers 404, as vLLM started without a profiler.
"""

from __future__ import annotations

from time import perf_counter_ns

from aiohttp import web

from tokspeed.sim.arrival import arrival_of
from tokspeed.sim.log import LogEntry, SimStatus
from tokspeed.sim.service import SimService


class SimProfiler:
    """Whether a profile is running, and the log lines of the calls."""

    def __init__(self, service: SimService) -> None:
        self._service = service
        self._running = False
        self._calls = 0

    async def start(self, request: web.Request) -> web.Response:
        return self._answer(request, "start_profile", ok=not self._running, running=True,
                            text="Start profiling. (tokspeed sim profiles nothing: no trace is written)")

    async def stop(self, request: web.Request) -> web.Response:
        return self._answer(request, "stop_profile", ok=self._running, running=False, text="Stop profiling.")

    def _answer(self, request: web.Request, api: str, ok: bool, running: bool, text: str) -> web.Response:
        self._calls += 1
        entry = LogEntry(id=f"{api}-{self._calls}", api=api, epoch_offset_ns=self._service.epoch_offset_ns,
                         received_ns=arrival_of(request))
        if ok:
            self._running = running
        else:
            entry.status, entry.http_status = SimStatus.REJECTED, 400
            entry.error = text = "a profile is already running" if running else "no profile is running"
        entry.end_ns = perf_counter_ns()
        self._service.write_log(entry)
        return web.Response(status=entry.http_status, text=text)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/start_profile", self.start), web.post("/stop_profile", self.stop)]
