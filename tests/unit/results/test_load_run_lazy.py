"""load_run(with_records=False): the summaries of a finished run without reading its requests."""

from __future__ import annotations

from pathlib import Path

from tokspeed.records import RequestRecord
from tokspeed.results import REQUESTS_FILE, ResultsWriter, RunResult, StoredRecords, load_run


def _saved(tmp_path: Path, status: str) -> Path:
    writer = ResultsWriter(tmp_path, epoch_offset_ns=0)
    for i in range(5):
        writer.append(RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=1, sent_ns=1, end_ns=2))
    writer.write_run(RunResult(status=status, started_at="now"))  # type: ignore[arg-type]
    writer.close()
    return tmp_path


def test_a_finished_run_loads_without_its_records(tmp_path: Path) -> None:
    directory = _saved(tmp_path, "complete")
    result, records = load_run(directory, with_records=False)
    assert result.status == "complete" and records == []
    assert len(load_run(directory)[1]) == 5
    assert len(list(StoredRecords(directory / REQUESTS_FILE))) == 5  # what diagnose streams instead


def test_a_run_that_never_finished_is_still_rebuilt_from_its_records(tmp_path: Path) -> None:
    result, records = load_run(_saved(tmp_path, "running"), with_records=False)
    assert result.status == "interrupted" and len(records) == 5
    assert result.benchmarks and result.benchmarks[0].summary.requests.total == 5
