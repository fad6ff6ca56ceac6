"""A client worker process: runs a backend for the parent and sends back each filled record.

The parent (`WorkerPoolBackend`) keeps the schedule, the files and the summaries;
a worker only does the per-token work (HTTP streaming, SSE parsing) for the
requests it is handed. It reads frames on stdin and writes frames on a copy of
its stdout; fd 1 itself is pointed at stderr, so a stray print can never
corrupt the pipe. It ignores SIGINT and SIGTERM (the parent decides when a run
ends, and cancels requests by message) and exits when stdin closes, which is
also what happens when the parent dies, however it dies.

`serve` is the loop; `main` wires it to the process's pipes and runs it on
uvloop when available. The backend comes from `make_backend`, given the
`WorkerInit` the parent sent: this module knows nothing of HTTP or of configs.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import stat
import sys
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import Backend
from tokspeed.backends.worker_protocol import (
    CANCEL,
    FAILED,
    INIT,
    READY,
    SEND,
    FrameError,
    WorkerInit,
    frame,
    read_frame,
    record_from_wire,
    record_message,
    spec_from_wire,
)
from tokspeed.errors import TargetGone, TokspeedError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

MakeBackend = Callable[[WorkerInit], Backend]
Write = Callable[[bytes], None]


async def serve(reader: asyncio.StreamReader, write: Write, make_backend: MakeBackend) -> int:
    """Start a backend from the first frame, then serve send/cancel frames until the stream ends."""
    first = await read_frame(reader)
    if first is None:
        return 0
    if first.get("op") != INIT:
        raise FrameError(f"expected {INIT!r} first, got {first.get('op')!r}")
    init = WorkerInit.model_validate({k: v for k, v in first.items() if k != "op"})
    del first  # the settings hold secrets: keep them no longer than needed
    try:
        backend = make_backend(init)
        await backend.start()
    except TokspeedError as exc:
        write(frame({"op": FAILED, "message": str(exc), "hint": exc.hint}))
        return 1
    write(frame({"op": READY}))
    try:
        await _serve_requests(reader, write, backend)
    finally:
        await backend.close()
    return 0


async def _serve_requests(reader: asyncio.StreamReader, write: Write, backend: Backend) -> None:
    tasks: dict[int, asyncio.Task[None]] = {}
    try:
        while (message := await read_frame(reader)) is not None:
            op = message["op"]
            if op == SEND:
                rid = int(message["id"])
                task = asyncio.ensure_future(_one(backend, rid, spec_from_wire(message["spec"]),
                                                  record_from_wire(message["rec"]), write))
                tasks[rid] = task
                task.add_done_callback(functools.partial(_forget, tasks, rid))
            elif op == CANCEL and (cancelled := tasks.get(int(message["id"]))) is not None:
                cancelled.cancel()
    finally:  # the parent is gone or done: nothing in flight is wanted any more
        pending = list(tasks.values())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _forget(tasks: dict[int, asyncio.Task[None]], rid: int, _task: object) -> None:
    tasks.pop(rid, None)


async def _one(backend: Backend, rid: int, spec: RequestSpec, record: RequestRecord, write: Write) -> None:
    """Send one request; its record goes back to the parent whatever happens (as the executor does)."""
    try:
        await backend.send(spec, record)
    except asyncio.CancelledError:
        if record.sent_ns == 0:
            _mark(record, Status.INCOMPLETE, None, "cancelled before it was sent")
        elif record.status is Status.OK and record.end_ns is None:
            _mark(record, Status.INCOMPLETE, None, "cancelled before completion")
    except TargetGone:  # refused for long: the record holds its connect error; the parent's verdict says the rest
        pass
    except Exception as exc:  # a backend bug must not lose the record
        _mark(record, Status.ERROR, ErrorKind.OTHER, f"{type(exc).__name__}: {exc}")
    try:
        write(frame(record_message(rid, record)))
    except (OSError, RuntimeError):  # the parent has gone: nobody to tell
        pass


def _mark(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    record.status, record.error_kind, record.error = status, kind, message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()


# the process ------------------------------------------------------------------
def main(make_backend: MakeBackend) -> int:
    """Run a worker on this process's stdin/stdout until stdin closes; returns the exit status."""
    if not (_is_pipe(0) and _is_pipe(1)):
        print("this is a client worker process of `tokspeed run --workers N`: it speaks frames over pipes, "
              "and tokspeed starts it", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # print() and stray library output now go to stderr, not into the pipe
    try:
        import uvloop

        return uvloop.run(_main(out_fd, make_backend))
    except ImportError:
        return asyncio.run(_main(out_fd, make_backend))


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _main(out_fd: int, make_backend: MakeBackend) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0))
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(out_fd, "wb", buffering=0))

    def write(data: bytes) -> None:
        if not transport.is_closing():
            transport.write(data)

    try:
        return await serve(reader, write, make_backend)
    finally:
        await _flush(transport)


async def _flush(transport: Any, timeout_s: float = 5.0) -> None:
    """Let buffered frames reach the parent before the process exits (bounded)."""
    deadline = perf_counter_ns() + int(timeout_s * 1e9)
    while transport.get_write_buffer_size() and perf_counter_ns() < deadline and not transport.is_closing():
        await asyncio.sleep(0.01)
    transport.close()
