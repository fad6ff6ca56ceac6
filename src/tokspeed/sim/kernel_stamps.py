"""Stamp each request's arrival with the kernel's receive time, not with when the event loop read it.

`sim/arrival.py` stamps a request when its connection's `data_received` runs. Under load that is
late: while the simulator's loop writes a burst of chunks (64 streams whose tokens fall due
together), a request that reached the socket waits for the burst to end before the loop reads
it, and the log's TTFT, which starts at that stamp, is short by the wait (about a millisecond at 64
streams on two cores, measured with `bench/client.py`). So `tokspeed sim --kernel-stamps` serves
its connections with `backends.kernel_stamps.StampedTransport` (reads with `recvmsg()` and the
kernel's stamp): this module is its listening socket and aiohttp site. TCP's stamp is the last
packet's that the read consumed: for a request that fits one packet (anything up to the loopback
MTU, 64 KiB) that is its arrival.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import cast

from aiohttp import web

from tokspeed.backends.kernel_stamps import StampedProtocol, StampedTransport

ACCEPT_RETRY_S = 1.0  # asyncio's pause after accept() fails for want of file descriptors


class _Listener:
    """The listening socket: accepts whenever it is readable, one StampedTransport per connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol_factory: Callable[[], StampedProtocol]) -> None:
        self._loop, self._factory = loop, protocol_factory
        self.sockets = [sock]
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        sock = self.sockets[0]
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors: as asyncio does, stop accepting for a second
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            try:
                StampedTransport(self._loop, conn, self._factory())
            except OSError:  # the peer is already gone (getpeername, setsockopt)
                conn.close()

    def _resume(self) -> None:
        sock = self.sockets[0]
        if sock.fileno() >= 0:
            self._loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        sock = self.sockets[0]
        if sock.fileno() >= 0:
            self._loop.remove_reader(sock.fileno())
            sock.close()


class KernelStampSite(web.BaseSite):
    """An aiohttp site on host:port whose connections are `StampedTransport`s."""

    __slots__ = ("_host", "_port", "_reuse_port")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, backlog: int, reuse_port: bool) -> None:
        super().__init__(runner, backlog=backlog)
        self._host, self._port, self._reuse_port = host, port, reuse_port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None, "runner.setup() first"
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.create_server((self._host, self._port), family=family, backlog=self._backlog,
                                    reuse_port=self._reuse_port)
        # use_arrival_stamps made `server` a StampingServer: its connections take stamped reads
        connections = cast(Callable[[], StampedProtocol], server)
        self._server = _Listener(asyncio.get_running_loop(), sock, connections)  # type: ignore[assignment]
