"""Run one phase (warm-up or one iteration) of a load plan against a backend.

The executor turns a `LoadPlan` into concrete send times, asks the workload for
each `RequestSpec`, hands it to the backend with a fresh `RequestRecord`, and
passes every finished record (ok, error or cancelled) to `on_record` at once,
so the caller can write it to disk before anything else happens. A backend that
raises `BackendLost` (after filling its record) stops the phase: the other
requests in flight are cancelled and the error propagates.

Open loop: each request is handed to the backend when its scheduled time comes,
waited for with `sleep_until` (sub-millisecond, never early: see
`tokspeed.runner.pacing`); its record keeps that time as `scheduled_ns`.

Warm-up held at the load (`Phase.lead_s`): the phase first runs the same load
for `lead_s` seconds whose records are warm-up (iteration 0, indices from
`lead_first_index`), then the measured requests follow without a pause, so the
measured window starts on a server already in its steady state instead of an
empty one (a drained warm-up phase conditions nothing). Open loop: the lead is
round(rate × lead_s) arrivals of one schedule (with a count) or its first lead_s
seconds (with a duration only); closed loop: requests started before the lead ends.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Callable, Iterator, Protocol

import numpy as np

from tokspeed.backends.base import Backend
from tokspeed.errors import BackendLost
from tokspeed.load.plan import NS, LoadPlan
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status
from tokspeed.runner.pacing import sleep_until

OnRecord = Callable[[RequestRecord], None]


def _ignore(record: RequestRecord) -> None:
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


async def run_phase(
    plan: LoadPlan,
    phase: Phase,
    backend: Backend,
    workload: SpecSource,
    on_record: OnRecord,
    on_start: OnRecord = _ignore,
) -> None:
    """Run the phase to completion. On cancellation in-flight requests are recorded as incomplete.

    `on_start` sees each record just before it is handed to the backend; `on_record`
    sees it once it is finished, whatever the outcome.
    """
    if plan.timeline is not None and plan.timeline.closed:  # concurrency stages: the width changes per stage
        from tokspeed.runner.staged import staged_closed_loop

        await staged_closed_loop(plan.timeline, phase, backend, workload, on_record, on_start)
    elif plan.open_loop:
        await _open_loop(plan, phase, backend, workload, on_record, on_start)
    else:
        await closed_loop(plan.workers or 1, phase, backend, workload, on_record, on_start)


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


async def _open_loop(
    plan: LoadPlan,
    phase: Phase,
    backend: Backend,
    workload: SpecSource,
    on_record: OnRecord,
    on_start: OnRecord,
) -> None:
    offsets, leading = _schedule(plan, phase)
    slots = asyncio.Semaphore(plan.workers) if plan.workers else None
    in_flight: set[asyncio.Future[None]] = set()
    lost: list[BaseException] = []  # a BackendLost from a request that finished on its own

    def settled(task: asyncio.Future[None]) -> None:
        in_flight.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            lost.append(exc)

    def index_of(i: int) -> int:
        return phase.lead_first_index + i if i < leading else phase.first_index + i - leading

    # the first request is built before the clock starts: the first build pays the workload's lazy set-up
    # (57-107 ms for a trace's first prompt at load 7), which made the first arrivals of a replay that late
    first = workload.request(index_of(0)) if len(offsets) else None
    start = perf_counter_ns()
    try:
        for i, offset in enumerate(offsets.tolist()):
            due = start + offset
            spec = first if i == 0 else workload.request(index_of(i))  # ready before it is due
            record = lead_record(phase, i, due) if i < leading else new_record(phase, index_of(i), due)
            await sleep_until(due)
            if lost:
                break
            task = asyncio.ensure_future(send_one(backend, spec, record, on_record, on_start, slots))
            in_flight.add(task)
            task.add_done_callback(settled)
    except asyncio.CancelledError:
        await cancel_all(list(in_flight))
        raise
    if not lost:
        await gather_or_cancel(list(in_flight))
    if lost:
        await cancel_all(list(in_flight))
        raise lost[0]


def _schedule(plan: LoadPlan, phase: Phase) -> tuple[np.ndarray, int]:
    """The phase's arrival offsets (ns), its lead included, and how many of them lead."""
    if phase.lead_s <= 0 or plan.rate is None or plan.timeline is not None:
        return plan.arrivals_ns(phase.n, phase.duration_s, phase.seed), 0
    if phase.n is not None:
        leading = 0 if math.isinf(plan.rate) else round(plan.rate * phase.lead_s)
        total = None if phase.duration_s is None else phase.lead_s + phase.duration_s
        return plan.arrivals_ns(phase.n + leading, total, phase.seed), leading
    assert phase.duration_s is not None
    offsets = plan.arrivals_ns(None, phase.lead_s + phase.duration_s, phase.seed)
    return offsets, int(np.searchsorted(offsets, int(phase.lead_s * NS)))


async def gather_or_cancel(tasks: list[asyncio.Future[None]]) -> None:
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        await cancel_all(tasks)
        raise


async def cancel_all(tasks: list[asyncio.Future[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

