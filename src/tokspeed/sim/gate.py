"""A first-come, first-served admission gate: at most `limit` requests in service at once.

Unlike relying on `asyncio.Semaphore`'s wake-up order, waiters here are admitted strictly in
arrival order, which is what `max_concurrency` promises (a FIFO queue in front of the server).
"""

from __future__ import annotations

import asyncio
from collections import deque


class FifoGate:
    """Admit up to `limit` holders (None: unlimited); later arrivals wait in FIFO order."""

    __slots__ = ("_active", "_limit", "_waiters")

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def active(self) -> int:
        """How many holders are in service now."""
        return self._active

    @property
    def waiting(self) -> int:
        """How many arrivals are queued."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Wait for a slot; returns at once while under the limit and nobody is queued."""
        if self._limit is None or (self._active < self._limit and not self._waiters):
            self._active += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled: pass the slot on
                self.release()
            elif fut in self._waiters:
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back and admit the longest-waiting arrival, if any."""
        self._active -= 1
        while self._waiters and (self._limit is None or self._active < self._limit):
            fut = self._waiters.popleft()
            if not fut.done():
                self._active += 1
                fut.set_result(None)
