"""Stop conditions that watch outcomes rather than the clock.

`ErrorRateGuard` implements `--max-error-rate`: once at least `min_requests` measured
requests have finished (ok or error; cancelled ones do not count), a failed fraction above
the limit cancels the phase in progress, and `run_guarded` turns that into `RunStopped`.
`TargetWatch` gives the verdict after a load point: the last requests all failed to connect or
were cut off, after earlier ones did not, and enough of them were *sent after the target's last
answer* — the target died mid-run. A live server whose failures merely finish after its
successes (streams that stall, then reset; slow disconnects) answered after those requests
were sent, so they do not count: only requests sent once it had gone quiet say it is gone. It is fed each record as it
finishes and keeps only what the verdict needs, so a long run holds no records for it;
`target_lost` is the same verdict over a list of records.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right, insort
from collections.abc import Coroutine, Iterable
from typing import Any

from tokspeed.config import MAX_ERROR_RATE_MIN_REQUESTS
from tokspeed.records import ErrorKind, RequestRecord, Status

LOST_AFTER = 5  # this many trailing connection failures sent after the last answer mean the target went away
_GONE = (ErrorKind.CONNECT, ErrorKind.BROKEN)
STREAK_KEEP = 4096  # end times of trailing failures kept one by one; older ones are only counted
_LAST = 1 << 63  # sorts after any sent_ns at the same end_ns


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
        if self.limit is None or record.warmup or record.status in (Status.INCOMPLETE, Status.CANCELLED):
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


class TargetWatch:
    """`target_lost`, fed one finished record at a time, without keeping the records.

    The verdict orders measured, finished requests by end time (ties: in the order they were
    fed). It needs only: the earliest `sent_ns`, the end of the latest request that did not fail
    to connect or break off (`last_other`, the target's last answer; None while there is none),
    and the (end, sent) times of the connect/broken failures ordered after it (`streak`, sorted
    by end). Of the streak, only failures sent at or after `last_other` count: a request sent
    before the target's last answer and failing after it (a stream that stalled, then reset)
    says nothing about the target being gone. A record fed late, with an end before some
    already in the streak, is placed where the sort would put it, so the verdict is the same as
    sorting them all. Only the last STREAK_KEEP entries of a long streak are kept; the older
    ones are counted (`older`, with their earliest end and earliest send): they count only if
    even the earliest of them was sent after the last answer (a conservative shortcut that
    matters only after thousands of trailing failures).
    """

    __slots__ = ("last_other", "older", "older_first_ns", "older_sent_ns", "start_ns", "streak")

    def __init__(self) -> None:
        self.start_ns: int | None = None
        self.last_other: int | None = None
        self.streak: list[tuple[int, int]] = []  # (end_ns, sent_ns), sorted
        self.older = 0
        self.older_first_ns = 0
        self.older_sent_ns = 0

    def record(self, r: RequestRecord) -> None:
        """Count one finished request (warm-up, cancelled and end-less ones are ignored)."""
        end = r.end_ns
        if r.warmup or r.status in (Status.INCOMPLETE, Status.CANCELLED) or end is None:
            return
        self.start_ns = r.sent_ns if self.start_ns is None else min(self.start_ns, r.sent_ns)
        if self.last_other is not None and end < self.last_other:
            return  # ends before the latest success-or-other-error: never part of the trailing run
        if r.status is Status.ERROR and r.error_kind in _GONE:
            insort(self.streak, (end, r.sent_ns))
            if len(self.streak) > STREAK_KEEP:
                first_end, first_sent = self.streak[0]
                if self.older:
                    self.older_first_ns = min(self.older_first_ns, first_end)
                    self.older_sent_ns = min(self.older_sent_ns, first_sent)
                else:
                    self.older_first_ns, self.older_sent_ns = first_end, first_sent
                self.older += 1
                del self.streak[0]
            return
        self.last_other = end
        cut = bisect_right(self.streak, (end, _LAST))  # failures that ended by now (or fed before, at the same ns)
        if cut:
            self.older = 0
            del self.streak[:cut]

    def verdict(self) -> str | None:
        """Why the target looks lost so far, or None (the message `target_lost` gives)."""
        if self.last_other is None or self.start_ns is None:
            return None
        quiet = self.last_other
        ends = [end for end, sent in self.streak if sent >= quiet]
        older = self.older if self.older and self.older_sent_ns >= quiet else 0
        trailing = older + len(ends)
        if trailing < LOST_AFTER:
            return None
        first_end = self.older_first_ns if older else min(ends)
        at_s = ((first_end or self.start_ns) - self.start_ns) / 1e9
        return (
            f"the target stopped answering {at_s:.1f} s into the run: the last {trailing} requests, "
            "sent after its last answer, could not connect or were cut off"
        )


def target_lost(records: Iterable[RequestRecord]) -> str | None:
    """Why the run looks like its target died mid-run, or None.

    True when, of the trailing finished measured requests (by end time) that all failed to
    connect or broke off, LOST_AFTER or more were sent after the last request before them that
    did not (the target's last answer), and there was such a request.
    """
    watch = TargetWatch()
    for r in records:
        watch.record(r)
    return watch.verdict()
