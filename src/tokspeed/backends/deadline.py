"""Per-request deadlines (`--ttft-timeout`, `--timeout`, `--cancel-after`): one timer each, no per-token work.

A deadline is armed when a request is sent. If it fires while it still applies (for
`FirstTokenDeadline`: the request has neither a first token nor an end), it cancels the task
serving the request; the backend then asks `absorb()` whether that cancellation was the
deadline's (and only the deadline's) and records a `ttft_timeout` or `timeout` error instead
of letting it propagate.
"""

from __future__ import annotations

import asyncio

from tokspeed.records import RequestRecord


class TotalDeadline:
    """Cancel the current task after `after_s` (the whole request: connect to last byte)."""

    __slots__ = ("_handle", "expired")

    def __init__(self, after_s: float | None) -> None:
        self.expired = False
        self._handle: asyncio.TimerHandle | None = None
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


class ClientCancel(TotalDeadline):
    """Abort the request `after_ns` after it was sent (`--cancel-share`/`--cancel-after`), whatever it has received.

    Armed once the request's first byte is handed to the transport, so the abort comes `after_ns`
    after `sent_ns`; the exchange then closes the connection, which is how a server learns of it.
    """

    __slots__ = ()

    def __init__(self, after_ns: int | None) -> None:
        super().__init__(None if after_ns is None else after_ns / 1e9)
