"""Compare saved runs against a baseline: values, deltas, ratios with uncertainty, verdicts.

Pure: runs (result + records) in, a `Comparison` (see `tokspeed.comparison`) out.
For each pair of benchmarks (matched by position) and each compared metric:

* latency percentiles (TTFT, ITL, TPOT, E2E p50/p99): ratio = other / base of the
  summary values; its 95% interval is the percentile interval of the ratio over
  `resamples` seeded bootstrap resamples of each run's requests (a request's
  ITL values are resampled together); the p-value is a two-sided Mann–Whitney U
  test of the per-request values (ITL: each request's mean ITL).
* throughput (output tokens/s, requests/s): across-iteration values when both
  runs have ≥ 2 iterations — Welch's t test, ratio interval by the delta method
  on the log scale; otherwise a single measurement, and no significance is claimed.
* error rate: two-proportion z test on errored / finished requests.

`tokspeed.verdicts` turns that evidence into a verdict and a sentence. Runs whose
workload or load differ are flagged in `differences`, never silently compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokspeed.comparison import (
    METRICS,
    BenchmarkComparison,
    CompareSettings,
    Comparison,
    Metric,
    MetricComparison,
    RunComparison,
    RunRef,
)
from tokspeed.gates import Gate, GateResult, judge
from tokspeed.metrics.iterations import t_critical_95
from tokspeed.metrics.samples import RequestSamples, request_samples
from tokspeed.metrics.significance import (
    ClusteredSample,
    bootstrap_quantiles,
    mann_whitney_u,
    ratio_interval,
    thin,
    two_proportions,
    welch_t,
)
from tokspeed.records import RequestRecord
from tokspeed.results import Benchmark, RunResult
from tokspeed.run_records import records_by_benchmark
from tokspeed.verdicts import Evidence, Finding, sentence, verdict, word

THROUGHPUT = ("output_tokens_per_s", "requests_per_s")
# config keys that change what is measured; load keys matter only for their profile
WORKLOAD_KEYS = ("dataset", "api", "stream", "output_tokens", "input_tokens", "extra_body", "include_usage", "profile")
LOAD_KEYS = {"concurrency": ("concurrency",), "rate": ("rate", "arrival", "burstiness", "max_concurrency")}


@dataclass(frozen=True, slots=True)
class RunData:
    """A loaded run: what `load_run` returned, with a label and the path it came from."""

    label: str
    path: str
    result: RunResult
    records: list[RequestRecord]

    def ref(self) -> RunRef:
        return RunRef(
            label=self.label,
            path=self.path,
            status=self.result.status,
            model=self.result.target.get("model"),
            started_at=self.result.started_at,
        )

    def benchmark_records(self) -> list[list[RequestRecord]] | None:
        return records_by_benchmark(self.result.benchmarks, self.records)


@dataclass(frozen=True, slots=True)
class _Side:
    """One benchmark of one run, ready to compare."""

    bench: Benchmark
    samples: RequestSamples | None
    boot: dict[str, np.ndarray]  # family -> resamples × quantiles (in METRICS order)


def compare_runs(base: RunData, others: Sequence[RunData], settings: CompareSettings | None = None) -> Comparison:
    """Compare each run in `others` with `base`, benchmark by benchmark."""
    cfg = settings or CompareSettings()
    base_sides = _sides(base, 0, cfg)
    runs = []
    for i, other in enumerate(others, start=1):
        sides = _sides(other, i, cfg)
        pairs = list(zip(base_sides, sides))
        runs.append(
            RunComparison(
                run=other.ref(),
                differences=differences(base, other),
                benchmarks=[_compare_benchmark(b, o, base.label, other.label, cfg) for b, o in pairs],
            )
        )
    return Comparison(base=base.ref(), runs=runs, settings=cfg)


def judge_gates(base: RunData, others: Sequence[RunData], gates: Sequence[Gate]) -> list[GateResult]:
    """Every gate on every benchmark of every other run (relative gates against the base's)."""
    results = []
    for other in others:
        for b, o in zip(base.result.benchmarks, other.result.benchmarks):
            base_flat, other_flat = b.summary.flat(), o.summary.flat()
            for gate in gates:
                results.append(judge(gate, other_flat.get(gate.metric), base_flat.get(gate.metric), other.label, o.name))
    return results


def differences(base: RunData, other: RunData) -> list[str]:
    """What differs between two runs' workloads and loads, one line each (empty: comparable)."""
    out = []
    a, b = base.result, other.result
    unknown = [run.label for run in (base, other) if not run.result.config]
    if unknown:
        out.append(f"the configuration of {' and '.join(unknown)} is unknown (no run.json): the workloads cannot be checked")
    else:
        for key in dict.fromkeys(_relevant_keys(a.config) + _relevant_keys(b.config)):
            va, vb = a.config.get(key), b.config.get(key)
            if va != vb:
                out.append(f"{key}: {_show(va)} in {base.label}, {_show(vb)} in {other.label}")
    if a.metric_spec != b.metric_spec:
        out.append(f"metric definitions: {a.metric_spec} in {base.label}, {b.metric_spec} in {other.label}")
    if len(a.benchmarks) != len(b.benchmarks):
        out.append(
            f"{base.label} has {len(a.benchmarks)} benchmarks, {other.label} has {len(b.benchmarks)}: "
            f"compared the first {min(len(a.benchmarks), len(b.benchmarks))}"
        )
    for x, y in zip(a.benchmarks, b.benchmarks):
        if x.profile != y.profile:
            out.append(f"load profile: {x.name} in {base.label}, {y.name} in {other.label}")
    for run, result in ((base, a), (other, b)):
        if result.status != "complete":
            out.append(f"{run.label} is {result.status}, not complete")
    return sorted(set(out), key=out.index)


def _relevant_keys(config: dict[str, object]) -> list[str]:
    """The workload keys, then the load keys of the config's profile, in a fixed order."""
    keys = [*WORKLOAD_KEYS, *LOAD_KEYS.get(str(config.get("profile")), ())]
    return [k for k in keys if k in config]


def _show(value: object) -> str:
    return "unset" if value is None else repr(value) if isinstance(value, str) else str(value)


def _sides(run: RunData, run_index: int, cfg: CompareSettings) -> list[_Side]:
    groups = run.benchmark_records()
    sides = []
    for b_index, bench in enumerate(run.result.benchmarks):
        records = groups[b_index] if groups is not None else []
        samples = request_samples(records) if records else None
        if samples is not None and samples.count == 0:
            samples = None
        boot = _bootstrap(samples, (cfg.seed, run_index, b_index), cfg) if samples is not None else {}
        sides.append(_Side(bench=bench, samples=samples, boot=boot))
    return sides


def _bootstrap(samples: RequestSamples, key: tuple[int, int, int], cfg: CompareSettings) -> dict[str, np.ndarray]:
    """Bootstrap quantiles per family; each family has its own seeded stream, so results never
    depend on how many runs are compared or in which order families are computed."""
    out = {}
    for f_index, family in enumerate(_families()):
        rng = np.random.default_rng([*key, f_index])
        values, owner = samples.values(family)
        sample = ClusteredSample.of(*thin(values, owner, cfg.max_bootstrap_values, rng))
        out[family] = bootstrap_quantiles(sample, _quantiles(family), cfg.resamples, rng)
    return out


def _families() -> list[str]:
    return list(dict.fromkeys(m.family for m in METRICS if m.family is not None))


def _quantiles(family: str) -> tuple[float, ...]:
    return tuple(m.quantile for m in METRICS if m.family == family and m.quantile is not None)


def _compare_benchmark(b: _Side, o: _Side, base_label: str, other_label: str, cfg: CompareSettings) -> BenchmarkComparison:
    bf, of = b.bench.summary.flat(), o.bench.summary.flat()
    metrics = []
    for m in METRICS:
        base_v, other_v = bf.get(m.name), of.get(m.name)
        if m.family is not None:
            evidence = _latency_evidence(m, b, o)
        elif m.name in THROUGHPUT:
            evidence = _throughput_evidence(m, b.bench, o.bench, base_v, other_v)
        else:
            evidence = _error_evidence(b.bench, o.bench)
        metrics.append(_judged(Finding(m, base_v, other_v, evidence), base_label, other_label, cfg))
    return BenchmarkComparison(
        base_name=b.bench.name,
        other_name=o.bench.name,
        base_requests=b.bench.summary.requests.completed,
        other_requests=o.bench.summary.requests.completed,
        metrics=metrics,
    )


def _latency_evidence(m: Metric, b: _Side, o: _Side) -> Evidence:
    assert m.family is not None and m.quantile is not None
    if b.samples is None or o.samples is None:
        return Evidence(None, None, "none", "no per-request samples (requests.jsonl missing or not attributable)")
    column = _quantiles(m.family).index(m.quantile)
    ci = ratio_interval(b.boot[m.family][:, column], o.boot[m.family][:, column])
    test = mann_whitney_u(b.samples.per_request(m.family), o.samples.per_request(m.family))
    if test is None or ci is None:
        return Evidence(ci, None, "none", f"too few {m.label.split()[0]} values to test")
    return Evidence(ci, test.p_value, "mann-whitney")


def _throughput_evidence(m: Metric, b: Benchmark, o: Benchmark, base_v: float | None, other_v: float | None) -> Evidence:
    xs = _iteration_values(b, m.name)
    ys = _iteration_values(o, m.name)
    if len(xs) < 2 or len(ys) < 2:
        return Evidence(None, None, "none", "single measurement: no significance; run both with --iterations 3 or more")
    test = welch_t(np.array(xs), np.array(ys))
    if test is None or not base_v or other_v is None:
        return Evidence(None, None, "none", "too few values to test")
    return Evidence(_log_ratio_interval(xs, ys, base_v, other_v, test.df), test.p_value, "welch")


def _iteration_values(bench: Benchmark, name: str) -> list[float]:
    return [v for it in bench.iterations if (v := it.summary.flat().get(name)) is not None]


def _log_ratio_interval(xs: list[float], ys: list[float], base_v: float, other_v: float, df: float) -> tuple[float, float] | None:
    """ratio × exp(± t · √(s_x²/(n_x x̄²) + s_y²/(n_y ȳ²))): the delta method on log(ratio)."""
    mx, my = float(np.mean(xs)), float(np.mean(ys))
    if mx <= 0 or my <= 0 or other_v <= 0:
        return None
    se = math.sqrt(np.var(xs, ddof=1) / (len(xs) * mx * mx) + np.var(ys, ddof=1) / (len(ys) * my * my))
    t = t_critical_95(max(1, int(df))) if math.isfinite(df) else 1.96
    ratio = other_v / base_v
    return ratio * math.exp(-t * se), ratio * math.exp(t * se)


def _error_evidence(b: Benchmark, o: Benchmark) -> Evidence:
    rb, ro = b.summary.requests, o.summary.requests
    test = two_proportions(rb.errored, rb.completed + rb.errored, ro.errored, ro.completed + ro.errored)
    if test is None:
        return Evidence(None, None, "none", "no finished requests")
    return Evidence(None, test.p_value, "two-proportion")


def _judged(f: Finding, base_label: str, other_label: str, cfg: CompareSettings) -> MetricComparison:
    if f.delta is None:
        missing = [label for label, v in ((base_label, f.base), (other_label, f.other)) if v is None]
        f = Finding(f.metric, f.base, f.other, Evidence(f.evidence.ci, None, "none", f"not measured in {' or '.join(missing)}"))
    v = verdict(f, cfg)
    m, e = f.metric, f.evidence
    return MetricComparison(
        metric=m.name,
        label=m.label,
        unit=m.unit,
        better=m.better,
        base=f.base,
        other=f.other,
        delta=f.delta,
        ratio=f.ratio,
        ratio_ci95=e.ci,
        p_value=e.p_value,
        test=e.test,
        verdict=v,
        word=word(m, v),
        note=e.note,
        sentence=sentence(f, v, other_label, base_label, cfg),
    )
