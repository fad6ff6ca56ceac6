"""`--profile`: the server's own profiler around each load point's measured window.

Order of events, per load point: `check` before anything is sent (an OPTIONS probe: a server
without `/start_profile` is refused with one line, exit 2, before the warm-up); `start` just
before the measured window opens — after the warm-up, or when a warm-up held at the load
(`--warmup 10s`) ends; `stop` right after the last measured request ended, also when the point is
stopped by Ctrl-C or fails, so a server is never left profiling. What happened goes to
`benchmarks[].server_profile` (telemetry.schema.ServerProfile). A start the server refuses as
absent (404/405) ends the run as a usage error too; any other failure (a timeout, a 500) is
recorded there and in the run's warnings, and the measurement goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tokspeed.backends.credentials import redact_url, url_auth_replacing
from tokspeed.errors import ConfigError
from tokspeed.telemetry import profiler as http
from tokspeed.telemetry.schema import ServerProfile


def no_endpoints(root: str, status: int | None) -> ConfigError:
    return ConfigError(
        f"--profile: the server at {redact_url(root)} has no profiler endpoints (/start_profile answered HTTP {status})",
        hint=http.NO_ENDPOINTS_HINT,
    )


def check_target(target: str | None) -> str:
    """The server root `--profile` calls; a ConfigError for a target that is no HTTP server."""
    if not target or not target.startswith(("http://", "https://")):
        raise ConfigError("--profile calls an HTTP server's /start_profile and /stop_profile: give --target http://HOST:PORT/v1",
                          hint="the embedded model and in-process engines have no profiler endpoints")
    return http.server_root(target)


async def check(target: str | None, headers: dict[str, str]) -> None:
    """Refuse before any load when the server says it has no /start_profile (404); a server that does not answer
    is left to the run, which reports an unreachable target its own way."""
    import aiohttp

    root, headers = url_auth_replacing(check_target(target), headers)
    async with aiohttp.ClientSession() as session:
        status = await http.probe(session, root, headers)
    if status == 404:
        raise no_endpoints(root, status)


def _now() -> str:
    from tokspeed.results import now_iso

    return now_iso()


class ServerProfiler:
    """One load point's profile: `start()`, `start_later(delay)`, `stop()`; `record` is what run.json keeps."""

    def __init__(self, target: str, headers: dict[str, str], redact: Callable[[str], str]) -> None:
        self._root, self._headers = url_auth_replacing(check_target(target), headers)
        self._redact = redact
        self.record = ServerProfile(url=redact_url(self._root))
        self._session: Any = None  # aiohttp.ClientSession while profiling
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._start_dir: str | None = None
        self.notes: list[str] = []

    async def start(self) -> None:
        """POST /start_profile now; a ConfigError when the server has no such endpoint."""
        import aiohttp

        self._session = self._session or aiohttp.ClientSession()
        answer = await http.call(self._session, self._root, "start", self._headers, http.START_TIMEOUT_S)
        self.record.start_http_status = answer.status
        if answer.absent:
            self.record.status, self.record.message = "failed", f"/start_profile: HTTP {answer.status}"
            await self._close()
            raise no_endpoints(self._root, answer.status)
        if not answer.ok:
            self._fail("start", answer)
            await self._close()
            return
        self._started = True
        self.record.started_at = _now()
        self._start_dir = answer.trace_dir
        self.record.message = self._said("start", answer)

    def start_later(self, delay_s: float) -> None:
        """Start once a warm-up held at the load (`delay_s` from now) is over, without holding up the load."""
        async def later() -> None:
            await asyncio.sleep(delay_s)
            await self.start()

        self._task = asyncio.ensure_future(later())

    async def stop(self) -> None:
        """POST /stop_profile if the profiler was started (a start still waiting is cancelled: nothing to stop)."""
        task, self._task = self._task, None
        if task is not None:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            failed = task.exception() if not task.cancelled() else None
            if isinstance(failed, ConfigError):  # the delayed start found no endpoint
                raise failed
        if not self._started:
            await self._close()
            return
        self._started = False
        try:
            answer = await http.call(self._session, self._root, "stop", self._headers, http.STOP_TIMEOUT_S)
            self.record.stop_http_status = answer.status
            if not answer.ok:
                self._fail("stop", answer)
                return
            self.record.stopped_at = _now()
            said = [m for m in (self.record.message, self._said("stop", answer)) if m]
            self.record.message = "; ".join(said) or None
            self.record.trace_dir = self._start_dir or answer.trace_dir or await self._trace_dir()
            self.record.status = "profiled"
        finally:
            await self._close()

    async def _trace_dir(self) -> str | None:
        found = await http.server_info_dir(self._session, self._root, self._headers)
        if found:
            return found
        env = http.trace_dir_from_env()
        if env:
            self.notes.append(f"--profile: the server did not say where its trace went; {env} is this machine's "
                              "VLLM_TORCH_PROFILER_DIR/SGLANG_TORCH_PROFILER_DIR (right if the server runs here, so set)")
        return env

    def _said(self, which: str, answer: http.ProfilerAnswer) -> str | None:
        return f"/{which}_profile: {self._redact(answer.text)}" if answer.text else None

    def _fail(self, which: str, answer: http.ProfilerAnswer) -> None:
        status = f"HTTP {answer.status}" if answer.status is not None else "no answer"
        self.record.status = "failed"
        self.record.message = f"/{which}_profile: {status}" + (f": {self._redact(answer.text)}" if answer.text else "")
        self.notes.append(f"--profile: {self.record.message}; the measurement is unaffected")

    async def _close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

