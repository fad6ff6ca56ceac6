"""compare_runs on hand-built runs with known differences; gates; workload differences; determinism."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tokspeed.compare.comparison import METRICS, CompareSettings
from tokspeed.compare.evidence import RunData, compare_runs, differences, judge_gates
from tokspeed.compare.gates import parse_gate
from tokspeed.compare.verdicts import orient
from tokspeed.errors import ConfigError
from tokspeed.metrics.schema import Summary
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource
from tokspeed.results import RunResult, build_benchmark
from tokspeed.telemetry.schema import ClientSummary, SeriesStats, TelemetrySummary

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
SLOW = rng.normal(80.0, 4.0, 200)  # 40 ms apart: beyond the 20 ms single-run floor
FAST = rng.normal(40.0, 2.0, 200)


def test_a_twice_faster_run_is_called_faster_with_the_right_ratio() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=500))
    m = metric(c, "ttft_p50_ms")
    assert m.verdict == "better" and m.word == "faster" and m.test == "bootstrap" and m.p_value < 0.005
    assert m.p_adjusted is not None and m.p_adjusted >= m.p_value and m.noise_floor == 0.03 and m.noise_floor_ms == 20.0
    factor, direction, _band = orient(m.ratio, m.ratio_ci95)
    assert direction == "lower" and factor == pytest.approx(2.0, abs=0.05)
    assert m.ratio_ci95[0] < m.ratio < m.ratio_ci95[1]
    assert m.sentence.startswith("pr: TTFT p50 ") and "× lower than main (adj. p = 0.0" in m.sentence
    # the other way round it is slower
    back = metric(compare_runs(run("pr", FAST), [run("main", SLOW)], CompareSettings(resamples=500)), "ttft_p50_ms")
    assert back.verdict == "worse" and back.word == "slower" and "higher than pr" in back.sentence


def test_same_distribution_is_no_significant_difference() -> None:
    a = np.random.default_rng(1).normal(40.0, 5.0, 300)
    b = np.random.default_rng(2).normal(40.0, 5.0, 300)
    c = compare_runs(run("main", a), [run("pr", b)], CompareSettings(resamples=500))
    for name in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms"):
        m = metric(c, name)
        assert m.verdict == "no significant difference", m.sentence
        assert "no significant difference from main" in m.sentence
    few = compare_runs(run("main", a[:150]), [run("pr", b[:150])], CompareSettings(resamples=500))
    p99 = metric(few, "ttft_p99_ms")  # p99 of 150 values is the largest two: not a test
    assert p99.verdict == "untested" and "too few values beyond p99 to test it (needs ≥ 300 TTFT values" in p99.sentence


def test_single_iteration_throughput_claims_no_significance() -> None:
    m = metric(compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=500)), "output_tokens_per_s")
    assert m.verdict == "untested" and m.test == "none" and m.ratio is not None and m.ratio > 1
    assert "single measurement: no significance" in m.sentence


def test_throughput_and_latency_across_iterations_use_welch_on_the_iterations() -> None:
    c = compare_runs(run("main", SLOW, iterations=4), [run("pr", FAST, iterations=4)], CompareSettings(resamples=500))
    for name in ("requests_per_s", "ttft_p50_ms", "ttft_p99_ms"):
        m = metric(c, name)
        assert m.test == "welch-iterations" and m.verdict == "better" and m.word == "faster", m.sentence
        assert m.ratio_ci95 is not None and m.ratio_ci95[0] < m.ratio < m.ratio_ci95[1] and m.noise_floor is None
    assert c.runs[0].benchmarks[0].other_iterations == 4


def test_error_rate_uses_fishers_exact_test() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", SLOW, errors=40)], CompareSettings(resamples=500))
    m = metric(c, "error_rate")
    from scipy import stats

    assert m.p_value == pytest.approx(stats.fisher_exact([[0, 200], [40, 200]]).pvalue)
    assert m.test == "fisher-exact" and m.verdict == "worse" and m.word == "more errors"
    assert m.base == 0.0 and m.ratio is None and "vs 0.00% in main" in m.sentence


def test_results_are_deterministic_and_independent_of_other_runs() -> None:
    base, pr = run("main", SLOW), run("pr", FAST)
    one = compare_runs(base, [pr], CompareSettings(resamples=500))
    again = compare_runs(base, [pr], CompareSettings(resamples=500))
    assert one.model_dump() == again.model_dump()
    other_seed = compare_runs(base, [pr], CompareSettings(resamples=500, seed=1))
    assert metric(one, "ttft_p50_ms").ratio_ci95 != metric(other_seed, "ttft_p50_ms").ratio_ci95


def test_runs_under_different_metric_definitions_are_flagged() -> None:
    base, other = run("main", SLOW), run("pr", SLOW)
    assert base.result.metric_spec == "tokspeed.metrics/2"
    other.result.metric_spec = "tokspeed.metrics/1"
    assert differences(base, other) == ["metric definitions: tokspeed.metrics/2 in main, tokspeed.metrics/1 in pr"]


def test_different_workloads_are_flagged() -> None:
    base = run("main", SLOW)
    other = run("pr", SLOW, config={"dataset": "synthetic", "output_tokens": "256", "concurrency": 8})
    found = differences(base, other)
    assert any(d.startswith("dataset:") for d in found)
    assert any(d.startswith("output_tokens:") for d in found)
    assert any(d.startswith("concurrency:") for d in found)
    assert differences(base, run("pr", FAST)) == []
    c = compare_runs(base, [other], CompareSettings(resamples=500))
    assert c.runs[0].differences == found


def test_comparison_json_round_trips() -> None:
    c = compare_runs(run("main", SLOW), [run("pr", FAST)], CompareSettings(resamples=500))
    data = c.model_dump(mode="json", by_alias=True)
    assert data["schema"] == "tokspeed.compare/2"
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

    c = compare_runs(run("main", SLOW), [run("pr", SLOW, config={"dataset": "synthetic"})], CompareSettings(resamples=500))
    console = Console(record=True, width=160)
    console.print(render_comparison(c))
    text = console.export_text()
    assert text.index("WARNING: pr and main may not be like for like") < text.index("TTFT p50")
    assert "dataset: 'builtin' in main, 'synthetic' in pr" in text
    md = comparison_markdown(c)
    assert "> **Warning:**" in md and "dataset: 'builtin' in main, 'synthetic' in pr" in md


def noisy_run(label: str, rng: np.random.Generator, n: int = 150, ttft_ms: float = 40.0, itl_ms: float = 10.0,
              tokens: int = 16, tail: float = 0.0, tail_ms: float = 0.0, level: float = 1.0) -> RunData:
    """Requests whose tokens share a per-request speed (correlated ITL), TTFT lognormal around
    `ttft_ms`; a fraction `tail` of them `tail_ms` slower to first token; `level` scales the run."""
    records, t = [], 0
    for i in range(n):
        speed = rng.lognormal(0.0, 0.1) * level
        ttft = ttft_ms * rng.lognormal(0.0, 0.2) * level + (tail_ms if rng.random() < tail else 0.0)
        first = t + int(ttft * MS)
        gaps = itl_ms * speed * rng.lognormal(0.0, 0.05, tokens - 1)
        chunks = [first, *(first + np.cumsum(gaps * MS).astype(np.int64)).tolist()]
        records.append(RequestRecord(
            index=i, iteration=1, warmup=False, scheduled_ns=t, sent_ns=t, first_token_ns=first, first_content_ns=first,
            end_ns=chunks[-1], chunk_ns=chunks, output_tokens=tokens, output_tokens_source=TokenSource.USAGE,
            input_tokens=100, input_tokens_source=TokenSource.USAGE))  # fmt: skip
        t = chunks[-1] + MS
    bench = build_benchmark("concurrency 1", {"kind": "concurrency", "concurrency": 1}, records, [])
    cfg = {"dataset": "builtin", "api": "chat", "output_tokens": "16", "profile": "concurrency", "concurrency": 1}
    result = RunResult(status="complete", started_at="2026-01-01T00:00:00+00:00", config=cfg, benchmarks=[bench],
                       target={"model": "m"})
    return RunData(label, f"runs/{label}", result, records)


def claims(c: Any) -> list[str]:
    return [m.sentence for m in c.runs[0].benchmarks[0].metrics if m.verdict in ("better", "worse")]


def test_identical_settings_rarely_claim_a_difference() -> None:
    """30 pairs of runs from one distribution, each run shifted by its own 1% run-to-run noise:
    Benjamini–Hochberg over each pair's 10 metrics and the 3% relative floor hold the pairs with
    any claim near 5% or below (1 of 30 seen). The absolute 20 ms floor is off here: against
    40 ms TTFTs it alone would silence every row."""
    rng = np.random.default_rng(77)
    settings = CompareSettings(resamples=500, single_run_noise_ms=0)
    pairs = 30
    claimed = []
    for k in range(pairs):
        a = noisy_run("a", rng, level=rng.lognormal(0.0, 0.01))
        b = noisy_run("b", rng, level=rng.lognormal(0.0, 0.01))
        found = claims(compare_runs(a, [b], settings.model_copy(update={"seed": k})))
        if found:
            claimed.append(found)
    assert len(claimed) <= 3, claimed  # 5% of 30 is 1.5; binomial(30, 0.05) ≤ 3 with 94% probability


def test_a_tail_regression_is_called_on_p99_not_p50() -> None:
    """5% of requests +500 ms to first token: TTFT p99 is worse; p50 barely moves and is not called worse."""
    rng = np.random.default_rng(5)
    base = noisy_run("main", rng, n=300)
    slow = noisy_run("pr", rng, n=300, tail=0.05, tail_ms=500.0)
    c = compare_runs(base, [slow], CompareSettings(resamples=1000))  # 5% of requests 500 ms later: beyond every floor
    p99, p50 = metric(c, "ttft_p99_ms"), metric(c, "ttft_p50_ms")
    assert p99.verdict == "worse" and p99.ratio > 5 and p99.test == "bootstrap", p99.sentence
    assert p50.verdict != "worse", p50.sentence
    assert p99.p_value != p50.p_value  # each quantile row has its own test


def test_small_itl_changes_between_single_runs_are_inconclusive_and_large_ones_detected() -> None:
    rng = np.random.default_rng(9)
    base = noisy_run("main", rng, n=400)  # per-request speed varies by 10%: ±1.7% on the ratio of medians
    five = noisy_run("pr", rng, n=400, itl_ms=10.5)
    quiet = CompareSettings(resamples=1000, single_run_noise_ms=0)  # an idle client: only the relative floors
    m = metric(compare_runs(base, [five], quiet), "itl_p50_ms")
    assert m.verdict == "worse" and 1.03 < m.ratio < 1.08, m.sentence
    busy = metric(compare_runs(base, [five], CompareSettings(resamples=1000)), "itl_p50_ms")  # 0.5 ms < 20 ms
    assert busy.verdict == "inconclusive" and "(3% at p50 or 20 ms)" in busy.sentence, busy.sentence
    few = noisy_run("main", rng, n=20)
    one = noisy_run("pr", rng, n=20, itl_ms=10.1)
    c = compare_runs(few, [one], CompareSettings(resamples=1000))
    for name in ("itl_p50_ms", "itl_p99_ms"):
        m = metric(c, name)
        assert m.verdict in ("no significant difference", "inconclusive", "negligible"), m.sentence


def test_a_significant_change_within_the_noise_floor_is_inconclusive() -> None:
    rng = np.random.default_rng(3)
    base = noisy_run("main", rng, n=2000)
    other = noisy_run("pr", rng, n=2000, itl_ms=10.2)  # 2%: clear within the run, below the 3% floor
    m = metric(compare_runs(base, [other], CompareSettings(resamples=1000, single_run_noise_ms=0)), "itl_p50_ms")
    assert m.verdict == "inconclusive" and m.word == "inconclusive — repeat with --iterations", m.sentence
    assert "within the run-to-run noise of single runs (3% at p50 or 0 ms)" in m.sentence
    assert "--iterations" in m.sentence


def on_host(data: RunData, host_cpu_pct: float) -> RunData:
    """The run as if its telemetry had seen the host's CPU at `host_cpu_pct` (mean over the window)."""
    bench = data.result.benchmarks[0]
    telemetry = TelemetrySummary(interval_s=0.25, client=ClientSummary(host_cpu_pct=SeriesStats(mean=host_cpu_pct, samples=4)))
    result = data.result.model_copy(update={"benchmarks": [bench.model_copy(update={"telemetry": telemetry})]})
    return RunData(data.label, data.path, result, data.records)


