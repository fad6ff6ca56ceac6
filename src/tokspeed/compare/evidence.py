"""Compare saved runs against a baseline: values, deltas, ratios with uncertainty, verdicts.

Pure: runs (result + records) in, a `Comparison` (see `tokspeed.compare.comparison`) out.
For each pair of benchmarks (matched by position) and each compared metric
(method in full: docs/compare.md):

* latency percentiles (TTFT, ITL, TPOT, E2E p50/p99), each row tested on its own quantile:
  - both runs with ≥ 2 complete iterations: Welch's t test on the iterations' values of
    that quantile, log scale (run-to-run spread is in the interval, as for throughput);
  - otherwise: the percentile interval of the ratio of that quantile over `resamples`
    seeded bootstrap resamples of each run's requests (a request's ITL values are
    resampled together) and the bootstrap p-value on the same draws; a change within
    the single-run noise floor (`CompareSettings.single_run_noise`) is inconclusive.
* throughput (output tokens/s, requests/s): Welch's t across complete iterations when both
  runs have ≥ 2; otherwise a single measurement, and no significance is claimed.
* error rate: Fisher's exact test on errored / finished requests.

The p-values of one benchmark's metrics are adjusted together (Benjamini–Hochberg);
`tokspeed.compare.verdicts` turns that evidence into a verdict and a sentence. Runs whose
workload, target or load differ are flagged in `differences`, never silently compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tokspeed.compare.comparison import (
    SATURATED_HOST_CPU_PCT,
    BenchmarkComparison,
    CompareSettings,
    Comparison,
    Metric,
    MetricComparison,
    RunComparison,
    RunRef,
    compared_metrics,
)
from tokspeed.compare.gates import Gate, GateResult, judge
from tokspeed.compare.verdicts import Evidence, Finding, sentence, verdict, word
from tokspeed.metrics.samples import RequestSamples, request_samples
from tokspeed.records import RequestRecord
from tokspeed.results import Benchmark, IterationResult, RunResult
from tokspeed.results.records import records_by_benchmark
from tokspeed.stats.significance import (
    ClusteredSample,
    adjust,
    bootstrap_quantiles,
    bootstrap_ratio,
    fisher_p,
    thin,
    welch_log_ratio,
)

THROUGHPUT = ("output_tokens_per_s", "requests_per_s")
# config keys that change what is measured; load keys matter only for their profile
WORKLOAD_KEYS = ("dataset", "api", "stream", "output_tokens", "input_tokens", "extra_body", "include_usage", "profile")
LOAD_KEYS = {"concurrency": ("concurrency",), "rate": ("rate", "arrival", "burstiness", "max_concurrency")}
TARGET_KEYS = ("kind", "url", "model", "api")
# a single run's quantile is bootstrapped only with this many values beyond it (p99: 300 values):
# with fewer, p99 is the run's largest value or two, and resampling the largest value is no test
MIN_BEYOND = 3
LENGTH_TOLERANCE = 0.05  # output or prompt lengths whose mean or median differ by more: flagged
# what a difference undermines, said after it
UNDERMINES = {
    "kind": "every verdict compares different engines (fine if that is the question)",
    "url": "every verdict compares different servers (fine if that is the question)",
    "model": "every verdict compares different models (fine if that is the question)",
    "api": "TTFT, E2E and throughput differ by API framing as well as by speed",
    "profile": "every latency and throughput verdict: load changes both",
    "output": "E2E and throughput verdicts (longer answers take longer); TTFT, ITL and TPOT stand",
    "input": "TTFT and E2E verdicts (longer prompts take longer to prefill) and throughput",
}


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

def run_labels(paths: Sequence[Path]) -> list[str]:
    """A label per run: its directory's name; its path where names repeat; `#i` where paths repeat too."""
    names = [p.resolve().name or str(p) for p in paths]
    labels = [n if names.count(n) == 1 else str(p) for n, p in zip(names, paths)]
    return [lab if labels.count(lab) == 1 else f"{lab}#{i + 1}" for i, lab in enumerate(labels)]


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


def judge_gates(base: RunData, others: Sequence[RunData], gates: Sequence[Gate],
                comparison: Comparison | None = None) -> list[GateResult]:
    """Every gate on every benchmark of every other run (relative gates against the base's).

    Significance gates (`!`) read the verdicts of `comparison` (computed here when not given).
    """
    if comparison is None and any(g.significant for g in gates):
        comparison = compare_runs(base, others)
    results = []
    for i, other in enumerate(others):
        for j, (b, o) in enumerate(zip(base.result.benchmarks, other.result.benchmarks)):
            base_flat, other_flat = b.summary.flat(), o.summary.flat()
            verdicts = {} if comparison is None else {m.metric: m.verdict for m in comparison.runs[i].benchmarks[j].metrics}
            for gate in gates:
                results.append(judge(gate, other_flat.get(gate.metric), base_flat.get(gate.metric), other.label, o.name,
                                     verdicts.get(gate.metric)))
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
    for key in TARGET_KEYS:
        va, vb = a.target.get(key), b.target.get(key)
        if va != vb and not (va is None and vb is None):
            out.append(f"target {key}: {_show(va)} in {base.label}, {_show(vb)} in {other.label}: {UNDERMINES[key]}")
    for x, y in zip(a.benchmarks, b.benchmarks):
        if x.profile != y.profile:
            out.append(f"load profile: {x.name} in {base.label}, {y.name} in {other.label}: {UNDERMINES['profile']}")
        out += _length_differences(x, y, base.label, other.label)
    for run, result in ((base, a), (other, b)):
        if result.status != "complete":
            out.append(f"{run.label} is {result.status}, not complete")
    return sorted(set(out), key=out.index)


