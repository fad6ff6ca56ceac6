"""sleep_until: never early, whole-millisecond timer sleeps that end before the due time, then yields."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

import pytest

from tokspeed.runner.pacing import SPIN_NS, sleep_until

MS = 1_000_000


class FakeLoop:
    """A clock that moves only when slept on: timer sleeps fire off by the next of `errors_ns`, sleep(0) takes 20 µs."""

    def __init__(self, errors_ns: list[int]) -> None:
        self.now = 0
        self.errors = errors_ns
        self.timer_sleeps: list[tuple[int, float]] = []  # (time asked at, seconds asked)
        self.yields = 0

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds == 0:
            self.yields += 1
            self.now += 20_000
            return
        self.timer_sleeps.append((self.now, seconds))
        error = self.errors[(len(self.timer_sleeps) - 1) % len(self.errors)]
        self.now += max(0, round(seconds * 1e9) + error)


@pytest.mark.parametrize("errors_ns", [[0], [-900_000], [-1_400_000, 400_000], [450_000]])
async def test_returns_at_the_due_time_never_before(errors_ns: list[int]) -> None:
    loop = FakeLoop(errors_ns)
    due = 10 * MS + 123_456
    woke = await sleep_until(due, clock=loop.clock, sleep=loop.sleep)
    assert woke == loop.now and due <= woke < due + 20_000  # within one yield of the due time
    for asked_at, seconds in loop.timer_sleeps:
        assert seconds * 1000 == int(seconds * 1000) >= 1  # whole milliseconds: no loop rounds them up
        assert asked_at + seconds * 1e9 <= due - SPIN_NS  # each timer sleep ends a spin margin before due
    # the yielding stretch is short: the spin margin plus under 2 ms of timer error (at 20 µs a turn)
    assert loop.yields * 20_000 <= SPIN_NS + 2 * MS + 20_000


async def test_a_due_time_in_the_past_returns_at_once() -> None:
    loop = FakeLoop([0])
    loop.now = 5 * MS
    assert await sleep_until(4 * MS, clock=loop.clock, sleep=loop.sleep) == 5 * MS
    assert loop.timer_sleeps == [] and loop.yields == 0


async def test_on_a_real_loop_it_is_never_early() -> None:
    for delay_ns in (300_000, 1_700_000, 4_200_000):
        due = perf_counter_ns() + delay_ns
        woke = await sleep_until(due)
        assert perf_counter_ns() >= woke >= due
    await asyncio.sleep(0)