def test_a_change_between_single_runs_on_a_saturated_host_must_exceed_50_ms_and_25_percent() -> None:
    """Back-to-back identical runs on a saturated 2-core host differed by 15-30 ms at TTFT p50 (the
    server shared the busy cores): there a 40 ms change (2×) between single runs is inconclusive, on
    an idle host it is claimed, and a 7× tail regression is claimed either way."""
    settings = CompareSettings(resamples=500)
    for cpu, expected in ((55.0, "better"), (100.0, "inconclusive")):
        c = compare_runs(on_host(run("main", SLOW), cpu), [on_host(run("pr", FAST), 50.0)], settings)
        m = metric(c, "ttft_p50_ms")
        assert m.verdict == expected, m.sentence
    assert "(25% or 50 ms: the host was saturated (mean host CPU 100%))" in m.sentence, m.sentence
    assert m.noise_floor == 0.25 and m.noise_floor_ms == 50.0
    rng = np.random.default_rng(5)
    base, slow = noisy_run("main", rng, n=300), noisy_run("pr", rng, n=300, tail=0.05, tail_ms=500.0)
    p99 = metric(compare_runs(on_host(base, 100.0), [on_host(slow, 100.0)], settings), "ttft_p99_ms")
    assert p99.verdict == "worse" and p99.ratio > 5, p99.sentence


