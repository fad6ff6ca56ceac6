"""Stamp each request's arrival with the kernel's receive time, not with when the event loop read it.

`sim/arrival.py` stamps a request when its connection's `data_received` runs. Under load that is
late: while the simulator's loop writes a burst of chunks (64 streams whose tokens fall due
together), a request that reached the socket waits for the burst to end before the loop reads
it, and the log's TTFT, which starts at that stamp, is short by the wait (about a millisecond at 64
streams on two cores, measured with `bench/client.py`). The kernel stamps every packet when it
reaches the socket (`SO_TIMESTAMPNS`), but asyncio's and uvloop's transports read with `recv()`,
which drops those stamps; only `recvmsg()` returns them. So this module is a small hand-written
transport, opt-in (`tokspeed sim --kernel-stamps`), that reads with `recvmsg()`, hands aiohttp's
protocol the bytes and the stamp, and writes with `send()`, buffering what the socket does not
take. It costs the simulator some CPU per read and write (Python, not uvloop's C); the default
stays uvloop's transport.

The kernel's stamp is on the real-time clock; it is moved onto the monotonic clock the log uses
by the two clocks' offset read at the same read. TCP's stamp is the last packet's that the read
consumed: for a request that fits one packet (anything up to the loopback MTU, 64 KiB) that is
its arrival.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python names it only on some builds
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
READ_BYTES = 256 * 1024
ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # struct timespec: two 64-bit fields
HIGH_WATER = 64 * 1024  # pause the protocol's writes above this many buffered bytes, as asyncio does
LOW_WATER = 16 * 1024
ACCEPT_RETRY_S = 1.0  # asyncio's pause after accept() fails for want of file descriptors


def supported() -> bool:
    """Kernel receive stamps on TCP: Linux."""
    return sys.platform.startswith("linux") and ANCILLARY > 0


def stamp_of(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The receive time in `recvmsg`'s ancillary data, on `perf_counter_ns`'s clock; None if absent."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return seconds * 1_000_000_000 + nanoseconds - (time.time_ns() - time.perf_counter_ns())
    return None


class StampedTransport(asyncio.Transport):
    """A TCP connection read with `recvmsg()`: before each read's bytes reach the protocol, its
    `arrival_ns` (when None: the first read of a request) is set to the kernel's stamp."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._fd = sock.fileno()
        self._buffer = bytearray()
        self._closing = self._paused_writing = self._reading = False
        self._eof_after_flush = False
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvloop's TCP transports do
        self._extra = {"socket": sock, "peername": sock.getpeername(), "sockname": sock.getsockname()}
        protocol.connection_made(self)
        self.resume_reading()

    # reading ------------------------------------------------------------------------------
    def _read_ready(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(READ_BYTES, ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self.pause_reading()
            if not self._protocol.eof_received():
                self.close()
            return
        if getattr(self._protocol, "arrival_ns", 0) is None and (stamp := stamp_of(ancillary)) is not None:
            self._protocol.arrival_ns = stamp  # type: ignore[attr-defined]
        self._protocol.data_received(data)

    def pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._loop.add_reader(self._fd, self._read_ready)
            self._reading = True

    def is_reading(self) -> bool:
        return self._reading

    # writing ------------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if not self._buffer:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lose(exc)
                return
            data = memoryview(data)[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._write_ready)
        self._buffer.extend(data)
        if not self._paused_writing and len(self._buffer) > HIGH_WATER:
            self._paused_writing = True
            self._protocol.pause_writing()

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._buffer[:sent]
        if self._paused_writing and len(self._buffer) <= LOW_WATER:
            self._paused_writing = False
            self._protocol.resume_writing()
        if not self._buffer:
            self._loop.remove_writer(self._fd)
            if self._eof_after_flush:
                self._sock.shutdown(socket.SHUT_WR)
            if self._closing:
                self._lose(None)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._buffer:
            self._eof_after_flush = True
        else:
            self._sock.shutdown(socket.SHUT_WR)

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return LOW_WATER, HIGH_WATER

    # ending -------------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.pause_reading()
        if not self._buffer:
            self._lose(None)

    def abort(self) -> None:
        self._closing = True
        self._lose(None)

    def _lose(self, exc: Exception | None) -> None:
        """Close the socket once and tell the protocol (on the next loop turn, as asyncio does)."""
        if self._sock.fileno() < 0:
            return
        self._closing = True
        self.pause_reading()
        self._loop.remove_writer(self._fd)
        self._buffer.clear()
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]


class _Listener:
    """The listening socket: accepts whenever it is readable, one StampedTransport per connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol_factory: Callable[[], asyncio.Protocol]) -> None:
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
        self._server = _Listener(asyncio.get_running_loop(), sock, server)  # type: ignore[assignment]
