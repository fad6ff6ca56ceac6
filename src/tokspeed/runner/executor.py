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
import math
from time import perf_counter_ns

import numpy as np

from tokspeed.backends.base import Backend
from tokspeed.load.plan import NS, LoadPlan
from tokspeed.runner.loops import (
    OnRecord,
    Phase,
    SpecSource,
    cancel_all,
    closed_loop,
    gather_or_cancel,
    ignore,
    lead_record,
    new_record,
    send_one,
)
from tokspeed.runner.pacing import sleep_until
from tokspeed.runner.staged import staged_closed_loop


async def run_phase(
    plan: LoadPlan,
    phase: Phase,
    backend: Backend,
    workload: SpecSource,
    on_record: OnRecord,
    on_start: OnRecord = ignore,
) -> None:
    """Run the phase to completion. On cancellation in-flight requests are recorded as incomplete.

    `on_start` sees each record just before it is handed to the backend; `on_record`
    sees it once it is finished, whatever the outcome.
    """
    if plan.timeline is not None and plan.timeline.closed:  # concurrency stages: the width changes per stage
        await staged_closed_loop(plan.timeline, phase, backend, workload, on_record, on_start)
    elif plan.open_loop:
        await _open_loop(plan, phase, backend, workload, on_record, on_start)
    else:
        await closed_loop(plan.workers or 1, phase, backend, workload, on_record, on_start)


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
            index = index_of(i)
            spec = first if i == 0 and first is not None else workload.request(index)  # ready before it is due
            record = lead_record(phase, i, due) if i < leading else new_record(phase, index, due)
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
