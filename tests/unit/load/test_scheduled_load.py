"""Scheduled loads: trace importers, replay window/speed, stage and ramp parsing, rate integrals, class merging."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import ConfigError, TokspeedError, WorkloadError
from tokspeed.load.classes import ClassConfig, local_indices, merged_timeline
from tokspeed.load.setup import ClassedWorkload, refuse_profile_flags
from tokspeed.load.stages import StageConfig, parse_ramp, parse_stages, segments
from tokspeed.load.timeline import (
    NS,
    Segment,
    Timeline,
    segment_schedule,
    unit_arrivals,
)
from tokspeed.load.trace import TraceWindow, load_replay, parse_window, select
from tokspeed.records import RequestRecord, TokenSource
from tokspeed.results import build_benchmark
from tokspeed.results.groups import add_groups
from tokspeed.runner.scheduled import scheduled_plan, timeline_from_config
from tokspeed.workload.tokens import approx_token_count
from tokspeed.workload.trace_formats import azure_time_s, read_trace
from tokspeed.workload.trace_source import BLOCK_TOKENS, trace_workload

MS = 1_000_000


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# --- importers -------------------------------------------------------------------------------


def test_mooncake_rows_in_ms_with_hash_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "mc.jsonl", (
        '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}\n'
        '{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28]}\n'
        '{"timestamp": 1500, "input_length": 10, "output_length": 0, "hash_ids": []}\n'
    ))  # fmt: skip
    t = read_trace(path)
    assert t.format == "mooncake"
    assert [r.time_s for r in t.rows] == [0.0, 1.5, 3.052]  # sorted by time
    assert [(r.input_tokens, r.output_tokens) for r in t.rows] == [(6755, 500), (10, 1), (7234, 794)]
    assert t.rows[2].hash_ids == (0, 28) and t.clamped == 1  # output 0 raised to 1, counted


def test_burstgpt_csv_skips_failed_rows_and_rebases_time(tmp_path: Path) -> None:
    path = write(tmp_path, "b.csv", (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    ))  # fmt: skip
    t = read_trace(path)
    assert t.format == "burstgpt" and t.skipped == 1
    assert [(r.time_s, r.input_tokens, r.output_tokens) for r in t.rows] == [(0.0, 472, 18), (113.0, 417, 276)]


def test_burstgpt_with_session_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "b2.csv", (
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "1.5,s1,0.3,ChatGPT,10,20,30,Conversation log\n2.0,s1,0.4,ChatGPT,11,21,32,Conversation log\n"
    ))  # fmt: skip
    assert [(r.time_s, r.input_tokens) for r in read_trace(path, "burstgpt").rows] == [(0.0, 10), (0.5, 11)]


def test_azure_csv_with_seven_fraction_digits(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:16:46.6805900,879,8\n"
    ))  # fmt: skip
    t = read_trace(path)
    assert t.format == "azure"
    assert [r.time_s for r in t.rows] == pytest.approx([0.0, 4.314579, 60.0], abs=1e-6)
    assert [(r.input_tokens, r.output_tokens) for r in t.rows] == [(374, 44), (396, 109), (879, 8)]
    assert azure_time_s("2024-05-10 00:00:01", "x") - azure_time_s("2024-05-10 00:00:00.5", "x") == pytest.approx(0.5)


def test_tokspeed_jsonl_seconds_or_ms_and_prompt(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", (
        '{"timestamp_s": 1.0, "input_tokens": 5, "output_tokens": 7}\n'
        '{"timestamp_ms": 2500, "input_tokens": 3, "output_tokens": 4, "prompt": "hello there"}\n'
    ))  # fmt: skip
    t = read_trace(path)
    assert t.format == "tokspeed"
    assert [(r.time_s, r.prompt) for r in t.rows] == [(0.0, None), (1.5, "hello there")]


@pytest.mark.parametrize(("text", "message"), [
    ("Timestamp,Model,Request tokens\n1,x,2\n", "Response tokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "not a date-time"),
    ("a,b,c\n1,2,3\n", "cannot tell the format"),
    ('{"timestamp": "soon", "input_length": 1, "output_length": 1}\n', "must be a number"),
])  # fmt: skip
def test_bad_traces_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        read_trace(write(tmp_path, "bad.csv", text))


# --- replay window and speed ------------------------------------------------------------------


def test_window_parsing() -> None:
    assert parse_window("60s:180s") == TraceWindow(60.0, 180.0)
    assert parse_window("2m:") == TraceWindow(120.0, None)
    assert parse_window(":30") == TraceWindow(0.0, 30.0)
    with pytest.raises(ConfigError):
        parse_window("180s:60s")
    with pytest.raises(ConfigError):
        parse_window("60s")


def test_window_and_speed_give_offsets_from_the_window_start(tmp_path: Path) -> None:
    lines = "".join(f'{{"timestamp_s": {t}, "input_tokens": 4, "output_tokens": 2}}\n' for t in (0, 1, 2.5, 4, 7, 9))
    path = write(tmp_path, "t.jsonl", lines)
    replay = load_replay(path, speed=2.0, window="2s:8s")
    assert [r.time_s for r in replay.rows] == [2.5, 4.0, 7.0]  # 2 ≤ t < 8
    assert replay.offsets_ns().tolist() == [250 * MS, 1000 * MS, 2500 * MS]  # (t − 2) / 2
    assert len(select(replay.trace.rows, TraceWindow())) == 6
    with pytest.raises(WorkloadError, match="no request inside"):
        load_replay(path, window="10s:20s")


# --- stages and ramps -------------------------------------------------------------------------


def test_stage_parsing_names_and_refusals() -> None:
    assert parse_stages("warm:rate=2:30s,rate=8:1m") == [
        {"name": "warm", "rate": 2.0, "duration_s": 30.0},
        {"name": "stage 2", "rate": 8.0, "duration_s": 60.0},
    ]
    assert parse_stages("concurrency=4:30s") == [{"name": "stage 1", "concurrency": 4, "duration_s": 30.0}]
    for bad in ("rate=2", "concurrency=1.5:30s", "warm:rate=x:30s", "speed=2:30s", ""):
        with pytest.raises(ConfigError):
            parse_stages(bad)


def test_ramp_parsing_linear_and_stepped() -> None:
    stages, windows = parse_ramp("rate=1..20:60s")
    assert stages == [{"name": "ramp", "rate": 1.0, "rate_end": 20.0, "duration_s": 60.0}] and windows == 5
    stages, windows = parse_ramp("rate=1..20:60s:steps=5")
    assert [s["rate"] for s in stages] == pytest.approx([1, 5.75, 10.5, 15.25, 20]) and windows == 1
    assert all(s["duration_s"] == 12 for s in stages)
    assert parse_ramp("rate=2..4:10s:windows=2")[1] == 2
    with pytest.raises(ConfigError):
        parse_ramp("rate=1-20:60s")


def test_linear_segment_inverts_the_rate_integral() -> None:
    seg = Segment("ramp", 60.0, 1.0, 20.0)
    assert seg.mass == pytest.approx(630.0)  # (1 + 20)/2 × 60
    u = np.linspace(0, 60, 31)
    lam = 1.0 * u + 19.0 * u**2 / 120  # Λ(u) = r0·u + (r1 − r0)·u²/(2D)
    assert seg.time_at(lam) == pytest.approx(u, abs=1e-9)
    down = Segment("down", 10.0, 8.0, 0.0)
    u = np.linspace(0, 10, 11)
    assert down.time_at(8 * u - 0.4 * u**2) == pytest.approx(u, abs=1e-6)


def test_constant_arrivals_give_exact_stage_counts_and_windows() -> None:
    segs = segments([StageConfig(name="warm", rate=2, duration_s=30), StageConfig(name="spike", rate=8, duration_s=10)])
    offsets, windows, window_of = segment_schedule(segs, "constant", 1.0, 0)
    assert [w.name for w in windows] == ["warm", "spike"]
    assert np.bincount(window_of).tolist() == [60, 80]  # rate × duration each
    t = offsets / NS
    assert np.all(t[window_of == 0] < 30) and np.all(t[window_of == 1] >= 30) and np.all(t < 40)
    assert np.diff(t[window_of == 1]) == pytest.approx(np.full(79, 0.125))


def test_linear_ramp_constant_arrivals_hit_lambda_integers() -> None:
    offsets, windows, window_of = segment_schedule([Segment("ramp", 10.0, 1.0, 20.0)], "constant", 1.0, 0, 5)
    assert len(offsets) == 105 and len(windows) == 5  # Λ(10) = 105
    t = offsets / NS
    lam = t + 19 * t**2 / 20
    assert lam == pytest.approx(np.arange(105), abs=1e-6)
    lam_edges = [e + 19 * e**2 / 20 for e in (0, 2, 4, 6, 8, 10)]  # integers j with Λ(a) ≤ j < Λ(b) per window
    assert np.bincount(window_of).tolist() == np.diff([math.ceil(x) for x in lam_edges]).tolist() == [6, 14, 21, 28, 36]
    edges = [0, 2, 4, 6, 8, 10]
    for k in range(5):  # every arrival of window k was scheduled inside it
        assert np.all((t[window_of == k] >= edges[k]) & (t[window_of == k] < edges[k + 1]))


def test_poisson_stages_count_within_tolerance() -> None:
    segs = segments([StageConfig(rate=50, duration_s=20), StageConfig(rate=200, duration_s=10)])
    offsets, _, window_of = segment_schedule(segs, "poisson", 1.0, 3)
    counts = np.bincount(window_of)
    for count, mean in zip(counts, (1000, 2000)):
        assert abs(count - mean) < 4 * math.sqrt(mean)
    assert np.all(np.diff(offsets) >= 0)


def test_unit_arrivals_processes() -> None:
    assert unit_arrivals(3.5, "constant", 1.0, 0).tolist() == [0, 1, 2, 3]
    x = unit_arrivals(20000, "gamma", 0.5, 1)
    assert x[0] == 0 and len(x) == pytest.approx(20000, rel=0.05)
    with pytest.raises(ValueError):
        unit_arrivals(5, "uniform", 1.0, 0)


# --- config -----------------------------------------------------------------------------------


def test_scheduled_config_is_an_open_loop_with_a_nominal_rate(tmp_path: Path) -> None:
    cfg = RunConfig(stages="rate=2:5s,rate=8:5s")
    assert cfg.profile == "rate" and cfg.rate == 8 and cfg.scheduled == "stages"
    assert cfg.measured_requests is None and cfg.warmup_requests == 0
    assert RunConfig(stages="rate=2:5s", warmup=3).warmup_requests == 3
    assert RunConfig(ramp="rate=1..20:60s").rate == 20
    scenario = tmp_path / "s.yaml"
    scenario.write_text("arrival: constant\nstages:\n  - {name: warm, rate: 1, duration: 10s}\n  - {name: spike, rate: 5, duration: 2s}\n")
    cfg = config_from_sources(scenario, {})
    assert [s.name for s in cfg.stages or []] == ["warm", "spike"] and cfg.stages and cfg.stages[0].duration_s == 10
    plan = scheduled_plan(cfg)
    assert plan.open_loop and plan.describe()["kind"] == "stages" and plan.label() == "stages warm, spike"
    assert len(plan.arrivals_ns(None, None, 0)) == 20


def test_scheduled_config_refusals() -> None:
    with pytest.raises(TokspeedError):
        config_from_sources(None, {"stages": "rate=2:5s", "ramp": "rate=1..2:5s"})
    with pytest.raises(TokspeedError):
        config_from_sources(None, {"stages": "rate=2:5s", "concurrency": 4})
    with pytest.raises(TokspeedError, match="cannot be combined with multi_turn"):
        config_from_sources(None, {"trace": "t.jsonl", "multi_turn": 3})
    with pytest.raises(ConfigError, match="cannot be combined"):
        refuse_profile_flags(2.0, None, False, trace="t.jsonl", stages=None, ramp=None)
    refuse_profile_flags(None, None, False, trace="t.jsonl", stages=None, ramp=None)


def test_requests_keeps_the_first_arrivals() -> None:
    t = timeline_from_config(RunConfig(stages="rate=10:5s", requests=7, arrival="constant"))
    assert t is not None and len(t) == 7 and t.window_of is not None and len(t.window_of) == 7


# --- classes ----------------------------------------------------------------------------------


def test_classes_merge_by_time_with_labels_and_local_indices() -> None:
    classes = [
        ClassConfig(name="chat", rate=4, arrival="constant", slo=["ttft_ms<=300"]),
        ClassConfig(name="batch", rate=1, arrival="constant", slo="e2e_ms<=30000"),
    ]
    t = merged_timeline(classes, 3.0, 0)
    assert len(t) == 12 + 3 and np.all(np.diff(t.offsets_ns) >= 0)
    assert t.class_of is not None and np.bincount(t.class_of).tolist() == [12, 3]
    assert t.class_of[:2].tolist() == [0, 1]  # both at 0: class order
    local = local_indices(t.class_of, 2)
    assert local[t.class_of == 1].tolist() == [0, 1, 2] and local[t.class_of == 0].tolist() == list(range(12))
    r = RequestRecord(index=1, iteration=1, warmup=False, scheduled_ns=0)
    t.label(r)
    assert r.workload_class == "batch" and r.stage is None
    w = RequestRecord(index=1, iteration=0, warmup=True, scheduled_ns=0)
    t.label(w)
    assert w.workload_class is None
    with pytest.raises(ConfigError, match="needs requests"):
        merged_timeline(classes, None, 0)
    with pytest.raises(ConfigError, match="must differ"):
        merged_timeline([classes[0], classes[0]], 1.0, 0)


class _Lengths:
    def __init__(self, n: int) -> None:
        self.n = n

    def request(self, index: int) -> Any:
        from tokspeed.records import RequestSpec

        return RequestSpec(index=index, prompt=f"{self.n}:{index}", max_tokens=self.n)

    def describe(self) -> dict[str, object]:
        return {"n": self.n}


def test_classed_workload_sends_each_class_its_own_requests() -> None:
    classes = [ClassConfig(name="a", rate=2, arrival="constant"), ClassConfig(name="b", rate=1, arrival="constant")]
    t = merged_timeline(classes, 2.0, 0)
    w = ClassedWorkload(t, [_Lengths(5), _Lengths(50)], classes)
    specs = [w.request(i) for i in range(len(t))]
    assert [(s.index, s.prompt) for s in specs] == [(0, "5:0"), (1, "50:0"), (2, "5:1"), (3, "5:2"), (4, "50:1"), (5, "5:3")]
    assert w.describe()["requests_per_class"] == {"a": 4, "b": 2}


def rec(index: int, klass: str | None, ttft_ms: float, e2e_ms: float, stage: str | None = None) -> RequestRecord:
    sent = index * 100 * MS
    return RequestRecord(
        index=index, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent,
        first_token_ns=sent + int(ttft_ms * MS), first_content_ns=sent + int(ttft_ms * MS),
        chunk_ns=[sent + int(ttft_ms * MS), sent + int(e2e_ms * MS)], end_ns=sent + int(e2e_ms * MS),
        output_tokens=2, output_tokens_source=TokenSource.USAGE, workload_class=klass, stage=stage,
    )  # fmt: skip


def test_goodput_per_class_on_its_own_slos_and_together() -> None:
    classes = [
        ClassConfig(name="chat", rate=4, arrival="constant", slo=["ttft_ms<=300"]),
        ClassConfig(name="batch", rate=1, arrival="constant", slo=["e2e_ms<=1000"]),
    ]
    cfg = RunConfig(classes=[c.model_dump() for c in classes], duration_s=3)
    t = merged_timeline(classes, 3.0, 0)
    # chat: TTFT 100, 400, 200 ms -> 2 of 3 good; batch: E2E 900 (good), 1500 (bad); batch TTFT 500 is no chat SLO
    records = [rec(0, "chat", 100, 500), rec(1, "chat", 400, 450), rec(2, "chat", 200, 5000),
               rec(3, "batch", 500, 900), rec(4, "batch", 500, 1500)]  # fmt: skip
    bench = build_benchmark("classes", t.describe(), records, cfg.slos)
    add_groups(bench, t, records, cfg)
    assert bench.classes is not None and bench.stages is None
    chat, batch = bench.classes["chat"].summary, bench.classes["batch"].summary
    assert chat.goodput is not None and (chat.goodput.good, chat.goodput.fraction) == (2, pytest.approx(2 / 3))
    assert batch.goodput is not None and (batch.goodput.good, batch.goodput.fraction) == (1, 0.5)
    both = bench.classes_goodput
    assert both is not None and both.good == 3 and both.fraction == pytest.approx(3 / 5)
    assert both.requests_per_s == pytest.approx(3 / bench.summary.window_s)
    assert chat.requests.total == 3 and batch.requests.total == 2


def test_stage_groups_use_the_stage_label() -> None:
    t = Timeline("stages", np.asarray([0, 100 * MS]), [])
    from tokspeed.load.timeline import Window

    t.windows = (Window("a", 0, 1, 2, 2), Window("b", 1, 2, 4, 8))
    records = [rec(0, None, 10, 20, "a"), rec(1, None, 10, 20, "b"), rec(2, None, 10, 20, "b")]
    bench = build_benchmark("s", {"kind": "stages", "open_loop": True, "rate": 3.0}, records, [])
    add_groups(bench, t, records, RunConfig())
    assert bench.stages is not None
    assert {k: g.summary.requests.total for k, g in bench.stages.items()} == {"a": 1, "b": 2}
    assert bench.stages["b"].summary.schedule is not None
    assert bench.stages["b"].summary.schedule.target_requests_per_s == 6.0  # (4 + 8) / 2


# --- trace workload ---------------------------------------------------------------------------


def test_trace_workload_lengths_and_shared_hash_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, "mc.jsonl", (
        '{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}\n'
        '{"timestamp": 10, "input_length": 600, "output_length": 6, "hash_ids": [0, 2]}\n'
        '{"timestamp": 20, "input_length": 37, "output_length": 9}\n'
    ))  # fmt: skip
    rows = load_replay(path).rows
    w = trace_workload(rows, path, "completions", None, 0)
    a, b, c = (w.request(i) for i in range(3))
    assert [s.max_tokens for s in (a, b, c)] == [5, 6, 9]
    assert [s.input_tokens for s in (a, b, c)] == [700, 600, 37]
    assert approx_token_count(a.prompt or "") == 700 and approx_token_count(c.prompt or "") == 37
    words_a, words_b = (a.prompt or "").split(), (b.prompt or "").split()
    assert words_a[:BLOCK_TOKENS] == words_b[:BLOCK_TOKENS]  # hash id 0: the same first block
    assert words_a[BLOCK_TOKENS:600] != words_b[BLOCK_TOKENS:600]  # blocks 1 and 2 differ


def test_concurrency_stages_and_ramps_are_a_closed_loop() -> None:
    cfg = RunConfig(stages="low:concurrency=2:10s,high:concurrency=8:5s")
    assert cfg.profile == "concurrency" and cfg.concurrency == 8 and cfg.streams == 8
    plan = scheduled_plan(cfg)
    assert not plan.open_loop and plan.timeline is not None and plan.timeline.closed
    assert plan.describe()["stages"] == [
        {"name": "low", "start_s": 0.0, "end_s": 10.0, "concurrency": 2},
        {"name": "high", "start_s": 10.0, "end_s": 15.0, "concurrency": 8},
    ]
    stages, _ = parse_ramp("concurrency=1..4:8s")  # one step per width
    assert [(s["concurrency"], s["duration_s"]) for s in stages] == [(1, 2.0), (2, 2.0), (3, 2.0), (4, 2.0)]
    stages, _ = parse_ramp("concurrency=2..32:60s:steps=3")
    assert [s["concurrency"] for s in stages] == [2, 17, 32]
    with pytest.raises(TokspeedError, match="mix rate and concurrency"):
        timeline_from_config(RunConfig(stages="rate=2:5s,concurrency=3:5s"))
    with pytest.raises(ValueError, match="exactly one of rate and concurrency"):
        StageConfig(rate=2, concurrency=3, duration_s=1)


# --- concurrency stages in the executor (fake backend: 20 ms a request) ------------------------


class _SlowBackend:
    def __init__(self) -> None:
        self.in_flight: list[tuple[int, str | None]] = []  # (monotonic ns, stage) of every start
        self.now = 0

    async def send(self, spec: Any, record: RequestRecord) -> None:
        import asyncio
        from time import perf_counter_ns

        record.sent_ns = perf_counter_ns()
        self.now += 1
        self.in_flight.append((self.now, record.stage))
        await asyncio.sleep(0.02)
        self.now -= 1
        record.end_ns = perf_counter_ns()


async def test_staged_closed_loop_follows_the_widths() -> None:
    from time import perf_counter_ns

    from tokspeed.runner.executor import run_phase
    from tokspeed.runner.loops import Phase

    cfg = RunConfig(stages="a:concurrency=2:0.3s,b:concurrency=5:0.3s,c:concurrency=1:0.3s")
    plan = scheduled_plan(cfg)
    backend = _SlowBackend()
    out: list[RequestRecord] = []
    called_ns = perf_counter_ns()
    await run_phase(plan, Phase(1, False, None, None), backend, _Lengths(3), out.append)  # type: ignore[arg-type]
    assert {r.stage for r in out} == {"a", "b", "c"}
    assert sorted(r.index for r in out) == list(range(len(out)))  # each index once
    widest = {s: max(n for n, st in backend.in_flight if st == s) for s in "abc"}
    assert widest["a"] <= 2 and widest["b"] == 5
    late_c = [n for n, st in backend.in_flight if st == "c"][3:]  # after the drain, one at a time
    assert late_c and max(late_c) == 1
    # each stage lasts its 0.3 s, judged on the records' own send stamps (a stall of the loop, 90-250 ms at
    # load 5, only removes requests, so counts have ceilings, not floors): no stage sends for longer than
    # 0.3 s, and stage b sends nothing before 0.3 s after the phase was called, c nothing before 0.6 s
    counts = {s: sum(1 for r in out if r.stage == s) for s in "abc"}
    assert 1 <= counts["a"] <= 32 and 1 <= counts["b"] <= 77 and 1 <= counts["c"] <= 16, counts
    sent = {s: sorted(r.sent_ns for r in out if r.stage == s) for s in "abc"}
    assert all(sent[s][-1] - sent[s][0] <= 305_000_000 for s in "abc"), sent
    assert sent["b"][0] - called_ns >= 300_000_000 and sent["c"][0] - called_ns >= 600_000_000, called_ns
