"""Concurrency stages: one closed loop whose width changes at stage boundaries.

`--stages 'concurrency=4:10s,concurrency=16:20s'` (or a stepped `--ramp
concurrency=1..32:60s:steps=5`) runs max(width) workers from one start. Worker
w (0-based) is active while the current stage's width is more than w: it sends
its next request as soon as its previous one finished, like `--concurrency`. When
the width drops below w + 1 the worker finishes the request it has in flight and
then waits (on the clock, `sleep_until`) for the next stage boundary, when it
looks again. After the last stage ends no worker starts a request; those in flight
finish normally. A request belongs to the stage in which it was started (its
`scheduled_ns`), which sets `RequestRecord.stage`. A warm-up phase runs as an
ordinary closed loop at the first stage's width.
"""

from __future__ import annotations

import asyncio
import itertools
from time import perf_counter_ns

import numpy as np

from tokspeed.backends.base import Backend
from tokspeed.load.timeline import NS, Timeline
from tokspeed.runner.loops import (
    OnRecord,
    Phase,
    SpecSource,
    closed_loop,
    gather_or_cancel,
    new_record,
    send_one,
)
from tokspeed.runner.pacing import sleep_until


async def staged_closed_loop(
    timeline: Timeline,
    phase: Phase,
    backend: Backend,
    workload: SpecSource,
    on_record: OnRecord,
    on_start: OnRecord,
) -> None:
    """Run the stages of `timeline` (its windows carry widths) back to back, as one closed loop."""
    widths = [w.concurrency or 0 for w in timeline.windows]
    if phase.warmup:
        await closed_loop(max(1, widths[0]), phase, backend, workload, on_record, on_start)
        return
    start = perf_counter_ns()
    ends = np.asarray([start + round(w.end_s * NS) for w in timeline.windows], dtype=np.int64)
    indices = itertools.count(phase.first_index)
    n_left = [phase.n]  # an explicit request count still stops the phase

    async def worker(slot: int) -> None:
        while True:
            now = perf_counter_ns()
            k = int(np.searchsorted(ends, now, side="right"))
            if k >= len(widths):
                return
            if slot >= widths[k]:
                await sleep_until(int(ends[k]))
                continue
            if n_left[0] is not None:
                if n_left[0] <= 0:
                    return
                n_left[0] -= 1
            index = next(indices)
            record = new_record(phase, index, now)
            record.stage = timeline.windows[k].name
            await send_one(backend, workload.request(index), record, on_record, on_start)

    tasks: list[asyncio.Future[None]] = [asyncio.ensure_future(worker(slot)) for slot in range(max(widths))]
    await gather_or_cancel(tasks)
