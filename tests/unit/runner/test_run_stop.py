"""Stopping a run from outside: one stop cancels the load; a second one, or one while summarising, cuts nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from time import perf_counter_ns

import pytest

from tokspeed.backends.base import TargetInfo
from tokspeed.config import RunConfig
from tokspeed.records import RequestRecord, RequestSpec
from tokspeed.results import load_run
from tokspeed.runner.run import Interrupt, NullObserver, execute_run


class Workload:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"prompt {index}", max_tokens=4)

    def describe(self) -> dict[str, object]:
        return {"kind": "fake"}


class Backend:
    """Answers in 1 ms; `close` takes a while (as stopping client workers does)."""

    def __init__(self) -> None:
        self.sent = 0

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        self.sent += 1
        record.sent_ns = perf_counter_ns()
        await asyncio.sleep(0.001)
        record.chunk_ns = [perf_counter_ns()]
        record.first_token_ns = record.first_content_ns = record.end_ns = record.chunk_ns[0]
        record.output_tokens, record.input_tokens = 1, 3

    async def close(self) -> None:
        await asyncio.sleep(0.05)


class StopWhen(NullObserver):
    """Asks the run to stop at a given moment, as a signal handler would: through `stop` (sync)."""

    def __init__(self, stop: object, at: str, after: int = 0) -> None:
        self.stop, self.at, self.after, self.seen = stop, at, after, 0

    def record(self, record: RequestRecord) -> None:
        self.seen += 1
        if self.at == "load" and self.seen == self.after:
            self.stop()  # type: ignore[operator]
            self.stop()  # a second signal at once

    def summarising(self, label: str, requests: int) -> None:
        if self.at == "summary":
            self.stop()  # type: ignore[operator]


CFG = RunConfig(profile="concurrency", concurrency=4, requests=200, warmup=0, telemetry=False)


@pytest.mark.parametrize("at", ["load", "summary"])
async def test_a_stop_once_or_twice_ends_interrupted_with_no_cancellation_escaping(tmp_path: Path, at: str) -> None:
    interrupt = Interrupt()
    backend = Backend()
    outcome = await execute_run(CFG, backend, Workload(), tmp_path / "r", StopWhen(interrupt.request, at, after=30),
                                interrupt=interrupt)
    assert outcome.result.status == "interrupted"
    saved, _ = load_run(tmp_path / "r")
    assert saved.status == "interrupted" and saved.benchmarks  # what was measured is summarised
    assert not list((tmp_path / "r").glob("*.tmp"))
    if at == "load":
        assert backend.sent < 200
    else:
        assert saved.benchmarks[0].summary.requests.completed == 200


@pytest.mark.parametrize("at", ["load", "summary"])
async def test_cancelling_the_caller_once_or_twice_keeps_the_outcome(tmp_path: Path, at: str) -> None:
    """A library caller cancelling the run's task (twice, the second during the wind-up) gets the outcome back."""
    holder: list[asyncio.Task[object]] = []

    def cancel() -> None:
        holder[0].cancel()

    task = asyncio.ensure_future(execute_run(CFG, Backend(), Workload(), tmp_path / "r", StopWhen(cancel, at, 30)))
    holder.append(task)  # type: ignore[arg-type]
    outcome = await task
    assert outcome.result.status == "interrupted"
    assert load_run(tmp_path / "r")[0].status == "interrupted"


def test_timed_phases_and_their_warm_up_are_cut_a_grace_after_the_duration() -> None:
    from tokspeed.runner.loops import Phase
    from tokspeed.runner.run import _Cut, duration_grace_s

    timed = RunConfig(duration_s=4, warmup=8)
    assert duration_grace_s(timed) == 10  # at least DURATION_GRACE_MIN_S
    assert duration_grace_s(RunConfig(duration_s=300)) == 300  # as long again as the duration
    assert duration_grace_s(RunConfig(duration_s=300, timeout_s=30)) == 30  # never past --timeout
    assert duration_grace_s(RunConfig(requests=10)) is None
    cut = _Cut(duration_grace_s(timed))
    warmup = Phase(iteration=0, warmup=True, n=8, duration_s=None)
    measured = Phase(iteration=1, warmup=False, n=None, duration_s=4, lead_s=2)
    assert cut.limit_s(warmup, timed) == 14 and cut.limit_s(measured, timed) == 16
    assert _Cut(None).limit_s(measured, RunConfig(requests=10)) is None


async def test_a_phase_past_its_limit_is_cut_and_its_requests_in_flight_say_why(tmp_path: Path) -> None:
    from tokspeed.records import Status
    from tokspeed.runner.run import _Cut

    cut = _Cut(0.05)
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)

    async def stalled() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            record.status = Status.INCOMPLETE
            cut.mark(record)

    await asyncio.wait_for(cut.run(stalled(), 0.05), 5)
    assert cut.count == 1 and record.error == "cut off: still in flight 0.05 s after --duration ended"