def test_a_significance_gate_fails_only_on_a_significant_breach() -> None:
    tested = [m.name for m in METRICS]
    gate = parse_gate("ttft_p99_ms>+10%!", KNOWN, tested=tested)
    assert gate.significant and gate.relative and gate.value == 10.0
    rng = np.random.default_rng(21)
    base, same = noisy_run("main", rng, n=40), noisy_run("pr", rng, n=40)
    plain = parse_gate("ttft_p99_ms>+0%", KNOWN, tested=tested)
    loose = parse_gate("ttft_p99_ms>+0%!", KNOWN, tested=tested)
    # identical settings: one of the two p99s is higher, so the plain gate fails one way round;
    # the significance gate passes both ways
    for a, b in ((base, same), (same, base)):
        c = compare_runs(a, [b], CompareSettings(resamples=500))
        results = judge_gates(a, [b], [plain, loose], c)
        assert not results[1].breached and "compare: " in results[1].reason, results[1].reason
    assert any(r.breached for a, b in ((base, same), (same, base)) for r in judge_gates(a, [b], [plain]))
    slow = noisy_run("pr", rng, n=300, tail=0.05, tail_ms=500.0)
    big = noisy_run("main", rng, n=300)
    (result,) = judge_gates(big, [slow], [gate])  # computes the comparison itself
    assert result.breached and "compare: worse" in result.reason


