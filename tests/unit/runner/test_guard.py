"""Outcome-driven stops: --max-error-rate and the verdict that the target died mid-run."""

from __future__ import annotations

import asyncio
import random

import pytest

from tokspeed.records import ErrorKind, RequestRecord, Status
from tokspeed.runner.guard import (
    LOST_AFTER,
    STREAK_KEEP,
    ErrorRateGuard,
    RunStopped,
    TargetWatch,
    run_guarded,
    target_lost,
)


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


def _sorted_verdict(records: list[RequestRecord]) -> str | None:
    """The verdict by brute force: sort everything, scan back, count the failures sent after the last answer."""
    finished = sorted(
        (r for r in records if not r.warmup and r.status is not Status.INCOMPLETE and r.end_ns is not None),
        key=lambda r: r.end_ns or 0,
    )
    trailing = 0
    for r in reversed(finished):
        if r.status is not Status.ERROR or r.error_kind not in (ErrorKind.CONNECT, ErrorKind.BROKEN):
            break
        trailing += 1
    if trailing == len(finished):
        return None
    quiet = finished[-trailing - 1].end_ns or 0
    counted = [r for r in finished[len(finished) - trailing:] if r.sent_ns >= quiet]
    if len(counted) < LOST_AFTER:
        return None
    start = min(r.sent_ns for r in finished)
    at_s = ((counted[0].end_ns or start) - start) / 1e9
    return (
        f"the target stopped answering {at_s:.1f} s into the run: the last {len(counted)} requests, "
        "sent after its last answer, could not connect or were cut off"
    )


def at(end_ms: int, status: Status = Status.OK, kind: ErrorKind | None = None, sent_ms: int | None = None,
       warmup: bool = False) -> RequestRecord:
    """A record that ended at `end_ms`, sent at `sent_ms` (default: when it ended, as a refused connect is)."""
    sent_ms = end_ms if sent_ms is None else sent_ms
    r = RequestRecord(index=end_ms, iteration=1, warmup=warmup, scheduled_ns=0, sent_ns=sent_ms * 1_000_000,
                      end_ns=end_ms * 1_000_000)
    r.status, r.error_kind = status, kind
    return r


def fed(records: list[RequestRecord]) -> str | None:
    watch = TargetWatch()
    for r in records:
        watch.record(r)
    return watch.verdict()


GONE = (Status.ERROR, ErrorKind.CONNECT)
CRAFTED = {
    "lost after successes": [at(i * 10, sent_ms=i) for i in range(5)] + [at(100 + i, *GONE) for i in range(6)],
    "too few failures": [at(10), *[at(100 + i, *GONE) for i in range(LOST_AFTER - 1)]],
    "never answered": [at(100 + i, *GONE) for i in range(8)],
    "came back": [at(10), *[at(100 + i, *GONE) for i in range(6)], at(200)],
    "http errors are answers": [at(10), *[at(100 + i, Status.ERROR, ErrorKind.HTTP) for i in range(6)]],
    "an http error before the failures counts as not lost": [at(10, Status.ERROR, ErrorKind.HTTP),
                                                              *[at(100 + i, *GONE) for i in range(5)]],
    # fed out of end order: a success that ended before the last failures but arrived after them
    "late success in the middle": [at(10), *[at(100 + i, *GONE) for i in range(10)], at(103)],
    "late success after all": [at(10), *[at(100 + i, *GONE) for i in range(8)], at(150)],
    "late failure before the success": [at(50), *[at(100 + i, *GONE) for i in range(5)], at(20, *GONE)],
    "late first failure": [at(10), *[at(100 + i, *GONE) for i in range(5)], at(60, *GONE, sent_ms=1)],
    # ties on end time: the one fed later sorts after
    "tie, failure fed after success": [at(10), at(100), *[at(100, *GONE) for _ in range(5)]],
    "tie, success fed after failures": [at(10), *[at(100, *GONE) for _ in range(5)], at(100)],
    "warm-up, cancelled and end-less records are ignored": [
        at(10), *[at(100 + i, *GONE) for i in range(5)], at(300, warmup=True),
        at(301, Status.INCOMPLETE), RequestRecord(index=9, iteration=1, warmup=False, scheduled_ns=0),
    ],
    "earliest start from a late record": [at(50, sent_ms=40), *[at(100 + i, *GONE, sent_ms=60) for i in range(5)],
                                          at(30, sent_ms=5)],
    "end at zero": [at(0), at(0, *GONE), *[at(1, *GONE) for _ in range(5)]],
    # a live server whose failures finish after its successes: streams that stalled, then reset
    "stalled failures sent before the last answer": [*[at(10 + i) for i in range(20)],
                                                    *[at(2000 + i, Status.ERROR, ErrorKind.BROKEN, sent_ms=i)
                                                      for i in range(12)]],
    "mixed: only those sent after the last answer count": [at(50), *[at(100 + i, *GONE, sent_ms=i) for i in range(9)],
                                                           *[at(200 + i, *GONE) for i in range(LOST_AFTER)]],
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_target_watch_gives_the_sorted_verdict_on_crafted_sequences(name: str) -> None:
    records = CRAFTED[name]
    assert fed(records) == _sorted_verdict(records) == target_lost(records)


def test_target_watch_gives_the_sorted_verdict_on_shuffled_runs() -> None:
    rng = random.Random(5)
    kinds = [(Status.OK, None), GONE, (Status.ERROR, ErrorKind.BROKEN), (Status.ERROR, ErrorKind.HTTP),
             (Status.INCOMPLETE, None)]
    lost = 0
    for _ in range(2000):
        n = rng.randint(0, 40)
        died = rng.randint(0, 60)  # requests ending after this mostly fail to connect
        records = []
        for _ in range(n):
            end = rng.randint(0, 60)
            status, kind = GONE if end >= died and rng.random() < 0.9 else rng.choice(kinds)
            sent = rng.randint(min(died, end), end) if kind in (ErrorKind.CONNECT, ErrorKind.BROKEN) else rng.randint(0, end)
            records.append(at(end, status, kind, sent_ms=sent, warmup=rng.random() < 0.05))
        # fed roughly in end order, with some records delivered late
        records.sort(key=lambda r: (r.end_ns or 0) + rng.randint(0, 3) * 1_000_000)
        verdict = fed(records)
        assert verdict == _sorted_verdict(records)
        lost += verdict is not None
    assert lost > 100  # the generator exercised the lost case


def test_a_live_server_whose_failures_finish_after_its_successes_is_not_lost() -> None:
    """20% of streams stall 2 s then reset: they end last, but were all sent before the last answer."""
    ok = [at(10 + i * 10, sent_ms=i * 10) for i in range(80)]
    stalled = [at(2000 + i * 10, Status.ERROR, ErrorKind.BROKEN, sent_ms=i * 10) for i in range(60, 80)]
    assert target_lost(ok + stalled) is None
    # the same server dying: the requests sent after its last answer fail to connect
    refused = [at(900 + i, *GONE) for i in range(LOST_AFTER)]
    assert target_lost(ok + refused) is not None


def test_target_watch_counts_a_long_streak_in_bounded_memory() -> None:
    records = [at(1), *[at(10 + i, *GONE) for i in range(STREAK_KEEP * 3)]]
    watch = TargetWatch()
    for r in records:
        watch.record(r)
    assert len(watch.streak) <= STREAK_KEEP
    assert watch.verdict() == _sorted_verdict(records)
    watch.record(at(10 + STREAK_KEEP * 3))  # it came back
    assert watch.verdict() is None and not watch.streak and not watch.older
