"""`--workers N`: which worker gets a request, how many workers a run gets, and the pool itself.

The pool tests start real worker processes (`fake_worker.py`: the real pipe loop around a
fake backend, no network), so they exercise the pipes, cancellation and a dying worker.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.worker_pool import WorkerPoolBackend, least_loaded
from tokspeed.config import RunConfig
from tokspeed.errors import BackendLost, ConfigError, TargetError
from tokspeed.load.plan import LoadPlan
from tokspeed.records import RequestRecord, RequestSpec, Status
from tokspeed.runner.executor import run_phase
from tokspeed.runner.loops import Phase
from tokspeed.runner.workers import STREAMS_PER_WORKER, check_workers, choose_workers, worker_settings

FAKE_WORKER = (sys.executable, str(Path(__file__).parent / "fake_worker.py"))


@dataclass
class W:
    in_flight: int
    assigned: int = 0
    alive: bool = True


def test_the_least_loaded_live_worker_gets_the_request() -> None:
    assert least_loaded([W(3), W(1), W(2)]) == 1
    assert least_loaded([W(1, 5), W(1, 4), W(1, 4)]) == 1  # ties: fewest assigned, then the first
    assert least_loaded([W(0, alive=False), W(2)]) == 1
    assert least_loaded([W(0, alive=False)]) is None and least_loaded([]) is None


def test_assignment_spreads_a_closed_loop_evenly() -> None:
    workers = [W(0) for _ in range(3)]
    for _ in range(7):
        w = workers[least_loaded(workers) or 0]
        w.in_flight += 1
        w.assigned += 1
    assert sorted(w.in_flight for w in workers) == [2, 2, 3]


def cfg(**kw: Any) -> RunConfig:
    return RunConfig(target="http://127.0.0.1:1/v1", **kw)


def test_auto_uses_one_process_for_few_streams_or_few_cores() -> None:
    assert choose_workers(cfg(client_workers="auto", profile="concurrency", concurrency=STREAMS_PER_WORKER), cpus=16).count == 1
    assert choose_workers(cfg(client_workers="auto", profile="concurrency", concurrency=1000), cpus=2).count == 1
    assert choose_workers(cfg(client_workers="auto"), cpus=64).count == 1  # synchronous: one stream


def test_auto_grows_with_streams_up_to_cores_minus_one() -> None:
    many = cfg(client_workers="auto", profile="concurrency", concurrency=4 * STREAMS_PER_WORKER)
    assert choose_workers(many, cpus=16).count == 4
    capped = choose_workers(many, cpus=3)
    assert capped.count == 2 and "cores − 1 = 2" in capped.reason and "--workers auto" in capped.reason
    rate = cfg(client_workers="auto", profile="rate", rate=100.0)  # an uncapped rate: 10 × R streams
    assert choose_workers(rate, cpus=64).count == -(-1000 // STREAMS_PER_WORKER)


def test_an_explicit_count_is_kept_but_never_above_the_streams() -> None:
    assert choose_workers(cfg(client_workers=3, profile="concurrency", concurrency=64)).count == 3
    few = choose_workers(cfg(client_workers=8, profile="concurrency", concurrency=2))
    assert few.count == 2 and "only 2 streams" in few.reason


@pytest.mark.parametrize("target", [None, "embedded:tiny", "hf:/models/x", "vllm:/models/x"])
def test_in_process_engines_refuse_more_workers_and_auto_means_one(target: str | None) -> None:
    with pytest.raises(ConfigError, match="--workers 2 needs an HTTP target"):
        check_workers(RunConfig(client_workers=2), [target])
    assert choose_workers(RunConfig(target=target, client_workers="auto"), cpus=64).count == 1
    check_workers(RunConfig(client_workers=2), ["http://h:1/v1"])


def test_worker_settings_carry_the_key_that_run_json_never_does() -> None:
    c = cfg(api_key="sk-SECRET", headers={"Authorization": "Bearer sk-SECRET"})
    assert worker_settings(c)["api_key"] == "sk-SECRET"
    assert RunConfig.model_validate(worker_settings(c)).api_key.get_secret_value() == "sk-SECRET"  # type: ignore[union-attr]
    assert "sk-SECRET" not in str(c.redacted_dump())


# the pool, with real worker processes ------------------------------------------------
class Probe:
    """The parent's own backend: it only probes."""

    def __init__(self) -> None:
        self.closed = False

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="found-model", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        raise AssertionError("the parent's backend never sends")

    async def close(self) -> None:
        self.closed = True


def pool(workers: int = 2, **settings: Any) -> WorkerPoolBackend:
    return WorkerPoolBackend(Probe(), workers=workers, settings=settings, pool_size=4, command=FAKE_WORKER,
                             reason="test")


def record(index: int) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=index)