def test_gates_that_cannot_mean_what_they_say_are_errors() -> None:
    with pytest.raises(ConfigError) as bare:
        parse_gate("ttft_p99_ms>+10", KNOWN)
    assert bare.value.exit_code == 2 and "'ttft_p99_ms>+10%'" in (bare.value.hint or "") and "'ttft_p99_ms>10'" in (bare.value.hint or "")
    with pytest.raises(ConfigError) as negative:
        parse_gate("output_tokens_per_s<-5", KNOWN)
    assert "'output_tokens_per_s<-5%'" in (negative.value.hint or "")
    with pytest.raises(ConfigError) as untested:
        parse_gate("goodput_requests_per_s<-5%!", KNOWN, tested=["ttft_p99_ms"])
    assert "does not test goodput_requests_per_s" in str(untested.value)
    with pytest.raises(ConfigError) as single:
        parse_gate("ttft_p99_ms>500!", KNOWN, allow_relative=False)
    assert "tokspeed compare" in (single.value.hint or "")
    assert parse_gate("ttft_p99_ms>10", KNOWN).relative is False


def test_runs_differing_in_target_or_lengths_are_flagged_with_what_that_undermines() -> None:
    rng = np.random.default_rng(8)
    base, other = noisy_run("main", rng), noisy_run("pr", rng, tokens=11)
    other.result.target = {"model": "m-awq", "url": "http://b/v1"}
    base.result.target = {"model": "m", "url": "http://a/v1"}
    found = differences(base, other)
    assert "target model: 'm' in main, 'm-awq' in pr: every verdict compares different models (fine if that is the question)" in found
    assert any(d.startswith("target url: 'http://a/v1' in main, 'http://b/v1' in pr") for d in found)
    (lengths,) = [d for d in found if d.startswith("output tokens per request")]
    assert "mean 16 in main, 11 in pr (-31.2%)" in lengths and "E2E and throughput verdicts" in lengths
    assert not any(d.startswith("prompt tokens") for d in found)


