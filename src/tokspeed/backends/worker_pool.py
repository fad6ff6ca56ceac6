"""`--workers N`: spread the per-token work of a run over N client worker processes.

`WorkerPoolBackend` is a `Backend` like any other, so the runner keeps doing
everything it does (the schedule and concurrency, guards, the results file,
the live view, the summaries) in this process. `send` hands each request to the
worker with the fewest requests in flight and waits for the filled record,
which it copies into the runner's record: the records stay merged, in one file,
on one clock (the workers' `perf_counter_ns()` is the host's CLOCK_MONOTONIC,
the same as this process's).

Lifecycle. `start` runs the wrapped backend's own `start` here (probe, model
discovery: the `TargetInfo`), closes it, then starts the workers and sends each
its settings over its stdin pipe (secrets included: never in argv or the
environment), with the discovered model; each worker starts its own backend
(one 1-token probe) and says it is ready. `close` closes their stdins; they
cancel what they still have, exit, and are killed if they do not within
`EXIT_WAIT_S`.

Cancellation. When the task awaiting a request is cancelled (Ctrl-C, a guard,
the end of a duration), a cancel message goes to its worker, which cancels the
request there (its backend records it as incomplete); the record is awaited
for at most `CANCEL_WAIT_S` (else it is marked incomplete here) and the
cancellation goes on.

A worker that exits mid-run (killed, crashed) fails the requests it had in
flight (`error_kind` other, "client worker N of M exited ..."), and `send`
raises `BackendLost`, which stops the run with that message: a run whose load
generator lost part of itself measured something other than what was asked.
Records already received are on disk; nothing waits on a dead worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, Protocol

from tokspeed.backends.base import Backend, TargetInfo
from tokspeed.backends.worker_protocol import (
    CANCEL,
    FAILED,
    INIT,
    READY,
    RECORD,
    FrameError,
    WorkerInit,
    fill,
    frame,
    read_frame,
    send_message,
)
from tokspeed.errors import BackendLost, TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

CANCEL_WAIT_S = 2.0  # how long a cancelled request's record is awaited from its worker
EXIT_WAIT_S = 5.0  # how long a worker may take to exit once its stdin is closed
LOST_HINT = "the records so far are saved; rerun, with fewer --workers if a worker ran out of memory"


class WorkerExited(Exception):
    """A worker process ended while requests were in flight on it (the message says how)."""


class Load(Protocol):
    """What the assignment looks at."""

    @property
    def alive(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def assigned(self) -> int: ...


def least_loaded(workers: Sequence[Load]) -> int | None:
    """Index of the live worker with the fewest requests in flight (ties: fewest assigned, then first)."""
    best: int | None = None
    best_key = (0, 0)
    for i, w in enumerate(workers):
        if not w.alive:
            continue
        key = (w.in_flight, w.assigned)
        if best is None or key < best_key:
            best, best_key = i, key
    return best


@dataclass(eq=False)
class _Worker:
    """One worker process and the requests waiting on it."""

    number: int
    proc: asyncio.subprocess.Process
    pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    assigned: int = 0
    exited: str | None = None  # how it ended, once it did
    ready: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    reader: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.exited is None

    @property
    def in_flight(self) -> int:
        return len(self.pending)

    def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if self.alive and stdin is not None and not stdin.is_closing():
            try:
                stdin.write(data)
            except (OSError, RuntimeError):  # the pipe broke: the reader will notice the exit
                pass


class WorkerPoolBackend:
    """Sends each request through one of `workers` client worker processes (see the module doc)."""

    def __init__(
        self,
        inner: Backend,
        *,
        workers: int,
        settings: dict[str, Any],
        pool_size: int,
        command: Sequence[str],
        reason: str = "",
    ) -> None:
        self._inner = inner
        self._n = workers
        self._settings = settings
        self._pool_size = pool_size
        self._command = list(command)
        self._reason = reason
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._lost: str | None = None  # the first worker exit, once there was one
        self._closing = False

    def __repr__(self) -> str:  # never show the settings (they may hold the API key)
        return f"WorkerPoolBackend(workers={self._n}, pool_size={self._pool_size})"

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        """Probe the target here, then start the workers with what the probe learned."""
        try:
            info = await self._inner.start()
        finally:
            await self._inner.close()
        try:
            await self._start_workers(info)
        except BaseException:
            await self.close()
            raise
        note = f"{self._n} client worker processes, up to {self._pool_size} connections each"
        return dataclasses.replace(
            info,
            notes=(*info.notes, f"{note} ({self._reason})" if self._reason else note),
            extra={**info.extra, "client_workers": self._n},
        )

    async def _start_workers(self, info: TargetInfo) -> None:
        self._closing, self._lost = False, None
        for number in range(1, self._n + 1):
            proc = await asyncio.create_subprocess_exec(
                *self._command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
            )
            worker = _Worker(number, proc)
            self._workers.append(worker)
            worker.reader = asyncio.ensure_future(self._read(worker))
            init = WorkerInit(worker=number, settings=self._settings, model=info.model,
                              include_usage=info.include_usage, pool_size=self._pool_size)
            worker.write(frame({"op": INIT, **init.model_dump()}))
        await asyncio.gather(*(w.ready for w in self._workers))

    async def close(self) -> None:
        """Close every worker's stdin; wait for them to exit (killing any that will not)."""
        self._closing = True
        workers, self._workers = self._workers, []
        for w in workers:
            if w.proc.stdin is not None and not w.proc.stdin.is_closing():
                w.proc.stdin.close()
        await asyncio.gather(*(_reap(w.proc) for w in workers), return_exceptions=True)
        readers = [w.reader for w in workers if w.reader is not None]
        await asyncio.gather(*readers, return_exceptions=True)
        for w in workers:
            if not w.ready.done():
                w.ready.cancel()

    # requests ---------------------------------------------------------------
    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send through the least-loaded worker and fill `record` from what it sends back."""
        index = least_loaded(self._workers)
        if self._lost is not None or index is None:
            _mark(record, Status.INCOMPLETE, None, f"not sent: {self._lost or 'no client worker is running'}")
            raise BackendLost(f"{self._lost or 'no client worker is running'}: the run stopped", hint=LOST_HINT)
        worker = self._workers[index]
        rid = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        worker.pending[rid] = future
        worker.assigned += 1
        handed_ns = perf_counter_ns()
        worker.write(frame(send_message(rid, spec, record)))
        try:
            wire = await future
        except asyncio.CancelledError:
            late = await self._cancelled(worker, rid, future)
            if late is not None:
                fill(record, late)
            elif record.status is Status.OK:
                _mark(record, Status.INCOMPLETE, None, "cancelled; its client worker did not report it in time")
            raise
        except WorkerExited as exc:
            record.sent_ns = record.sent_ns or handed_ns  # it reached the client; whether it left is unknown
            _mark(record, Status.ERROR, ErrorKind.OTHER, f"{exc} while this request was in flight")
            raise BackendLost(f"{exc}: the run stopped", hint=LOST_HINT) from None
        finally:
            worker.pending.pop(rid, None)
        fill(record, wire)

    async def _cancelled(
        self, worker: _Worker, rid: int, future: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """After this request's task was cancelled: cancel it in the worker, await its record (bounded)."""
        current = worker.pending.get(rid, future)
        if current.done() and not current.cancelled() and current.exception() is None:
            return current.result()  # it finished as the cancellation arrived
        if not worker.alive:
            return None
        again: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        worker.pending[rid] = again
        worker.write(frame({"op": CANCEL, "id": rid}))
        try:
            return await asyncio.wait_for(again, CANCEL_WAIT_S)
        except (asyncio.TimeoutError, asyncio.CancelledError, WorkerExited):
            return None

    # the pipes --------------------------------------------------------------
    async def _read(self, worker: _Worker) -> None:
        """Dispatch the worker's frames until its stdout ends; then settle everything waiting on it."""
        problem = None
        assert worker.proc.stdout is not None
        try:
            while (message := await read_frame(worker.proc.stdout)) is not None:
                self._dispatch(worker, message)
        except FrameError as exc:
            problem = f"sent a bad frame ({exc})"
            worker.proc.kill()
        except (ConnectionError, OSError) as exc:
            problem = f"pipe failed ({exc})"
        await self._exited(worker, problem)

    def _dispatch(self, worker: _Worker, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == RECORD:
            rid = int(message["id"])
            future = worker.pending.pop(rid, None)
            if future is None:
                return
            if future.done():  # its task was cancelled as the record came: keep it for `_cancelled`
                future = asyncio.get_running_loop().create_future()
                worker.pending[rid] = future
            future.set_result(message["rec"])
        elif op == READY and not worker.ready.done():
            worker.ready.set_result(None)
        elif op == FAILED and not worker.ready.done():
            text = f"client worker {worker.number} could not start: {message.get('message')}"
            worker.ready.set_exception(TargetError(text, hint=message.get("hint")))

    async def _exited(self, worker: _Worker, problem: str | None) -> None:
        code = await _reap(worker.proc)
        how = problem or _describe_exit(code)
        worker.exited = f"client worker {worker.number} of {self._n} exited ({how})"
        if not self._closing and self._lost is None and worker.ready.done():
            self._lost = worker.exited
        if not worker.ready.done():
            worker.ready.set_exception(BackendLost(f"{worker.exited} while starting; see its output above"))
        pending, worker.pending = worker.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(WorkerExited(worker.exited))


async def _reap(proc: asyncio.subprocess.Process) -> int:
    """The process's exit status, killing it if it has not exited within EXIT_WAIT_S."""
    try:
        return await asyncio.wait_for(proc.wait(), EXIT_WAIT_S)
    except asyncio.TimeoutError:
        proc.kill()
        return await proc.wait()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _mark(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    record.status, record.error_kind, record.error = status, kind, message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()
