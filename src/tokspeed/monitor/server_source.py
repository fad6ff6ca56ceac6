"""Passive monitoring: scrape the serving engine's own Prometheus /metrics once per interval.

`--server-metrics auto` uses the target's root + /metrics (telemetry.server.default_metrics_url);
a URL is used as given. The endpoint is recognised (engine by metric prefix, telemetry.engines)
at the first scrape that answers; until then, and whenever a scrape fails, the server is down
(`up` False) and the monitor keeps going. With `auto`, an endpoint that answers but serves no
metric tokspeed knows switches scraping off (logged once); an explicit URL keeps being tried.
The target's API key goes along only to the target's own origin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tokspeed.backends.http_policy import HttpPolicy
from tokspeed.monitor.server_window import (
    ServerFigures,
    ServerNames,
    ServerWindow,
    parse_snapshot,
)


class ServerSource:
    """Scrapes one endpoint; `poll()` once per interval, `figures()` to read the window."""

    def __init__(self, url: str, auto: bool, headers: dict[str, str], window: ServerWindow,
                 log: Callable[[str], None], policy: HttpPolicy | None = None) -> None:
        self.url = url
        self._policy = policy or HttpPolicy()  # the probes' TLS (redirects are not followed: srv.fetch)
        self.auto = auto
        self._headers = headers
        self.window = window
        self._log = log
        self._names: ServerNames | None = None
        self._session: Any = None
        self._last_error: str | None = None
        self.scrapes = 0
        self.failures = 0
        self.disabled = False

    @property
    def engine(self) -> str | None:
        return self._names.engine.engine if self._names is not None else None

    async def poll(self) -> None:
        """One scrape: fold it into the window, or count the failure (never raises for the server's faults)."""
        if self.disabled:
            return
        import aiohttp

        from tokspeed.telemetry import server as srv

        if self._session is None:
            self._session = self._policy.session()
        try:
            text = await srv.fetch(self._session, self.url, self._headers)
            names = self._names or self._recognise(text)
            if names is None:
                return
            snap = await asyncio.to_thread(parse_snapshot, text, names, time.monotonic(), time.time())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, UnicodeError) as exc:
            if self.auto and self._names is None and str(exc).startswith("HTTP 4"):  # answers, but has no /metrics
                self.disabled = True
                self._log(f"server metrics off: {self.url} answered {exc}")
                return
            self._failed(srv.why(exc))
            return
        self.scrapes += 1
        if self._last_error is not None or self.scrapes == 1:
            self._log(f"server metrics: scraping {self.url} ({names.engine.engine})")
        self._last_error = None
        delta = self.window.observe(snap)
        if delta is not None and delta.reset:
            self._log("server metrics: counters went down (server restarted); counting from the restart")

    def _recognise(self, text: str) -> ServerNames | None:
        from tokspeed.telemetry.engines import KNOWN_ENGINES, detect_engine
        from tokspeed.telemetry.server import sample_values

        try:
            found = list(sample_values(text).keys())
        except ValueError:  # not Prometheus text at all
            found = []
        engine = detect_engine(found) if found else None
        if engine is None:
            why = f"{self.url} serves no metric tokspeed knows ({KNOWN_ENGINES})"
            if self.auto:
                self.disabled = True
                self._log(f"server metrics off: {why}")
                return None
            raise ValueError(why)
        self._names = ServerNames.of(engine)
        return self._names

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.window.failed()
        if why != self._last_error:
            self._log(f"server metrics: {self.url} not answering ({why}); retrying every interval")
        self._last_error = why

    def figures(self) -> ServerFigures:
        return self.window.figures(time.monotonic())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
