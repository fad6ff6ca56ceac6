"""Stamp when a request's first bytes reached the simulator, before any of its own queueing.

aiohttp runs request handlers one after another; when many requests land at
once, a handler can start milliseconds after its bytes arrived. That wait is
the server's latency, so the simulator's log must count it: the connection's
`data_received` stamps the arrival, and the handler takes the stamp.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

# a typed key where aiohttp has them (3.12+; a plain string draws NotAppKeyWarning there)
ARRIVAL_KEY: Any = web.RequestKey("tokspeed_arrival_ns", int) if hasattr(web, "RequestKey") else "tokspeed_arrival_ns"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StampingRequestHandler(RequestHandler):
    """A connection that remembers when the first bytes of its next request arrived."""

    arrival_ns: int | None = None

    def data_received(self, data: bytes) -> None:
        if self.arrival_ns is None:
            self.arrival_ns = perf_counter_ns()
        super().data_received(data)

    def stamped_data_received(self, data: bytes, stamp_ns: int | None) -> None:
        """A read with the kernel's receive stamp (`tokspeed sim --kernel-stamps`): the arrival, when it starts a request."""
        if self.arrival_ns is None and stamp_ns is not None:
            self.arrival_ns = stamp_ns
        self.data_received(data)


class StampingServer(Server):
    def __call__(self) -> RequestHandler:
        return StampingRequestHandler(self, loop=self._loop, **self._kwargs)


def use_arrival_stamps(runner: web.AppRunner) -> None:
    """Make `runner`'s connections stamp arrivals (call after `runner.setup()`)."""
    server = runner.server
    assert server is not None, "call after runner.setup()"
    server.__class__ = StampingServer  # same state, one method changed


@web.middleware
async def arrival_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Move the connection's stamp onto the request; clear stamps left by its body afterwards."""
    protocol = request.protocol
    stamp = getattr(protocol, "arrival_ns", None)
    request[ARRIVAL_KEY] = perf_counter_ns() if stamp is None else int(stamp)
    try:
        return await handler(request)
    finally:
        if isinstance(protocol, StampingRequestHandler):
            protocol.arrival_ns = None


def arrival_of(request: web.Request) -> int:
    """When the request's first bytes arrived (now, when no stamp was taken)."""
    stamp = request.get(ARRIVAL_KEY)
    return perf_counter_ns() if stamp is None else int(stamp)
