"""Each read stamped with the kernel's receive time, not with when the event loop got to it.

An event loop reads a socket when it gets to it: after the callbacks before it, after the OS
schedules the process. Under load that is late (a server writing a burst of chunks, a client
process preempted on a shared machine), and a timestamp taken at the read carries the wait. The
kernel stamps every packet when it reaches the socket (`SO_TIMESTAMPNS`), but asyncio's and
uvloop's transports read with `recv()`, which drops those stamps; only `recvmsg()` returns them.
So this module is a small hand-written transport that reads with `recvmsg()`, hands its
`StampedProtocol` the bytes and the stamp, and writes with `send()`, buffering what the socket
does not take. It costs CPU per read and write (Python, not uvloop's C), so both users make it
opt-in: the simulator's arrival stamps (`tokspeed sim --kernel-stamps`, `sim/kernel_stamps.py`)
and the client's read stamps (`tokspeed run --kernel-stamps`, `backends/http1.py`).

The kernel's stamp is on the real-time clock; it is moved onto the monotonic clock
(`perf_counter_ns`) by the two clocks' offset read at the same read. TCP's stamp is that of the
last packet the read consumed: when one read takes several packets (the reader was late by more
than the gap between them), it is the latest packet's, still no later than the read.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from time import perf_counter_ns, time_ns
from typing import Any, Protocol

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python names it only on some builds
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
# at most this much per read: recvmsg() allocates the whole size for each read, and above glibc's mmap threshold
# (128 KiB) that is an mmap and munmap per read: 256 KiB cost ~13 µs more per read than 64 KiB (measured)
READ_BYTES = 64 * 1024
TIMESPEC = struct.Struct("qq")  # struct timespec on 64-bit Linux
SOL_SOCKET = socket.SOL_SOCKET
ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # struct timespec: two 64-bit fields
HIGH_WATER = 64 * 1024  # pause the protocol's writes above this many buffered bytes, as asyncio does
LOW_WATER = 16 * 1024


def supported() -> bool:
    """Kernel receive stamps on TCP: Linux."""
    return sys.platform.startswith("linux") and ANCILLARY > 0


def stamp_of(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The receive time in `recvmsg`'s ancillary data, on `perf_counter_ns`'s clock; None if absent."""
    for level, kind, data in ancillary:
        if level == SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return seconds * 1_000_000_000 + nanoseconds - (time_ns() - perf_counter_ns())
    return None


class StampedProtocol(Protocol):
    """An asyncio protocol that takes each read with its kernel receive stamp (None if the kernel gave none)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def eof_received(self) -> bool | None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...

    def stamped_data_received(self, data: bytes, stamp_ns: int | None) -> None: ...


class StampedTransport(asyncio.Transport):
    """A TCP connection read with `recvmsg()`: each read reaches the protocol with the kernel's stamp."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: StampedProtocol) -> None:
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
        self._protocol.stamped_data_received(data, stamp_of(ancillary))

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
        return self._protocol  # type: ignore[return-value]  # a StampedProtocol is an asyncio protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]  # it must take stamped reads
