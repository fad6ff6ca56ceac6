"""Per-request deadlines (`--ttft-timeout`, `--timeout`): one timer each, no per-token work.

A `FirstTokenDeadline` is armed when a request is sent. If it fires while the request has
neither a first token nor an end, it cancels the task serving the request; the backend then
asks `absorb()` whether that cancellation was the deadline's (and only the deadline's) and
records a `ttft_timeout` error instead of letting it propagate.
"""

from __future__ import annotations

import asyncio

from tokspeed.records import RequestRecord


class FirstTokenDeadline:
    """Cancel the current task after `after_s` unless `record` got a first token (or ended)."""

    __slots__ = ("_handle", "expired")

    def __init__(self, after_s: float | None, record: RequestRecord) -> None:
        self.expired = False
        self._handle: asyncio.TimerHandle | None = None
        if after_s is None:
            return
        task = asyncio.current_task()
        if task is not None:
            self._handle = asyncio.get_running_loop().call_later(after_s, self._fire, task, record)

    def _fire(self, task: asyncio.Task[object], record: RequestRecord) -> None:
        if record.first_token_ns is None and record.end_ns is None and not task.done():
            self.expired = True
            task.cancel()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def absorb(self) -> bool:
        """After a CancelledError: True when it came from this deadline alone (then it is consumed)."""
        return _absorb(self.expired)


def _absorb(expired: bool) -> bool:
    """True when a deadline fired and its cancellation is the task's only one (then consume it)."""
    if not expired:
        return False
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is None:
        return True
    return int(uncancel()) == 0


class TotalDeadline:
    """Cancel the current task after `after_s` (the whole request: connect to last byte)."""

    __slots__ = ("_handle", "expired")

    def __init__(self, after_s: float | None) -> None:
        self.expired = False
        self._handle: asyncio.TimerHandle | None = None
        task = asyncio.current_task()
        if after_s is not None and task is not None:
            self._handle = asyncio.get_running_loop().call_later(after_s, self._fire, task)

    def _fire(self, task: asyncio.Task[object]) -> None:
        if not task.done():
            self.expired = True
            task.cancel()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def absorb(self) -> bool:
        """After a CancelledError: True when it came from this deadline alone (then it is consumed)."""
        return _absorb(self.expired)
