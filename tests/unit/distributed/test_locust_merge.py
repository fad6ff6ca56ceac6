"""Distributed runs without Locust: the worker's batches, the master's merge into a results directory,
the `--tokspeed-*` options that travel from master to workers, and how Locust load maps to profiles."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from locations import DOCS
from tokspeed.distributed.batching import ClockAnchor, RecordBatcher
from tokspeed.distributed.master import finish_run, open_merger, profile_for
from tokspeed.distributed.merge import RecordMerger
from tokspeed.distributed.options import INDEX_STRIDE, LocustOptions, request_index
from tokspeed.records import ErrorKind, RequestRecord, Status
from tokspeed.results import RunResult, load_run

MS = 1_000_000


def record(index: int, sent: int, ttft_ms: float = 50, itl_ms: float = 10, tokens: int = 5,
           late_ms: float = 0, status: Status = Status.OK) -> RequestRecord:
    """A record on some worker's monotonic clock (ns)."""
    first = sent + int(ttft_ms * MS)
    chunks = [first + int(i * itl_ms * MS) for i in range(tokens)]
    r = RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=sent - int(late_ms * MS), sent_ns=sent,
                      first_token_ns=first, first_content_ns=first, end_ns=chunks[-1], chunk_ns=chunks,
                      output_tokens=tokens, input_tokens=8, status=status)
    if status is Status.ERROR:
        r.error_kind, r.error = ErrorKind.HTTP, "HTTP 500"
    return r


