"""The loop primitives every phase runner shares: a phase, a fresh record, one send, a closed loop.

`send_one` hands one spec to the backend with its record and passes the finished
record (ok, error or cancelled) to `on_record` at once; `closed_loop` keeps N
requests in flight; `gather_or_cancel` and `cancel_all` end a set of tasks. The
executor (`run_phase`: open loop, closed loop) and the staged closed loop
(`tokspeed.runner.staged`) are built from these, so neither imports the other.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Protocol

from tokspeed.backends.base import Backend
from tokspeed.errors import BackendLost
from tokspeed.load.plan import NS
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

OnRecord = Callable[[RequestRecord], None]


def ignore(record: RequestRecord) -> None:
    return None


class SpecSource(Protocol):
    def request(self, index: int) -> RequestSpec: ...


@dataclass(frozen=True, slots=True)
class Phase:
    """What one phase runs: `n` requests (None = until `duration_s`), specs from `first_index` on."""

    iteration: int
    warmup: bool
    n: int | None
    duration_s: float | None
    first_index: int = 0
    seed: int = 0
    lead_s: float = 0.0  # warm-up held at the load before the measured requests (see the module docstring)
    lead_first_index: int = 0  # spec indices of those warm-up requests


def lead_record(phase: Phase, i: int, scheduled_ns: int) -> RequestRecord:
    """The i-th warm-up record of a phase's lead."""
    return RequestRecord(index=phase.lead_first_index + i, iteration=0, warmup=True, scheduled_ns=scheduled_ns)


async def send_one(
    backend: Backend,
    spec: RequestSpec,
    record: RequestRecord,
    on_record: OnRecord,
    on_start: OnRecord,
    slots: asyncio.Semaphore | None = None,
) -> None:
    """Send (after taking a slot, if capped); the record reaches `on_record` whatever happens."""
    record.prefix_group = spec.prefix_group  # shared-prefix workloads tag their requests
    record.model = spec.model  # a model mix: the model the request asks for
    try:
        if slots is None:
            on_start(record)
            await backend.send(spec, record)
        else:
            async with slots:
                on_start(record)
                await backend.send(spec, record)
    except asyncio.CancelledError:
        if record.sent_ns == 0:
            _mark(record, Status.INCOMPLETE, None, "cancelled before it was sent")
        raise
    except BackendLost:  # the backend filled the record and can send no more: the phase stops
        raise
    except Exception as exc:  # a backend bug must not lose the record or the run
        _mark(record, Status.ERROR, ErrorKind.OTHER, f"{type(exc).__name__}: {exc}")
    finally:
        on_record(record)


def _mark(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    record.status, record.error_kind, record.error = status, kind, message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()


def new_record(phase: Phase, index: int, scheduled_ns: int) -> RequestRecord:
    return RequestRecord(index=index, iteration=phase.iteration, warmup=phase.warmup, scheduled_ns=scheduled_ns)


async def closed_loop(
    workers: int,
    phase: Phase,
    backend: Backend,
    workload: SpecSource,
    on_record: OnRecord,
    on_start: OnRecord,
) -> None:
    lead_end = perf_counter_ns() + int(phase.lead_s * NS)
    deadline = None if phase.duration_s is None else lead_end + int(phase.duration_s * NS)
    indices: Iterator[int] = (
        iter(range(phase.first_index, phase.first_index + phase.n))
        if phase.n is not None
        else itertools.count(phase.first_index)
    )
    lead = itertools.count()

    async def worker() -> None:
        while (now := perf_counter_ns()) < lead_end:  # warm-up at the same width
            i = next(lead)
            spec = workload.request(phase.lead_first_index + i)
            await send_one(backend, spec, lead_record(phase, i, now), on_record, on_start)
        for index in indices:
            now = perf_counter_ns()
            if deadline is not None and now >= deadline:
                return
            await send_one(backend, workload.request(index), new_record(phase, index, now), on_record, on_start)

    tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
    await gather_or_cancel(tasks)


async def gather_or_cancel(tasks: Sequence[asyncio.Future[None]]) -> None:
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        await cancel_all(tasks)
        raise


async def cancel_all(tasks: Sequence[asyncio.Future[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
