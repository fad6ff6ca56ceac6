"""Stop conditions that watch outcomes rather than the clock.

`ErrorRateGuard` implements `--max-error-rate`: once at least `min_requests` measured
requests have finished (ok or error; cancelled ones do not count), a failed fraction above
the limit cancels the phase in progress, and `run_guarded` turns that into `RunStopped`.
`target_lost` is the verdict after a run: the last requests all failed to connect or were
cut off, after earlier ones succeeded — the target died mid-run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

from tokspeed.config import MAX_ERROR_RATE_MIN_REQUESTS
from tokspeed.records import ErrorKind, RequestRecord, Status

LOST_AFTER = 5  # this many trailing connection failures, after a success, mean the target went away
_GONE = (ErrorKind.CONNECT, ErrorKind.BROKEN)


class RunStopped(Exception):
    """A guard stopped the run early; the message says why."""


class ErrorRateGuard:
    """Counts measured outcomes; cancels the watched phase when the error rate passes `limit`."""

    __slots__ = ("limit", "min_requests", "finished", "failed", "reason", "_task")

    def __init__(self, limit: float | None, min_requests: int = MAX_ERROR_RATE_MIN_REQUESTS) -> None:
        self.limit = limit
        self.min_requests = min_requests
        self.finished = 0
        self.failed = 0
        self.reason: str | None = None
        self._task: asyncio.Future[Any] | None = None

    def watch(self, task: asyncio.Future[Any] | None) -> None:
        """The phase to cancel when the limit is passed (None: none)."""
        self._task = task

    def record(self, record: RequestRecord) -> None:
        """Count one finished request (warm-up and cancelled requests are ignored)."""
        if self.limit is None or record.warmup or record.status is Status.INCOMPLETE:
            return
        self.finished += 1
        self.failed += record.status is Status.ERROR
        if self.reason is None and self.finished >= self.min_requests and self.failed > self.limit * self.finished:
            self.reason = (
                f"stopped early: {self.failed} of {self.finished} measured requests failed "
                f"({self.failed / self.finished:.1%}), more than --max-error-rate {self.limit:g}"
            )
            if self._task is not None:
                self._task.cancel()


async def run_guarded(phase: Coroutine[Any, Any, None], guard: ErrorRateGuard) -> None:
    """Run `phase` as a task the guard may cancel; raise RunStopped when it did.

    A cancellation of the caller (Ctrl-C) cancels the phase too and propagates as usual.
    """
    task = asyncio.ensure_future(phase)
    guard.watch(task)
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        raise
    finally:
        guard.watch(None)
    if task.cancelled():
        raise RunStopped(guard.reason or "stopped early")
    task.result()


def target_lost(records: Iterable[RequestRecord]) -> str | None:
    """Why the run looks like its target died mid-run, or None.

    True when the last LOST_AFTER or more finished measured requests (by end time) all failed
    to connect or broke off, and at least one request before them did not.
    """
    finished = sorted(
        (r for r in records if not r.warmup and r.status is not Status.INCOMPLETE and r.end_ns is not None),
        key=lambda r: r.end_ns or 0,
    )
    trailing = 0
    for r in reversed(finished):
        if r.status is not Status.ERROR or r.error_kind not in _GONE:
            break
        trailing += 1
    if trailing < LOST_AFTER or trailing == len(finished):
        return None
    first_lost = finished[-trailing]
    start = min(r.sent_ns for r in finished)
    at_s = ((first_lost.end_ns or start) - start) / 1e9
    return (
        f"the target stopped answering {at_s:.1f} s into the run: the last {trailing} requests "
        "could not connect or were cut off"
    )