def _length_differences(x: Benchmark, y: Benchmark, base_label: str, other_label: str) -> list[str]:
    """Output and prompt lengths that differ by more than `LENGTH_TOLERANCE` (mean or median)."""
    out = []
    for field, what, undermines in (("output_tokens", "output tokens per request", "output"),
                                    ("input_tokens", "prompt tokens per request", "input")):
        dx, dy = getattr(x.summary, field), getattr(y.summary, field)
        if not dx.count or not dy.count or dx.mean is None or dy.mean is None:
            continue
        changes = [(stat, vx, vy) for stat in ("mean", "p50") if (vx := dx.stat(stat)) is not None
                   and (vy := dy.stat(stat)) is not None and _relative_change(vx, vy) > LENGTH_TOLERANCE]
        if changes:
            stat, vx, vy = changes[0]
            change = (vy / vx - 1.0) if vx else float("inf")
            out.append(f"{what} ({x.name}): {stat} {vx:,.4g} in {base_label}, {vy:,.4g} in {other_label} "
                       f"({change:+.1%}): {UNDERMINES[undermines]}")
    return out


def _relative_change(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(b - a) / max(abs(a), abs(b))


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
    for f_index, family in enumerate(_families(cfg)):
        rng = np.random.default_rng([*key, f_index])
        values, owner = samples.values(family)
        sample = ClusteredSample.of(*thin(values, owner, cfg.max_bootstrap_values, rng))
        out[family] = bootstrap_quantiles(sample, _quantiles(family, cfg), cfg.resamples, rng)
    return out


def _families(cfg: CompareSettings) -> list[str]:
    return list(dict.fromkeys(m.family for m in compared_metrics(cfg.percentiles) if m.family is not None))


def _quantiles(family: str, cfg: CompareSettings) -> tuple[float, ...]:
    return tuple(m.quantile for m in compared_metrics(cfg.percentiles) if m.family == family and m.quantile is not None)


def _side_value(flat: dict[str, float | None], side: _Side, m: Metric) -> float | None:
    """The run's value of `m`: from its summary, else (a --percentiles the run was not made with)
    numpy's percentile of its completed requests' values (ITL: every token's)."""
    value = flat.get(m.name)
    if value is not None or m.quantile is None or m.family is None or side.samples is None:
        return value
    values = side.samples.values(m.family)[0]
    values = values[~np.isnan(values)]
    return float(np.percentile(values, m.quantile)) if values.size else None


def _compare_benchmark(b: _Side, o: _Side, base_label: str, other_label: str, cfg: CompareSettings) -> BenchmarkComparison:
    bf, of = b.bench.summary.flat(), o.bench.summary.flat()
    findings = []
    for m in compared_metrics(cfg.percentiles):
        base_v, other_v = _side_value(bf, b, m), _side_value(of, o, m)
        if m.family is not None:
            evidence = _latency_evidence(m, b, o, base_v, other_v, cfg)
        elif m.name in THROUGHPUT:
            evidence = _throughput_evidence(m, b.bench, o.bench, base_v, other_v)
        else:
            evidence = _error_evidence(b.bench, o.bench)
        findings.append(Finding(m, base_v, other_v, evidence))
    adjusted = adjust([f.evidence.p_value if f.delta is not None else None for f in findings])
    findings = [replace(f, evidence=replace(f.evidence, p_adjusted=p)) for f, p in zip(findings, adjusted)]
    return BenchmarkComparison(
        base_name=b.bench.name,
        other_name=o.bench.name,
        base_requests=b.bench.summary.requests.completed,
        other_requests=o.bench.summary.requests.completed,
        base_iterations=len(complete_iterations(b.bench)),
        other_iterations=len(complete_iterations(o.bench)),
        metrics=[_judged(f, base_label, other_label, cfg) for f in findings],
    )


def complete_iterations(bench: Benchmark) -> list[IterationResult]:
    """The iterations that ran to their end (a partial one is left out of across-iteration figures)."""
    return [it for it in bench.iterations if not it.partial]


def _latency_evidence(m: Metric, b: _Side, o: _Side, base_v: float | None, other_v: float | None,
                      cfg: CompareSettings) -> Evidence:
    """With ≥ 2 iterations on both sides: Welch's t on the iterations' values of this quantile (the
    run-to-run spread is in it). Else the request bootstrap of this quantile's ratio, judged
    against the single-run noise floor."""
    assert m.family is not None and m.quantile is not None
    xs, ys = _iteration_values(b.bench, m.name), _iteration_values(o.bench, m.name)
    if len(xs) >= 2 and len(ys) >= 2 and base_v and other_v:
        test = welch_log_ratio(xs, ys, other_v / base_v)
        if test is not None:
            return Evidence(test.ci, test.p_value, "welch-iterations")
    floor, floor_ms, why = _single_run_noise(m, b.bench, o.bench, base_v, cfg)
    if b.samples is None or o.samples is None:
        return Evidence(None, None, "none", "no per-request samples (requests.jsonl missing or not attributable)")
    short = [values for values in (b.samples.values(m.family)[0], o.samples.values(m.family)[0])
             if np.count_nonzero(~np.isnan(values)) * (1.0 - m.quantile / 100.0) < MIN_BEYOND]
    if short:
        need = math.ceil(MIN_BEYOND / (1.0 - m.quantile / 100.0))
        return Evidence(None, None, "none", f"too few values beyond p{m.quantile:g} to test it "
                        f"(needs ≥ {need:,} {m.label.split()[0]} values per run, or --iterations on both)")
    column = _quantiles(m.family, cfg).index(m.quantile)
    test = bootstrap_ratio(b.boot[m.family][:, column], o.boot[m.family][:, column])
    if test is None:
        return Evidence(None, None, "none", f"too few {m.label.split()[0]} values to test")
    return Evidence(test.ci, test.p_value, "bootstrap", noise_floor=floor, noise_floor_ms=floor_ms, noise_basis=why)


def _single_run_noise(m: Metric, b: Benchmark, o: Benchmark, base_v: float | None,
                      cfg: CompareSettings) -> tuple[float | None, float | None, str | None]:
    """What a latency row's change must exceed between single runs: a relative floor, an
    absolute one (ms), and the words for them.

    Relative: the documented floor for the quantile. Absolute: the larger of the documented
    `single_run_noise_ms` and the two runs' own client lag (the sum of their p99 lateness): a run's
    latencies can carry up to its client's delay, which varies from run to run. When either run's
    host was saturated (mean host CPU ≥ `SATURATED_HOST_CPU_PCT`), at least `saturated_host_noise`
    and `saturated_host_noise_ms`: the machine's own contention then varies from run to run, which
    no test inside a run sees.
    """
    floor = cfg.noise_floor(m)
    if floor is None:
        return None, None, None
    lags = [s.lateness_ms.p99 for s in (b.summary, o.summary) if s.lateness_ms.p99 is not None]
    lag = sum(lags)
    if lag > cfg.single_run_noise_ms:
        absolute, why = lag, f"the two runs' client lag, p99 lateness {' + '.join(f'{v:.3g}' for v in lags)} ms"
    else:
        absolute, why = cfg.single_run_noise_ms, f"{cfg.single_run_noise_ms:g} ms"
    words = f"{floor:.0%} at p{m.quantile:g} or {why}"
    busy = [cpu for cpu in (_host_cpu(b), _host_cpu(o)) if cpu is not None and cpu >= SATURATED_HOST_CPU_PCT]
    if busy:
        floor, absolute = max(floor, cfg.saturated_host_noise), max(absolute, cfg.saturated_host_noise_ms)
        words = (f"{floor:.0%} or {absolute:g} ms: the host was saturated (mean host CPU "
                 f"{' and '.join(f'{cpu:.0f}%' for cpu in busy)})")
    return floor, absolute, words


def _host_cpu(bench: Benchmark) -> float | None:
    """The mean host CPU (all cores, %) over a benchmark's window, when telemetry sampled it."""
    client = bench.telemetry.client if bench.telemetry is not None else None
    return client.host_cpu_pct.mean if client is not None else None


def _throughput_evidence(m: Metric, b: Benchmark, o: Benchmark, base_v: float | None, other_v: float | None) -> Evidence:
    xs = _iteration_values(b, m.name)
    ys = _iteration_values(o, m.name)
    if len(xs) < 2 or len(ys) < 2:
        return Evidence(None, None, "none", "single measurement: no significance; run both with --iterations 3 or more")
    test = welch_log_ratio(xs, ys, other_v / base_v) if base_v and other_v else None
    if test is None:
        return Evidence(None, None, "none", "too few values to test")
    return Evidence(test.ci, test.p_value, "welch-iterations")


def _iteration_values(bench: Benchmark, name: str) -> list[float]:
    return [v for it in complete_iterations(bench) if (v := it.summary.flat().get(name)) is not None]


def _error_evidence(b: Benchmark, o: Benchmark) -> Evidence:
    rb, ro = b.summary.requests, o.summary.requests
    p = fisher_p(rb.errored, rb.completed + rb.errored, ro.errored, ro.completed + ro.errored)
    if p is None:
        return Evidence(None, None, "none", "no finished requests")
    return Evidence(None, p, "fisher-exact")


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
        p_adjusted=e.p_adjusted,
        noise_floor=e.noise_floor,
        noise_floor_ms=e.noise_floor_ms,
        test=e.test,
        verdict=v,
        word=word(m, v),
        note=e.note,
        sentence=sentence(f, v, other_label, base_label, cfg),
    )