def test_neither_locust_nor_gevent_is_imported_by_tokspeed() -> None:
    code = ("import sys, tokspeed.cli, tokspeed.distributed.master, tokspeed.distributed.sync_http; "
            "from tokspeed.cli import main; main(['locust', '--help']); "
            "print(sorted(m for m in ('tokspeed.distributed.locustfile', 'locust', 'gevent') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_a_batch_is_due_after_the_interval_or_when_full() -> None:
    b = RecordBatcher(worker_id="w", anchor=ClockAnchor(wall_ns=10**18, mono_ns=0), interval_s=0.5, max_records=3)
    assert not b.due()  # nothing to send
    b.add(record(0, 1_000))
    t0 = b._last_sent
    assert not b.due(now=t0 + 0.1) and b.due(now=t0 + 0.5)
    b.add(record(1, 2_000))
    b.add(record(2, 3_000))
    assert b.due(now=t0)  # full
    payload = b.take(worker_index=3, cpu_percent=12.5)
    assert [r["index"] for r in payload["records"]] == [0, 1, 2] and b.pending == 0 and not b.due(now=t0 + 9)
    assert payload["index"] == 3 and payload["cpu_percent"] == 12.5 and payload["final"] is False
    assert b.take(3, None, final=True)["records"] == [] and b.sent_records == 3


def test_records_travel_on_the_epoch_scale_of_their_own_worker() -> None:
    a = RecordBatcher(worker_id="a", anchor=ClockAnchor(wall_ns=1_700_000_000 * 10**9, mono_ns=5 * 10**9))
    b = RecordBatcher(worker_id="b", anchor=ClockAnchor(wall_ns=1_700_000_000 * 10**9, mono_ns=900 * 10**9))
    a.add(record(0, 6 * 10**9))
    b.add(record(1, 901 * 10**9))
    ra, rb = a.take(0, None)["records"][0], b.take(1, None)["records"][0]
    # both were sent 1 s after their worker's anchor: the same wall time, whatever the monotonic clocks said
    assert ra["sent_ns"] == rb["sent_ns"] == 1_700_000_001 * 10**9
    assert ra["first_token_ns"] - ra["sent_ns"] == 50 * MS == rb["first_token_ns"] - rb["sent_ns"]


def skeleton() -> RunResult:
    return RunResult.model_validate({"started_at": "2026-01-01T00:00:00+00:00", "config": {"profile": "concurrency"}})


def batches(n_a: int, n_b: int) -> tuple[list[dict], list[dict]]:
    a = RecordBatcher(worker_id="a", anchor=ClockAnchor(wall_ns=1_700_000_000 * 10**9, mono_ns=0), host="h1", pid=11)
    b = RecordBatcher(worker_id="b", anchor=ClockAnchor(wall_ns=1_700_000_000 * 10**9, mono_ns=10**12), host="h2",
                      pid=22)
    out_a, out_b = [], []
    for i in range(n_a):
        a.add(record(request_index(i, 0), 10**9 + i * 100 * MS, ttft_ms=40, late_ms=1))
        if i % 4 == 3:
            out_a.append(a.take(0, 20.0))
    out_a.append(a.take(0, 30.0, final=True))
    for i in range(n_b):
        b.add(record(request_index(i, 1), 10**12 + 10**9 + i * 100 * MS, ttft_ms=60, late_ms=3,
                     status=Status.ERROR if i == 0 else Status.OK))
    out_b.append(b.take(1, 95.0))  # no final batch: this worker was killed
    return out_a, out_b


def test_the_master_appends_each_batch_at_once_and_summarises_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    merger = RecordMerger(out, skeleton())
    assert orjson.loads((out / "run.json").read_bytes())["status"] == "running"  # a killed master is rebuildable
    from_a, from_b = batches(10, 6)
    merger.accept(from_a[0])
    assert len((out / "requests.jsonl").read_bytes().splitlines()) == 4  # on disk before anything else arrives
    for batch in [*from_a[1:], *from_b]:
        merger.accept(batch)
    assert merger.stale
    name, profile = profile_for(LocustOptions(), users=8)
    result = merger.finish(name, {**profile, "distributed": {"engine": "locust"}})
    merger.close()
    assert not merger.stale

    s = result.benchmarks[0].summary
    assert s.requests.completed == 15 and s.requests.errored == 1
    assert s.ttft_ms.mean == pytest.approx((9 * 40 + 5 * 60 + 40) / 15)  # each from its own worker's clock
    assert s.itl_ms.mean == pytest.approx(10.0)
    workers = result.benchmarks[0].profile["distributed"]["workers"]
    assert [(w["worker"], w["records"], w["ok"], w["ended"]) for w in workers] == [
        ("a", 10, 10, "stopped"), ("b", 6, 5, "lost")]
    assert workers[0]["lateness_ms"]["max"] == pytest.approx(1.0) and workers[1]["lateness_ms"]["p50"] == pytest.approx(3.0)
    assert workers[0]["cpu_percent"] == {"mean": 23.3, "max": 30.0} and workers[1]["host"] == "h2"
    assert any("worker 1 (h2, pid 22) stopped sending before the end" in w and "6 records" in w for w in result.warnings)
    assert any("worker 1" in w and "95% CPU" in w for w in result.warnings)
    assert not any("worker 0" in w for w in result.warnings)

    again, recs = load_run(out)  # what `tokspeed report DIR` reads
    assert again.status == "complete" and len(recs) == 16
    assert again.benchmarks[0].summary.requests.completed == 15


def test_late_batches_are_kept_and_make_run_json_stale(tmp_path: Path) -> None:
    merger = RecordMerger(tmp_path / "r", skeleton())
    from_a, from_b = batches(4, 2)
    merger.accept(from_a[0])
    merger.finish(*profile_for(LocustOptions(), 2))
    merger.accept(from_b[0])
    assert merger.stale
    result = merger.finish(*profile_for(LocustOptions(), 2))
    assert result.benchmarks[0].summary.requests.total == 6


def test_an_existing_results_directory_is_refused_unless_overwrite(tmp_path: Path) -> None:
    from tokspeed.errors import ConfigError

    RecordMerger(tmp_path / "r", skeleton()).close()
    with pytest.raises(ConfigError):
        RecordMerger(tmp_path / "r", skeleton())
    RecordMerger(tmp_path / "r", skeleton(), overwrite=True).close()


def test_master_run_json_names_target_profile_and_model(tmp_path: Path) -> None:
    opts = LocustOptions(out=str(tmp_path / "r"), rate=20.0, users=8, output_tokens="16", input_tokens="32")
    merger = open_merger(opts, "http://user:pw@127.0.0.1:9/v1", {"users": 8, "locust_version": "2.x"})
    assert merger is not None
    merger.accept(batches(3, 0)[0][0] | {"model": "m1"})
    result = finish_run(merger, opts)
    bench = result.benchmarks[0]
    assert bench.profile["kind"] == "rate" and bench.profile["rate"] == 20.0 and bench.profile["max_concurrency"] == 8
    assert bench.profile["distributed"]["engine"] == "locust" and "clocks" in bench.profile["distributed"]
    assert result.target["model"] == "m1" and "pw" not in result.target["url"] and "pw" not in str(result.config)
    assert result.config["profile"] == "rate" and result.workload["input_tokens"] == "32"
    assert open_merger(LocustOptions(), None, {}) is None  # no --tokspeed-out: Locust's statistics only


def test_a_run_stopped_before_its_run_time_is_interrupted(tmp_path: Path) -> None:
    opts = LocustOptions(out=str(tmp_path / "r"), users=2)
    merger = open_merger(opts, "http://127.0.0.1:9/v1", {"users": 2, "run_time": 10})
    assert merger is not None
    merger.accept(batches(3, 0)[0][0])
    assert finish_run(merger, opts, ran_s=4.0).status == "interrupted"  # Ctrl-C, SIGTERM, every worker gone
    assert finish_run(merger, opts, ran_s=10.01).status == "complete"
    assert load_run(tmp_path / "r")[0].status == "complete"


def test_profiles_say_how_users_and_rate_translate() -> None:
    assert profile_for(LocustOptions(), 16) == ("concurrency 16 (locust)", {"kind": "concurrency", "concurrency": 16})
    name, profile = profile_for(LocustOptions(rate=5.0), 10)
    assert profile == {"kind": "rate", "rate": 5.0, "arrival": "constant", "burstiness": None,
                       "max_concurrency": 10} and "5/s constant" in name  # as `tokspeed run --rate` says it
    name, profile = profile_for(LocustOptions(rate=5.0, arrival="poisson"), 10)
    assert profile["arrival"] == "poisson" and profile["exact_rate"] is True and "5/s poisson" in name


def test_options_survive_the_trip_through_locust_arguments() -> None:
    parser = argparse.ArgumentParser()
    for dest, (flag, default, _) in LocustOptions.arguments().items():
        if isinstance(default, bool):
            parser.add_argument(flag, dest=dest, action="store_true", default=default)
        else:
            parser.add_argument(flag, dest=dest, type=type(default) if default is not None else str, default=default)
    opts = LocustOptions(out="runs/x", overwrite=True, api="completions", model="m", dataset="builtin",
                         input_tokens=None, output_tokens="uniform:10,20", seed=7, rate=2.5, timeout_s=30.0,
                         include_usage=False, users=12)
    assert LocustOptions.from_namespace(parser.parse_args(opts.locust_args())) == opts
    assert LocustOptions.from_namespace(parser.parse_args([])) == LocustOptions()
    assert LocustOptions().locust_args() == []


def test_request_indexes_are_unique_across_workers() -> None:
    seen = {request_index(i, w) for i in range(50) for w in range(8)}
    assert len(seen) == 400 and all(request_index(i, 5) % INDEX_STRIDE == 5 for i in range(50))


def test_every_locust_flag_is_documented() -> None:
    import typer.main

    from tokspeed.cli import app

    readme = (DOCS / "scaling.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app).commands["locust"]  # type: ignore[attr-defined]
    flags = {o for cmd in group.commands.values() for p in cmd.params for o in p.opts if o.startswith("--")}
    assert {"--master", "--users", "--rate", "--out"} <= flags
    assert {f for f in flags - {"--help"} if f"`{f}" not in readme} == set()


def test_a_run_without_any_record_failed(tmp_path: Path) -> None:
    merger = RecordMerger(tmp_path / "r", skeleton())
    result = merger.finish(*profile_for(LocustOptions(), 2))
    assert result.status == "failed" and result.benchmarks == [] and "no worker sent" in (result.error or "")
