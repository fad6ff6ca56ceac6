"""The results-file contract: the shipped JSON Schema, a saved v1 run, and robust reading."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import orjson
import pytest

from locations import RUN_V1
from tokspeed.errors import ConfigError, ResultsError
from tokspeed.records import RequestRecord, Status
from tokspeed.results import (
    REQUESTS_FILE,
    RUN_FILE,
    SCHEMA,
    SCHEMA_FILE,
    ResultsWriter,
    load_run,
    read_records,
    run_json_schema,
)


def test_shipped_schema_matches_the_models() -> None:
    """Regenerate with: python -c 'from tokspeed.results import write_schema_file; write_schema_file()'."""
    assert orjson.loads(SCHEMA_FILE.read_bytes()) == orjson.loads(orjson.dumps(run_json_schema()))


def test_saved_v1_run_validates_and_loads() -> None:
    data = orjson.loads((RUN_V1 / RUN_FILE).read_bytes())
    assert data["schema"] == SCHEMA
    jsonschema.validate(data, orjson.loads(SCHEMA_FILE.read_bytes()))
    result, records = load_run(RUN_V1)
    assert result.status == "complete"
    bench = result.benchmarks[0]
    assert bench.summary.requests.completed == 12 and len(bench.iterations) == 2
    assert {"ttft_p99_ms", "output_tokens_per_s", "error_rate"} <= bench.summary.flat().keys()
    assert len([r for r in records if not r.warmup]) == 12


def test_summary_keys_promised_by_the_design() -> None:
    s = orjson.loads((RUN_V1 / RUN_FILE).read_bytes())["benchmarks"][0]["summary"]
    assert set(s["requests"]) >= {"completed", "errored", "incomplete"}
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "input_tokens", "output_tokens"):
        assert set(s[key]) == {"count", "mean", "stdev", "min", "p50", "p90", "p95", "p99", "p999", "max"}
    assert set(s["throughput"]) >= {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"}
    assert s["goodput"] is not None


def test_rebuild_without_run_json_matches(tmp_path: Path) -> None:
    shutil.copy(RUN_V1 / REQUESTS_FILE, tmp_path / REQUESTS_FILE)
    rebuilt, _ = load_run(tmp_path)
    original, _ = load_run(RUN_V1)
    assert rebuilt.benchmarks[0].summary.ttft_ms == original.benchmarks[0].summary.ttft_ms
    assert rebuilt.status == "interrupted" and rebuilt.warnings


def test_torn_last_line_is_skipped_but_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    lines = (RUN_V1 / REQUESTS_FILE).read_bytes().splitlines()
    (tmp_path / REQUESTS_FILE).write_bytes(b"\n".join(lines) + b"\n" + lines[0][:40])
    assert len(read_records(tmp_path / REQUESTS_FILE)) == len(lines)
    (tmp_path / REQUESTS_FILE).write_bytes(lines[0] + b"\n{oops\n" + lines[1] + b"\n")
    with pytest.raises(ResultsError, match=":2:"):
        read_records(tmp_path / REQUESTS_FILE)


def test_writer_appends_and_flushes_each_record(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "out", epoch_offset_ns=1_000)
    r = RequestRecord(index=3, iteration=1, warmup=False, scheduled_ns=10, sent_ns=20, first_token_ns=50,
                      end_ns=90, chunk_ns=[50, 70, 90], output_tokens=3)
    w.append(r)
    on_disk = read_records(tmp_path / "out" / REQUESTS_FILE)  # readable before close: flushed
    assert on_disk[0].sent_ns == 1_020 and on_disk[0].chunk_ns == [1_050, 1_070, 1_090]
    assert on_disk[0].first_token_ns == 1_050 and on_disk[0].status is Status.OK
    w.close()


def test_writer_refuses_an_existing_run(tmp_path: Path) -> None:
    ResultsWriter(tmp_path, epoch_offset_ns=0).close()
    with pytest.raises(ConfigError, match="already holds a run"):
        ResultsWriter(tmp_path, epoch_offset_ns=0)
    ResultsWriter(tmp_path, epoch_offset_ns=0, overwrite=True).close()


def test_unwritable_out_dir_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write results"):  # exit 2: the user must change --out
        ResultsWriter(blocker / "sub", epoch_offset_ns=0)


def test_unknown_schema_is_refused(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text('{"schema": "tokspeed.run/99"}')
    with pytest.raises(ResultsError, match="tokspeed.run/99"):
        load_run(tmp_path)
