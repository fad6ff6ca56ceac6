"""A disk that fills mid-run: a clear error, the records so far on disk, run.json not "running", no empty temp file;
`report` names a torn or corrupt requests.jsonl line by its number and still reads the rest."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson
import pytest

from tokspeed.backends.base import TargetInfo
from tokspeed.config import RunConfig
from tokspeed.errors import ResultsError
from tokspeed.records import RequestRecord, RequestSpec
from tokspeed.results import REQUESTS_FILE, RUN_FILE, ResultsWriter, load_run, read_records
from tokspeed.runner.run import execute_run


class Workload:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"prompt {index}", max_tokens=4)

    def describe(self) -> dict[str, object]:
        return {"kind": "fake"}


class Backend:
    """Answers at once with one chunk."""

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = perf_counter_ns()
        await asyncio.sleep(0)
        record.chunk_ns = [perf_counter_ns()]
        record.first_token_ns = record.first_content_ns = record.end_ns = record.chunk_ns[0]
        record.output_tokens, record.input_tokens = 1, 3

    async def close(self) -> None:
        pass


class Disk:
    """Room for `free` more bytes; a write that does not fit writes what fits, then fails as a full disk does."""

    def __init__(self, free: int) -> None:
        self.free = free

    def take(self, data: bytes) -> bytes:
        fits = data[: max(self.free, 0)]
        self.free -= len(fits)
        if len(fits) < len(data):
            raise_full(fits)
        return fits


class FullFile:
    def __init__(self, f: Any, disk: Disk) -> None:
        self.f, self.disk = f, disk

    def write(self, data: bytes) -> int:
        try:
            return self.f.write(self.disk.take(data))
        except _Partial as p:
            self.f.write(p.fits)
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device") from None

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()


class _Partial(Exception):
    def __init__(self, fits: bytes) -> None:
        self.fits = fits


def raise_full(fits: bytes) -> None:
    raise _Partial(fits)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    d = Disk(free=1 << 30)
    init = ResultsWriter.__init__

    def small_disk_init(self: ResultsWriter, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        self._requests = FullFile(self._requests, d)  # type: ignore[assignment]

    real_write_bytes = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:  # run.json.tmp: created, then nothing fits
        if d.free < len(data):
            real_write_bytes(self, b"")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_bytes(self, data)

    monkeypatch.setattr(ResultsWriter, "__init__", small_disk_init)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    return d


async def test_a_full_disk_ends_the_run_failed_with_its_records_and_no_temp_file(tmp_path: Path, disk: Disk) -> None:
    disk.free = 40_000  # ~56 records of ~710 bytes, then the disk is full
    out = tmp_path / "r"
    cfg = RunConfig(profile="concurrency", concurrency=4, requests=1000, warmup=0, telemetry=False)
    with pytest.raises(ResultsError, match="No space left on device") as caught:
        await execute_run(cfg, Backend(), Workload(), out)
    assert caught.value.hint and "tokspeed report" in caught.value.hint
    assert not (out / (RUN_FILE + ".tmp")).exists()
    saved = orjson.loads((out / RUN_FILE).read_bytes())
    assert saved["status"] == "failed"  # patched in place: no space was needed
    lines = (out / REQUESTS_FILE).read_bytes().split(b"\n")
    whole = lines[:-1]
    assert len(whole) > 40 and lines[-1] and not lines[-1].endswith(b"}")  # one torn line at the end, no more
    result, records = load_run(out)
    assert len(records) == len(whole)
    assert result.status == "failed" and result.benchmarks[0].summary.requests.completed == len(whole)
    assert any(f"{REQUESTS_FILE}:{len(whole) + 1}: a torn" in w for w in result.warnings)


def test_report_names_a_corrupt_line_and_reads_the_rest(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, epoch_offset_ns=0)
    for i in range(3):
        w.append(RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=0, sent_ns=10, end_ns=20))
    w.close()
    lines = (tmp_path / REQUESTS_FILE).read_bytes().splitlines()
    (tmp_path / REQUESTS_FILE).write_bytes(lines[0] + b"\n{oops\n" + lines[1] + b"\n" + lines[2][:30])
    skipped: list[str] = []
    assert [r.index for r in read_records(tmp_path / REQUESTS_FILE, skipped=skipped)] == [0, 1]
    assert [s.split(": a ")[0][-2:] for s in skipped] == [":2", ":4"]
    assert "corrupt" in skipped[0] and "torn" in skipped[1]


async def test_a_disk_that_fills_at_the_summary_keeps_the_records_and_summarises_once(tmp_path: Path, disk: Disk) -> None:
    disk.free = 40_000  # all 50 records fit (~36 KB); the summary's run.json (~17 KB) does not
    out = tmp_path / "r"
    cfg = RunConfig(profile="concurrency", concurrency=4, requests=50, warmup=0, telemetry=False)
    with pytest.raises(ResultsError, match=f"cannot write {out / RUN_FILE}: No space left on device"):
        await execute_run(cfg, Backend(), Workload(), out)
    assert not (out / (RUN_FILE + ".tmp")).exists()
    assert orjson.loads((out / RUN_FILE).read_bytes())["status"] == "failed"
    result, records = load_run(out)
    assert len(records) == 50 and len(result.benchmarks) == 1
    assert result.benchmarks[0].summary.requests.completed == 50