def test_percentiles_compare_each_latency_family_at_each_asked_quantile() -> None:
    """--percentiles 75,95,99.9: a row per family and quantile, valued from the requests, each judged on its own quantile."""
    rng = np.random.default_rng(7)
    base = noisy_run("main", rng, n=400)
    slow = noisy_run("pr", rng, n=400, tail=0.10, tail_ms=500.0)
    c = compare_runs(base, [slow], CompareSettings(resamples=1000, percentiles=(75.0, 95.0, 99.9)))
    names = [m.metric for m in c.runs[0].benchmarks[0].metrics]
    quantiles = {"p75": 75.0, "p95": 95.0, "p999": 99.9}
    latency = [n for n in names if n.endswith("_ms")]
    assert latency == [f"{f}_{q}_ms" for f in ("ttft", "itl", "tpot", "e2e") for q in quantiles], names
    assert "ttft_p50_ms" not in names and {"output_tokens_per_s", "requests_per_s", "error_rate"} <= set(names)
    for data, side in ((base, "base"), (slow, "other")):
        ttfts = [(r.first_token_ns - r.sent_ns) / MS for r in data.records if r.first_token_ns is not None]
        for name, q in quantiles.items():
            m = metric(c, f"ttft_{name}_ms")
            value = m.base if side == "base" else m.other
            assert value == pytest.approx(np.percentile(ttfts, q), rel=0.01), (side, q, value)
    # a 10% tail 500 ms slower moves p95 by ~500 ms and p75 by under a millisecond
    assert metric(c, "ttft_p95_ms").verdict == "worse", metric(c, "ttft_p95_ms").sentence
    assert metric(c, "ttft_p75_ms").verdict != "worse", metric(c, "ttft_p75_ms").sentence
    # 400 requests a side cannot bound a p99.9: no verdict either way
    assert metric(c, "ttft_p999_ms").verdict == "untested", metric(c, "ttft_p999_ms").sentence
