"""Per-request deadlines (`--ttft-timeout`, `--timeout`, `--cancel-after`): one timer each, no per-token work.

A deadline is armed when a request is sent. If it fires while it still applies (for
`FirstTokenDeadline`: the request has neither a first token nor an end), it cancels the task
serving the request; the backend then asks `absorb()` whether that cancellation was the
deadline's (and only the deadline's) and records a `ttft_timeout` or `timeout` error instead
of letting it propagate.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

from tokspeed.records import RequestRecord


class TotalDeadline:
    """Cancel the current task after `after_s` (the whole request: connect to last byte)."""

    __slots__ = ("_handle", "expired")

    def __init__(self, after_s: float | None) -> None:
        self.expired = False
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        task = asyncio.current_task()
        if after_s is not None and task is not None:
            self._handle = asyncio.get_running_loop().call_later(after_s, self._fire, task)

    def applies(self) -> bool:
        """Whether firing now should cancel the request."""
        return True

    def _fire(self, task: asyncio.Task[object]) -> None:
        if self.applies() and not task.done():
            self.expired = True
            task.cancel()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def absorb(self) -> bool:
        """After a CancelledError: True when it came from this deadline alone (then it is consumed)."""
        if not self.expired:
            return False
        task = asyncio.current_task()
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+
        if uncancel is None:
            return True
        return int(uncancel()) == 0


class FirstTokenDeadline(TotalDeadline):
    """Cancel the current task after `after_s` unless `record` got a first token (or ended)."""

    __slots__ = ("_record",)

    def __init__(self, after_s: float | None, record: RequestRecord) -> None:
        self._record = record
        super().__init__(after_s)

    def applies(self) -> bool:
        return self._record.first_token_ns is None and self._record.end_ns is None


SPIN_NS = 500_000  # an early abort timer waits out its last half millisecond in loop turns (no timer's rounding)


class ClientCancel(TotalDeadline):
    """Abort the request `after_ns` after it was sent (`--cancel-share`/`--cancel-after`), whatever it has received.

    Armed once the request's first byte is handed to the transport, so the abort comes `after_ns`
    after `sent_ns`; the exchange then closes the connection, which is how a server learns of it.
    Never early: the loop's timer may fire up to ~1.5 ms before its time (uvloop ticks and rounds in
    whole milliseconds, see `runner.pacing`), and then it is armed again for what remains.
    """

    __slots__ = ("_due_ns",)

    def __init__(self, after_ns: int | None) -> None:
        self._due_ns = perf_counter_ns() + (after_ns or 0)
        super().__init__(None if after_ns is None else after_ns / 1e9)

    def _fire(self, task: asyncio.Task[object]) -> None:
        remaining_ns = self._due_ns - perf_counter_ns()
        if remaining_ns > 0 and not task.done():  # early: wait out the rest
            loop = asyncio.get_running_loop()
            whole_ms = (remaining_ns - SPIN_NS) // 1_000_000  # as runner.pacing: timers for whole ms, then loop turns
            self._handle = (loop.call_later(whole_ms / 1000, self._fire, task) if whole_ms > 0
                            else loop.call_soon(self._fire, task))
            return
        super()._fire(task)
