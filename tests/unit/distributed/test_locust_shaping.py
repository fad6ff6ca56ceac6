"""Warm-up, request counts and concurrency stages of a Locust run, without Locust: the pure rules
(`distributed.shaping`), the options that carry them to the workers, and the master's run.json."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tokspeed.cli import main
from tokspeed.distributed.batching import ClockAnchor, RecordBatcher
from tokspeed.distributed.master import finish_run, open_merger, profile_for
from tokspeed.distributed.merge import RecordMerger
from tokspeed.distributed.options import LocustOptions
from tokspeed.distributed.shaping import (
    Quota,
    StagePlan,
    WarmupClock,
    default_warmup_s,
    locust_stages,
    worker_quota,
)
from tokspeed.errors import ConfigError
from tokspeed.records import RequestRecord, Status
from tokspeed.results import RunResult, load_run

MS = 1_000_000


def test_the_default_warmup_is_the_spawn_ramp() -> None:
    assert default_warmup_s(8, 100.0, staged=False) == pytest.approx(0.08)
    assert default_warmup_s(2000, 100.0, staged=False) == pytest.approx(20.0)
    assert default_warmup_s(8, 100.0, staged=True) == 0.0  # stages: each stage's ramp is what is measured
    assert default_warmup_s(0, 100.0, staged=False) == 0.0  # users chosen later in the web UI
    assert default_warmup_s(8, None, staged=False) == 0.0


def test_a_request_started_before_the_warmup_end_is_warmup() -> None:
    clock = WarmupClock.starting(start_ns=10 * 10**9, warmup_s=1.5)
    assert clock.warm(11_499_999_999) and not clock.warm(11_500_000_000)
    assert not WarmupClock.starting(5, 0.0).warm(5)


@pytest.mark.parametrize("total", [1, 7, 100, 101, 1000])
@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_worker_shares_add_up_to_the_request_count_exactly(total: int, workers: int) -> None:
    shares = [worker_quota(total, workers, w) for w in range(workers)]
    assert sum(shares) == total and max(shares) - min(shares) <= 1


def test_a_worker_outside_the_counted_ones_gets_nothing() -> None:
    assert worker_quota(10, 2, 2) == 0 and worker_quota(10, 0, 0) == 0 and worker_quota(0, 2, 0) == 0


def test_a_quota_is_claimed_once_per_request() -> None:
    q = Quota(2)
    assert [q.claim() for _ in range(4)] == [True, True, False, False]
    unlimited = Quota()
    assert all(unlimited.claim() for _ in range(1000))


def test_concurrency_stages_become_windows_back_to_back() -> None:
    windows = locust_stages("warm:concurrency=2:2s,peak:concurrency=6:3s", None)
    assert [(w.name, w.start_s, w.end_s, w.concurrency) for w in windows] == [
        ("warm", 0.0, 2.0, 2), ("peak", 2.0, 5.0, 6)]
    plan = StagePlan(tuple(windows))
    assert [plan.at(t) for t in (0.0, 1.999, 2.0, 4.999, 5.0, 9.0)] == [0, 0, 1, 1, None, None]
    assert plan.duration_s == 5.0 and plan.max_users == 6
    ramp = locust_stages(None, "concurrency=1..7:30s:steps=4")
    assert [w.concurrency for w in ramp] == [1, 3, 5, 7] and ramp[-1].end_s == pytest.approx(30.0)
    assert locust_stages(None, None) == []


def test_rate_stages_are_no_concurrency_windows() -> None:
    assert locust_stages("warm:rate=2:10s", None) == [] and locust_stages(None, "rate=1..20:60s") == []


@pytest.mark.parametrize(("stages", "ramp", "says"), [
    ("warm:rate=2:10s,peak:concurrency=4:10s", None, "mix rate and concurrency"),
    ("concurrency=2:1s", "concurrency=1..2:2s", "cannot be combined"),
    ("a:concurrency=2:1s,a:concurrency=3:1s", None, "must differ"),
    ("warm:concurrency=0:1s", None, "stages"),
    ("warm:concurrency=two:1s", None, "not a number"),
])
def test_stages_a_locust_run_cannot_do_are_refused(stages: str | None, ramp: str | None, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        locust_stages(stages, ramp)


def test_the_new_options_survive_the_trip_through_locust_arguments() -> None:
    parser = argparse.ArgumentParser()
    for dest, (flag, default, _) in LocustOptions.arguments().items():
        if isinstance(default, bool):
            parser.add_argument(flag, dest=dest, action="store_true", default=default)
        else:
            parser.add_argument(flag, dest=dest, type=type(default) if default is not None else str, default=default)
    opts = LocustOptions(out="r", warmup_s=2.5, requests=120, workers=3, stages="a:concurrency=2:1s", ramp=None)
    assert LocustOptions.from_namespace(parser.parse_args(opts.locust_args())) == opts
    zero = LocustOptions(warmup_s=0.0)  # 0 is "measure the ramp", not "the default"
    assert LocustOptions.from_namespace(parser.parse_args(zero.locust_args())).warmup_s == 0.0


def rec(index: int, sent_ms: float, warmup: bool = False, stage: str | None = None, tokens: int = 4) -> RequestRecord:
    sent = int(sent_ms * MS)
    first = sent + 30 * MS
    chunks = [first + i * 5 * MS for i in range(tokens)]
    r = RequestRecord(index=index, iteration=0 if warmup else 1, warmup=warmup, scheduled_ns=sent, sent_ns=sent,
                      first_token_ns=first, first_content_ns=first, end_ns=chunks[-1], chunk_ns=chunks,
                      output_tokens=tokens, input_tokens=8, status=Status.OK)
    r.stage = stage
    return r


def batch(records: list[RequestRecord], final: bool = True) -> dict:
    b = RecordBatcher(worker_id="w0", anchor=ClockAnchor(wall_ns=1_700_000_000 * 10**9, mono_ns=0), host="h", pid=1)
    for r in records:
        b.add(r)
    return b.take(0, 10.0, final=final)


def skeleton() -> RunResult:
    return RunResult.model_validate({"started_at": "2026-01-01T00:00:00+00:00", "config": {"profile": "concurrency"}})


def test_warmup_records_are_kept_but_not_measured(tmp_path: Path) -> None:
    merger = RecordMerger(tmp_path / "r", skeleton())
    warm = [rec(i, i * 10, warmup=True) for i in range(3)]
    warm[0].first_token_ns = warm[0].first_content_ns = warm[0].sent_ns + 900 * MS  # a slow start: left out
    warm[0].chunk_ns = [warm[0].first_token_ns + i * 5 * MS for i in range(4)]
    warm[0].end_ns = warm[0].chunk_ns[-1]
    merger.accept(batch([*warm, *[rec(10 + i, 100 + i * 10) for i in range(5)]]))
    assert merger.received == 8 and merger.measured == 5
    result = merger.finish(*profile_for(LocustOptions(), 4))
    s = result.benchmarks[0].summary
    assert s.requests.completed == 5 and s.ttft_ms.mean == pytest.approx(30.0) and s.ttft_ms.max == pytest.approx(30.0)
    assert len(load_run(tmp_path / "r")[1]) == 8  # every record stays in requests.jsonl, warm-up flagged


def test_a_run_with_only_warmup_records_failed_and_says_why(tmp_path: Path) -> None:
    merger = RecordMerger(tmp_path / "r", skeleton())
    merger.accept(batch([rec(0, 0, warmup=True)]))
    result = merger.finish(*profile_for(LocustOptions(), 4))
    assert result.status == "failed" and "warm-up" in (result.error or "") and result.benchmarks == []


def test_a_worker_that_could_not_start_is_the_reason_a_run_failed(tmp_path: Path) -> None:
    opts = LocustOptions(out=str(tmp_path / "r"), users=2)
    merger = open_merger(opts, "http://127.0.0.1:9/v1", {"users": 2, "run_time": 10})
    assert merger is not None
    reason = "worker 0 (h): cannot reach http://127.0.0.1:9/v1/models: Connection refused"
    result = finish_run(merger, opts, ran_s=0.5, failures=[reason])
    assert result.status == "failed" and result.error == reason
    assert any(reason in w for w in result.warnings)
    assert load_run(tmp_path / "r")[0].error == reason


def test_reaching_the_request_count_is_a_complete_run(tmp_path: Path) -> None:
    opts = LocustOptions(out=str(tmp_path / "r"), users=2, requests=5)
    merger = open_merger(opts, "http://127.0.0.1:9/v1", {"users": 2, "run_time": 60, "warmup_s": 0.5})
    assert merger is not None
    merger.accept(batch([rec(0, 0, warmup=True), *[rec(i, 100 + i) for i in range(1, 6)]]))
    result = finish_run(merger, opts, ran_s=3.0)  # long before --duration: not "interrupted", it reached N
    assert result.status == "complete"
    profile = result.benchmarks[0].profile
    assert profile["requests"] == 5 and profile["warmup_s"] == 0.5
    assert result.config["requests"] == 5 and result.config["warmup_s"] == 0.5
    short = LocustOptions(out=str(tmp_path / "s"), users=2, requests=50)
    m2 = open_merger(short, "http://127.0.0.1:9/v1", {"users": 2, "run_time": 60})
    assert m2 is not None
    m2.accept(batch([rec(i, i) for i in range(5)]))
    assert finish_run(m2, short, ran_s=3.0).status == "interrupted"  # stopped before both N and --duration


def test_each_stage_gets_its_own_summary(tmp_path: Path) -> None:
    windows = locust_stages("warm:concurrency=2:2s,peak:concurrency=6:2s", None)
    opts = LocustOptions(out=str(tmp_path / "r"), stages="warm:concurrency=2:2s,peak:concurrency=6:2s")
    merger = open_merger(opts, "http://127.0.0.1:9/v1", {"users": 6, "run_time": 4.0})
    assert merger is not None
    warm = [rec(i, i * 100, stage="warm", tokens=4) for i in range(4)]
    peak = [rec(10 + i, 2000 + i * 50, stage="peak", tokens=8) for i in range(9)]
    merger.accept(batch([*warm, *peak]))
    result = finish_run(merger, opts, ran_s=4.0, windows=windows)
    bench = result.benchmarks[0]
    assert bench.profile["kind"] == "stages" and bench.profile["open_loop"] is False
    assert bench.profile["concurrency"] == 6 and [s["concurrency"] for s in bench.profile["stages"]] == [2, 6]
    assert bench.stages is not None and list(bench.stages) == ["warm", "peak"]
    assert bench.stages["warm"].summary.requests.completed == 4 and bench.stages["peak"].summary.requests.completed == 9
    assert bench.stages["warm"].summary.output_tokens.mean == 4 and bench.stages["peak"].summary.output_tokens.mean == 8
    assert bench.stages["peak"].profile == {"name": "peak", "start_s": 2.0, "end_s": 4.0, "concurrency": 6}
    assert bench.summary.requests.completed == 13 and result.status == "complete"
    assert "stages warm, peak" in bench.name
    again = load_run(tmp_path / "r")[0].benchmarks[0]
    assert again.stages is not None and again.stages["peak"].summary.requests.completed == 9


@pytest.mark.parametrize(("extra", "says"), [
    (["--stages", "warm:rate=2:1s,b:concurrency=2:1s"], "mix rate and concurrency"),
    (["--stages", "warm:rate=2:1s", "--rate", "4"], "--rate cannot be combined"),
    (["--rate", "4", "--arrival", "gamma"], "unknown arrival process"),
    (["--stages", "a:concurrency=2:1s", "--rate", "4"], "--rate cannot be combined"),
])
def test_the_master_command_refuses_bad_stages_before_locust_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, extra: list[str], says: str
) -> None:
    pytest.importorskip("typer")
    from importlib.util import find_spec

    from tokspeed.cli import locust_cmd

    if find_spec("locust") is None:
        pytest.skip("needs tokspeed[locust]")

    def started(*_: object) -> None:  # the real one execs Locust in place of this process
        raise AssertionError("Locust would have started")

    monkeypatch.setattr(locust_cmd, "_run", started)
    rc = main(["locust", "master", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r"), *extra])
    assert rc == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_worker_preflight_says_in_one_line_that_the_target_cannot_be_reached() -> None:
    import socket

    from tokspeed.distributed.sync_http import check_reachable
    from tokspeed.errors import TargetError

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_reachable(f"http://127.0.0.1:{port}/v1", timeout_s=2.0)  # something listens: fine
    with pytest.raises(TargetError, match=f"cannot reach http://127.0.0.1:{port}/v1: .*refused") as err:
        check_reachable(f"http://127.0.0.1:{port}/v1", timeout_s=2.0)
    assert "\n" not in str(err.value) and err.value.hint