async def send_all(p: WorkerPoolBackend, n: int) -> list[RequestRecord]:
    records = [record(i) for i in range(n)]
    await asyncio.gather(*(p.send(RequestSpec(index=i, prompt="p", max_tokens=4), records[i]) for i in range(n)))
    return records


async def test_a_pool_sends_each_request_once_through_its_workers_and_closes_them() -> None:
    p = pool(workers=2, delay_s=0.02, print="stray output must not reach the pipe")
    info = await p.start()
    assert info.model == "found-model" and info.extra["client_workers"] == 2 and "2 client worker" in info.notes[-1]
    procs = [w.proc for w in p._workers]
    records = await send_all(p, 40)
    await p.close()
    assert all(r.ok and r.output_tokens == 4 and r.max_tokens == 4 for r in records)
    ids = [r.response_id or "" for r in records]
    assert sorted(int(i.split("-")[1]) for i in ids) == list(range(40))  # each index once
    assert {i.split("-")[0] for i in ids} == {"w1", "w2"}  # both workers served
    assert all(r.chunk_ns[0] - r.sent_ns == 1000 and r.end_ns == r.sent_ns + 1600 for r in records)
    assert all(proc.returncode == 0 for proc in procs)


async def test_a_cancelled_request_comes_back_incomplete_from_its_worker() -> None:
    p = pool(workers=1, delay_s=30)
    await p.start()
    r = record(1)
    task = asyncio.ensure_future(p.send(RequestSpec(index=1, prompt="p"), r))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await p.close()
    assert r.status is Status.INCOMPLETE and r.error == "cancelled before completion" and r.sent_ns > 0


async def test_a_worker_that_dies_fails_its_requests_and_stops_the_run() -> None:
    p = pool(workers=2, delay_s=1.0, exit_on=3)
    await p.start()
    records = [record(i) for i in range(6)]
    results = await asyncio.gather(*(p.send(RequestSpec(index=i, prompt="p"), records[i]) for i in range(6)),
                                   return_exceptions=True)
    lost = [e for e in results if isinstance(e, BackendLost)]
    assert lost and "exited (exit status 3): the run stopped" in str(lost[0])
    died = [r for r in records if r.status is Status.ERROR]
    assert died and all("client worker" in (r.error or "") and r.sent_ns > 0 and r.end_ns for r in died)
    assert sum(r.ok for r in records) == 6 - len(died)  # the other worker's requests finished
    with pytest.raises(BackendLost):  # nothing more is sent
        await p.send(RequestSpec(index=9, prompt="p"), record(9))
    await p.close()


async def test_a_worker_that_cannot_start_fails_the_start_and_leaves_no_process() -> None:
    p = pool(workers=2, fail_start=True)
    with pytest.raises(TargetError, match=r"client worker \d could not start: the target said no") as err:
        await p.start()
    assert err.value.hint == "fix the target" and p._workers == []


async def test_the_parent_dying_closes_the_workers_pipes_and_they_exit() -> None:
    p = pool(workers=1)
    await p.start()
    proc = p._workers[0].proc
    assert proc.stdin is not None
    proc.stdin.close()  # what the kernel does when the parent dies, however it dies
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    await p.close()


async def test_workers_ignore_sigint() -> None:
    p = pool(workers=1, delay_s=0.2)
    await p.start()
    proc = p._workers[0].proc
    proc.send_signal(signal.SIGINT)
    r = record(0)
    await p.send(RequestSpec(index=0, prompt="p"), r)
    assert r.ok and proc.returncode is None
    await p.close()


# the executor stops a phase on BackendLost ---------------------------------------------
class LosingBackend:
    """Fine until request `lose_at`, which it fails (record filled) with BackendLost; so is every later one."""

    def __init__(self, lose_at: int) -> None:
        self.lose_at, self.lost = lose_at, False

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        from time import perf_counter_ns

        record.sent_ns = perf_counter_ns()
        if spec.index == self.lose_at or self.lost:
            self.lost = True
            record.status, record.error, record.end_ns = Status.ERROR, "worker gone", perf_counter_ns()
            raise BackendLost("client worker 1 of 1 exited")
        await asyncio.sleep(0.005)
        record.end_ns = perf_counter_ns()

    async def close(self) -> None:
        pass


class Specs:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt="p")


@pytest.mark.parametrize("plan", [
    LoadPlan(kind="concurrency", workers=4),
    LoadPlan(kind="rate", rate=2000.0, arrival="constant"),
])
async def test_a_lost_backend_stops_the_phase_and_every_record_is_kept(plan: LoadPlan) -> None:
    out: list[RequestRecord] = []
    with pytest.raises(BackendLost, match="exited"):
        await run_phase(plan, Phase(1, False, 1000, None), LosingBackend(lose_at=20), Specs(), out.append)
    assert 20 < len(out) < 1000  # stopped early, not at the end of the schedule
    assert len({r.index for r in out}) == len(out)  # each request once
    assert any(r.error == "worker gone" for r in out)
