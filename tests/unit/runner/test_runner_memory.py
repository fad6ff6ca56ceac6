"""The runner keeps no records in memory: they go to requests.jsonl and each point is read back."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import TargetInfo
from tokspeed.config import RunConfig
from tokspeed.records import RequestRecord, RequestSpec, Status
from tokspeed.results import REQUESTS_FILE, ResultsWriter, load_run, read_records
from tokspeed.runner.run import LoadPoint, PointSource, SampleKeeper, execute_points


class Workload:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"prompt {index}", max_tokens=4)

    def describe(self) -> dict[str, object]:
        return {"kind": "fake"}


def live_records() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is RequestRecord)


class CountingBackend:
    """Answers at once with four chunks; counts the live RequestRecords at two requests."""

    def __init__(self, probe_at: tuple[int, int]) -> None:
        self.probe_at = probe_at
        self.sent = 0
        self.live: list[int] = []

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        self.sent += 1
        if self.sent in self.probe_at:
            self.live.append(live_records())
        record.sent_ns = perf_counter_ns()
        await asyncio.sleep(0)
        record.chunk_ns = [perf_counter_ns() + i for i in range(4)]
        record.first_token_ns = record.first_content_ns = record.chunk_ns[0]
        record.end_ns = record.chunk_ns[-1]
        record.output_tokens, record.input_tokens = 4, 3
        record.output_text = f"answer {spec.index}"

    async def close(self) -> None:
        pass


def points(*backends: CountingBackend, requests: int = 300) -> PointSource:
    for i, backend in enumerate(backends):
        cfg = RunConfig(profile="concurrency", concurrency=4, requests=requests + i, warmup=2)
        yield LoadPoint(f"point {i}", cfg, backend, Workload())
    return None


async def test_records_do_not_accumulate_while_a_run_goes_on(tmp_path: Path) -> None:
    first, second = CountingBackend(probe_at=(50, 290)), CountingBackend(probe_at=(50, 290))
    cfg = RunConfig(profile="concurrency", concurrency=4, requests=300, warmup=2)
    outcome = await execute_points(cfg, points(first, second), tmp_path / "run")
    assert outcome.result.status == "complete"
    for backend in (first, second):
        early, late = backend.live
        assert late - early < 20, backend.live  # 240 requests later: only the ones in flight are alive
    assert outcome.requests == 302 + 303
    records = outcome.load_records()
    assert len(records) == outcome.requests
    assert [b.summary.requests.completed for b in outcome.result.benchmarks] == [300, 301]
    assert [s.response for s in outcome.result.samples] == ["answer 0", "answer 1", "answer 2"]
    assert outcome.result.samples[0].prompt == "prompt 0"
    saved, _ = load_run(tmp_path / "run")
    assert [b.model_dump_json() for b in saved.benchmarks] == [b.model_dump_json() for b in outcome.result.benchmarks]


def test_read_records_by_point_and_from_an_offset(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, epoch_offset_ns=0)
    offsets = []
    for point in range(3):
        offsets.append(w.position())
        for i in range(4):
            r = RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=0, sent_ns=1, end_ns=2)
            r.benchmark = point
            w.append(r)
    path = tmp_path / REQUESTS_FILE
    assert [r.benchmark for r in read_records(path, benchmark=1)] == [1] * 4
    assert [r.benchmark for r in read_records(path, offset=offsets[2])] == [2] * 4
    assert [r.benchmark for r in read_records(path, benchmark=1, offset=offsets[1])] == [1] * 4
    assert len(read_records(path)) == 12
    w.close()


def test_sample_keeper_keeps_the_first_responses_by_iteration_and_index() -> None:
    keeper = SampleKeeper(limit=2)

    def rec(iteration: int, index: int, text: str | None = "t", status: Status = Status.OK,
            warmup: bool = False) -> RequestRecord:
        r = RequestRecord(index=index, iteration=iteration, warmup=warmup, scheduled_ns=0, output_text=text)
        r.status = status
        return r

    for r in (rec(2, 0, "late iteration"), rec(1, 5, "i5"), rec(0, 0, "warm", warmup=True), rec(1, 1, None),
              rec(1, 0, "failed", Status.ERROR), rec(1, 3, "i3"), rec(1, 4, "i4")):
        keeper.record(r)
    assert [(s.index, s.response) for s in keeper.samples(Workload())] == [(3, "i3"), (4, "i4")]
    assert len(keeper._kept) == 2


async def test_the_end_of_point_summary_holds_a_batch_not_the_point(tmp_path: Path, monkeypatch: Any) -> None:
    """The summary streams the point back from disk: the live records peak at a batch (a list of the point held 1,200)."""
    from tokspeed.metrics import summary as summary_module

    monkeypatch.setattr(summary_module, "_BATCH_RECORDS", 100)
    peak: list[int] = []
    flush = summary_module.SummaryBuilder._flush

    def counting_flush(self: Any) -> None:
        peak.append(live_records())
        flush(self)

    monkeypatch.setattr(summary_module.SummaryBuilder, "_flush", counting_flush)
    before = live_records()  # other tests' records may still be alive
    cfg = RunConfig(profile="concurrency", concurrency=4, requests=1_200, warmup=2)
    outcome = await execute_points(cfg, points(CountingBackend(probe_at=()), requests=1_200), tmp_path / "run")
    assert outcome.result.benchmarks[0].summary.requests.completed == 1_200
    assert peak and max(peak) - before <= 110, (max(peak), before)


async def test_a_failing_digest_costs_the_diagnosis_not_the_run(tmp_path: Path, monkeypatch: Any) -> None:
    from tokspeed.diagnosis.digest import PointDigest

    def broken(self: Any, r: RequestRecord) -> None:
        raise RuntimeError("digest bug")

    monkeypatch.setattr(PointDigest, "add", broken)
    cfg = RunConfig(profile="concurrency", concurrency=4, requests=40, warmup=2)
    outcome = await execute_points(cfg, points(CountingBackend(probe_at=()), requests=40), tmp_path / "run")
    assert outcome.result.status == "complete"
    assert outcome.result.benchmarks[0].summary.requests.completed == 40
    assert any("the diagnosis of point 0 failed (RuntimeError: digest bug)" in n for n in outcome.result.warnings), outcome.result.warnings
