"""Wait until an instant on the monotonic clock, to well under a millisecond, without burning a core.

The event loop's timers are coarse. uvloop rounds a delay to the nearest whole
millisecond and ticks its clock in whole milliseconds, so `await
asyncio.sleep(d)` wakes anywhere from ~1.5 ms early to ~0.5 ms late; asyncio's
own loop rounds epoll's timeout up to the next millisecond (up to 1 ms late).
An open-loop schedule paced that way starts requests up to a millisecond early
or late, and at 200 req/s the gaps between sends vary by 7–20% (CV).

`sleep_until(due)` asks the timer only for whole milliseconds that end at least
`spin_ns` before `due` (so neither loop's rounding can make it late), sleeping
again if the timer fired early; for the last stretch it yields to the loop with
`sleep(0)` until the clock reaches `due`. It never returns before `due`. While
it yields, every other task (streams being read, timers) runs as usual; the
cost is the CPU of those idle loop turns, on average about `spin_ns` + 1 ms per
wait on uvloop: a few percent of a core at 20 req/s, under a fifth at 200 req/s,
spent only while the loop has nothing else to do (`bench/schedule.py` measures
it). The spin margin absorbs the OS's wake-up latency; a busy machine that
deschedules the process for longer still makes it late, and lateness is then
what the run reports. A wider margin does not help there (measured: a process
that spins longer is preempted more often), so it is kept small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from time import perf_counter_ns

NS_PER_MS = 1_000_000
SPIN_NS = 500_000  # the timer's sleep ends at least this long before the due time


async def sleep_until(
    due_ns: int,
    spin_ns: int = SPIN_NS,
    clock: Callable[[], int] = perf_counter_ns,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Return once `clock()` ≥ `due_ns` (never before); returns that reading of the clock.

    Formula for each timer sleep: ⌊(due − now − spin_ns) / 1 ms⌋ ms; at zero, `sleep(0)` instead.
    """
    while True:
        now = clock()
        remaining = due_ns - now
        if remaining <= 0:
            return now
        whole_ms = (remaining - spin_ns) // NS_PER_MS
        await sleep(whole_ms / 1000 if whole_ms > 0 else 0)
