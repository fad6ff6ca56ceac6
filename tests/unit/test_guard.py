"""Outcome-driven stops: --max-error-rate and the verdict that the target died mid-run."""

from __future__ import annotations

import asyncio

import pytest

from tokspeed.records import ErrorKind, RequestRecord, Status
from tokspeed.runner.guard import LOST_AFTER, ErrorRateGuard, RunStopped, run_guarded, target_lost


def rec(i: int, status: Status = Status.OK, kind: ErrorKind | None = None, warmup: bool = False) -> RequestRecord:
    r = RequestRecord(index=i, iteration=1, warmup=warmup, scheduled_ns=0, sent_ns=i * 10, end_ns=i * 10 + 5)
    r.status, r.error_kind = status, kind
    return r


def test_guard_waits_for_enough_requests_then_trips_above_the_limit() -> None:
    guard = ErrorRateGuard(0.25, min_requests=8)
    for i in range(7):
        guard.record(rec(i, Status.ERROR, ErrorKind.HTTP))  # 100% failed, but only 7 finished
    assert guard.reason is None
    guard.record(rec(7))
    assert guard.reason is not None and "7 of 8 measured requests failed (87.5%)" in guard.reason


def test_guard_ignores_warmup_cancelled_and_exactly_the_limit() -> None:
    guard = ErrorRateGuard(0.5, min_requests=4)
    for i in range(10):
        guard.record(rec(i, Status.ERROR, ErrorKind.HTTP, warmup=True))
        guard.record(rec(i, Status.INCOMPLETE))
    for i, status in enumerate([Status.OK, Status.ERROR, Status.OK, Status.ERROR]):
        guard.record(rec(i, status, ErrorKind.HTTP if status is Status.ERROR else None))
    assert guard.finished == 4 and guard.failed == 2 and guard.reason is None  # 50% is not above 0.5


def test_without_a_limit_nothing_is_counted() -> None:
    guard = ErrorRateGuard(None, min_requests=1)
    guard.record(rec(0, Status.ERROR, ErrorKind.HTTP))
    assert guard.finished == 0 and guard.reason is None


async def test_tripping_cancels_the_phase_and_raises_run_stopped() -> None:
    guard = ErrorRateGuard(0.0, min_requests=1)

    async def phase() -> None:
        await asyncio.sleep(0)
        guard.record(rec(0, Status.ERROR, ErrorKind.CONNECT))
        await asyncio.sleep(10)

    with pytest.raises(RunStopped, match="max-error-rate 0"):
        await asyncio.wait_for(run_guarded(phase(), guard), 2)


async def test_phase_errors_and_outer_cancellation_propagate() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await run_guarded(broken(), ErrorRateGuard(None))

    inner_cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            inner_cancelled.set()
            raise

    outer = asyncio.ensure_future(run_guarded(slow(), ErrorRateGuard(None)))
    await asyncio.sleep(0.01)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert inner_cancelled.is_set()


def test_target_lost_needs_trailing_connection_failures_after_a_success() -> None:
    ok = [rec(i) for i in range(10)]
    gone = [rec(10 + i, Status.ERROR, ErrorKind.CONNECT if i % 2 else ErrorKind.BROKEN) for i in range(LOST_AFTER)]
    verdict = target_lost(ok + gone)
    assert verdict is not None and f"the last {LOST_AFTER} requests" in verdict
    assert target_lost(ok + gone[:-1]) is None  # too few
    assert target_lost(gone) is None  # never answered: a different failure
    assert target_lost(ok + gone + [rec(99)]) is None  # it came back
    http = [rec(10 + i, Status.ERROR, ErrorKind.HTTP) for i in range(LOST_AFTER)]
    assert target_lost(ok + http) is None  # answering, with errors
