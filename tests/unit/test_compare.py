"""compare_runs on hand-built runs with known differences; gates; workload differences; determinism."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tokspeed.compare import RunData, compare_runs, differences, judge_gates
from tokspeed.comparison import CompareSettings
from tokspeed.errors import ConfigError
from tokspeed.gates import parse_gate
from tokspeed.metrics.schema import Summary
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource
from tokspeed.results import RunResult, build_benchmark
from tokspeed.verdicts import orient

MS = 1_000_000
KNOWN = list(Summary().flat())


def record(i: int, sent: int, ttft_ms: float, itl_ms: float, tokens: int = 8, iteration: int = 1, **kw: Any) -> RequestRecord:
    first = sent + int(ttft_ms * MS)
    chunks = [first + int(k * itl_ms * MS) for k in range(tokens)]
    fields: dict[str, Any] = {
        "index": i, "iteration": iteration, "warmup": False, "scheduled_ns": sent, "sent_ns": sent,
        "first_token_ns": first, "first_content_ns": first, "end_ns": chunks[-1], "chunk_ns": chunks,
        "output_tokens": tokens, "output_tokens_source": TokenSource.USAGE, "input_tokens": 100,
        "input_tokens_source": TokenSource.USAGE,
    }
    fields.update(kw)
    return RequestRecord(**fields)


def run(label: str, ttft_ms: np.ndarray, itl_ms: float = 5.0, iterations: int = 1, config: dict[str, Any] | None = None,
        errors: int = 0) -> RunData:
    """Sequential requests with the given TTFTs, split evenly over `iterations`."""
    records, t = [], 0
    per = len(ttft_ms) // iterations
    for i, ttft in enumerate(ttft_ms):
        r = record(i, t, float(ttft), itl_ms, iteration=min(i // per + 1, iterations))
        records.append(r)
        t = (r.end_ns or t) + MS
    for j in range(errors):
        records.append(RequestRecord(index=10_000 + j, iteration=iterations, warmup=False, scheduled_ns=t, sent_ns=t,
                                     end_ns=t + MS, status=Status.ERROR, error_kind=ErrorKind.HTTP, http_status=503))
    bench = build_benchmark("concurrency 1", {"kind": "concurrency", "concurrency": 1}, records, [])
    cfg = {"dataset": "builtin", "api": "chat", "output_tokens": "8", "profile": "concurrency", "concurrency": 1, **(config or {})}
    result = RunResult(status="complete", started_at="2026-01-01T00:00:00+00:00", config=cfg, benchmarks=[bench],
                       target={"model": "m"})
    return RunData(label, f"runs/{label}", result, records)


def metric(c: Any, name: str, run_index: int = 0) -> Any:
    return next(m for m in c.runs[run_index].benchmarks[0].metrics if m.metric == name)


rng = np.random.default_rng(11)
SLOW = rng.normal(40.0, 2.0, 200)
FAST = rng.normal(20.0, 1.0, 200)


def test_a_twice_faster_run_is_called_faster_with_the_right_ratio() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=500))
    m = metric(c, "ttft_p50_ms")
    assert m.verdict == "better" and m.word == "faster" and m.test == "mann-whitney" and m.p_value < 0.001
    factor, direction, _band = orient(m.ratio, m.ratio_ci95)
    assert direction == "lower" and factor == pytest.approx(2.0, abs=0.05)
    assert m.ratio_ci95[0] < m.ratio < m.ratio_ci95[1]
    assert m.sentence.startswith("pr: TTFT p50 ") and "× lower than main (p < 0.001)" in m.sentence
    # the other way round it is slower
    back = metric(compare_runs(run("pr", FAST), [run("main", SLOW)], CompareSettings(resamples=500)), "ttft_p50_ms")
    assert back.verdict == "worse" and back.word == "slower" and "higher than pr" in back.sentence


def test_same_distribution_is_no_significant_difference() -> None:
    a = np.random.default_rng(1).normal(40.0, 5.0, 150)
    b = np.random.default_rng(2).normal(40.0, 5.0, 150)
    c = compare_runs(run("main", a), [run("pr", b)], CompareSettings(resamples=500))
    for name in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms"):
        m = metric(c, name)
        assert m.verdict == "no significant difference", m.sentence
        assert "no significant difference from main" in m.sentence


def test_single_iteration_throughput_claims_no_significance() -> None:
    m = metric(compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=200)), "output_tokens_per_s")
    assert m.verdict == "untested" and m.test == "none" and m.ratio is not None and m.ratio > 1
    assert "single measurement: no significance" in m.sentence


def test_throughput_across_iterations_uses_welch() -> None:
    c = compare_runs(run("main", SLOW, iterations=4), [run("pr", FAST, iterations=4)], CompareSettings(resamples=200))
    m = metric(c, "requests_per_s")
    assert m.test == "welch" and m.verdict == "better" and m.word == "faster"
    assert m.ratio_ci95 is not None and m.ratio_ci95[0] < m.ratio < m.ratio_ci95[1]


def test_error_rate_uses_a_proportion_test() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", SLOW, errors=40)], CompareSettings(resamples=200))
    m = metric(c, "error_rate")
    assert m.test == "two-proportion" and m.verdict == "worse" and m.word == "more errors"
    assert m.base == 0.0 and m.ratio is None and "vs 0.00% in main" in m.sentence


def test_results_are_deterministic_and_independent_of_other_runs() -> None:
    base, pr = run("main", SLOW), run("pr", FAST)
    one = compare_runs(base, [pr], CompareSettings(resamples=300))
    again = compare_runs(base, [pr], CompareSettings(resamples=300))
    assert one.model_dump() == again.model_dump()
    other_seed = compare_runs(base, [pr], CompareSettings(resamples=300, seed=1))
    assert metric(one, "ttft_p50_ms").ratio_ci95 != metric(other_seed, "ttft_p50_ms").ratio_ci95


def test_runs_under_different_metric_definitions_are_flagged() -> None:
    base, other = run("main", SLOW), run("pr", SLOW)
    assert base.result.metric_spec == "tokspeed.metrics/1"
    other.result.metric_spec = "tokspeed.metrics/2"
    assert differences(base, other) == ["metric definitions: tokspeed.metrics/1 in main, tokspeed.metrics/2 in pr"]


def test_different_workloads_are_flagged() -> None:
    base = run("main", SLOW)
    other = run("pr", SLOW, config={"dataset": "synthetic", "output_tokens": "256", "concurrency": 8})
    found = differences(base, other)
    assert any(d.startswith("dataset:") for d in found)
    assert any(d.startswith("output_tokens:") for d in found)
    assert any(d.startswith("concurrency:") for d in found)
    assert differences(base, run("pr", FAST)) == []
    c = compare_runs(base, [other], CompareSettings(resamples=200))
    assert c.runs[0].differences == found


def test_comparison_json_round_trips() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=200))
    data = c.model_dump(mode="json", by_alias=True)
    assert data["schema"] == "tokspeed.compare/1"
    assert type(c).model_validate(data) == c


def test_gates_relative_and_absolute() -> None:
    base, pr = run("main", SLOW), run("pr", FAST)
    gates = [parse_gate(g, KNOWN) for g in ("ttft_p99_ms>+10%", "output_tokens_per_s<-5%", "error_rate>0.01")]
    assert not any(r.breached for r in judge_gates(base, [pr], gates))
    slower = judge_gates(pr, [base], gates)
    breached = {r.gate.text for r in slower if r.breached}
    assert breached == {"ttft_p99_ms>+10%", "output_tokens_per_s<-5%"}
    ttft = next(r for r in slower if r.gate.metric == "ttft_p99_ms")
    assert ttft.threshold == pytest.approx(ttft.baseline * 1.1) and "vs base" in ttft.reason


def test_gate_parsing_errors_say_what_to_write() -> None:
    with pytest.raises(ConfigError) as bad:
        parse_gate("ttft_p99_ms >> 3", KNOWN)
    assert bad.value.exit_code == 2 and "NAME OP VALUE" in (bad.value.hint or "")
    with pytest.raises(ConfigError) as unknown:
        parse_gate("ttft_p99>10", KNOWN)
    assert "ttft_p99_ms" in (unknown.value.hint or "")
    with pytest.raises(ConfigError) as relative:
        parse_gate("ttft_p99_ms>+10%", KNOWN, allow_relative=False)
    assert "tokspeed compare" in (relative.value.hint or "")
    gate = parse_gate(" e2e_p50_ms <= 1.5e3 ", KNOWN)
    assert (gate.metric, gate.op, gate.value, gate.relative) == ("e2e_p50_ms", "<=", 1500.0, False)


def test_a_gate_on_a_missing_metric_fails_loudly() -> None:
    base = run("main", SLOW)
    gate = parse_gate("goodput_requests_per_s<1", KNOWN)  # no SLOs: no goodput
    (result,) = judge_gates(base, [base], [gate])
    assert result.breached and "not measured" in result.reason


def test_differences_are_shown_loudly_in_every_format() -> None:
    from rich.console import Console

    from tokspeed.reports.compare_text import comparison_markdown, render_comparison

    c = compare_runs(run("main", SLOW), [run("pr", SLOW, config={"dataset": "synthetic"})], CompareSettings(resamples=200))
    console = Console(record=True, width=160)
    console.print(render_comparison(c))
    text = console.export_text()
    assert text.index("WARNING: pr and main may not be like for like") < text.index("TTFT p50")
    assert "dataset: 'builtin' in main, 'synthetic' in pr" in text
    md = comparison_markdown(c)
    assert "> **Warning:**" in md and "dataset: 'builtin' in main, 'synthetic' in pr" in md
