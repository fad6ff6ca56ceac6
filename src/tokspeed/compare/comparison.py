"""The data model of a comparison (what `tokspeed compare --json` writes) and the compared metrics.

Schema `tokspeed.compare/2`: a baseline `RunRef`, then per other run its
workload `differences` and, per benchmark pair, one `MetricComparison` per
metric in `METRICS` (or `compared_metrics(settings.percentiles)`) — values, delta, ratio other/base with its 95% interval,
p-value, the p-value adjusted for the benchmark's several metrics (`correction`
in the settings), the test that gave it, and the verdict in words and as a sentence.
(/2: per-quantile bootstrap tests, iteration-based latency tests, the adjusted p,
the single-run noise floor and the `inconclusive` verdict; /1 tested every latency
row with one Mann–Whitney test of the whole distribution.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tokspeed.stats.distribution import percentile_name

SCHEMA = "tokspeed.compare/2"
Better = Literal["lower", "higher"]
Verdict = Literal["better", "worse", "no significant difference", "negligible", "inconclusive", "untested"]
Test = Literal["bootstrap", "welch-iterations", "fisher-exact", "none"]
Correction = Literal["benjamini-hochberg"]

# Run-to-run noise of a latency quantile between single runs of the same command (relative change):
# what within-run tests cannot see (machine load, a warm cache, the server's state). A single run
# per side claims a latency change only beyond it; with --iterations the spread is measured instead.
SINGLE_RUN_NOISE: dict[float, float] = {50.0: 0.03, 99.0: 0.10}
# ... and in absolute terms: back-to-back identical runs of a 20 ms simulator on a busy 2-core
# machine (load average 6-8) differed by up to ~15 ms at TTFT and E2E p50 (ratios 0.49-1.72)
SINGLE_RUN_NOISE_MS = 20.0
# ... and on a saturated host (a run's mean host CPU at or above SATURATED_HOST_CPU_PCT): the server
# and the client then share cores that something else also wants, and back-to-back identical runs
# of a 20 ms simulator at load average 8-10 on 2 cores differed by 15-30 ms at TTFT and E2E p50
# (0.51×, 0.66×). Between such runs a latency change is claimed only beyond 50 ms and 25%; a 2×
# change of a 100 ms TTFT and a 5%-of-requests +500 ms tail (p99 ×7.7) still are.
SATURATED_HOST_CPU_PCT = 90.0
SATURATED_HOST_NOISE = 0.25
SATURATED_HOST_NOISE_MS = 50.0


@dataclass(frozen=True, slots=True)
class Metric:
    """A compared metric: flat name, label, unit, which way is better, and its sample family."""

    name: str
    label: str
    unit: str
    better: Better
    family: str | None = None  # per-request family (ttft, itl, ...) or None for run-level
    quantile: float | None = None


METRICS: tuple[Metric, ...] = (
    Metric("ttft_p50_ms", "TTFT p50", "ms", "lower", "ttft", 50.0),
    Metric("ttft_p99_ms", "TTFT p99", "ms", "lower", "ttft", 99.0),
    Metric("itl_p50_ms", "ITL p50", "ms", "lower", "itl", 50.0),
    Metric("itl_p99_ms", "ITL p99", "ms", "lower", "itl", 99.0),
    Metric("tpot_p50_ms", "TPOT p50", "ms", "lower", "tpot", 50.0),
    Metric("e2e_p50_ms", "E2E p50", "ms", "lower", "e2e", 50.0),
    Metric("e2e_p99_ms", "E2E p99", "ms", "lower", "e2e", 99.0),
    Metric("output_tokens_per_s", "output tokens/s", "tok/s", "higher"),
    Metric("requests_per_s", "requests/s", "req/s", "higher"),
    Metric("error_rate", "error rate", "", "lower"),
)


# the latency families a --percentiles comparison tests, and their labels
LATENCY_FAMILIES: dict[str, str] = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E"}


def compared_metrics(percentiles: Sequence[float] = ()) -> tuple[Metric, ...]:
    """The metrics a comparison tests: `METRICS`, or with --percentiles every latency family at each
    of them (`ttft_p75_ms`, ...) followed by METRICS' run-level rows."""
    if not percentiles:
        return METRICS
    latency = tuple(
        Metric(f"{family}_{percentile_name(q)}_ms", f"{label} p{q:g}", "ms", "lower", family, float(q))
        for family, label in LATENCY_FAMILIES.items()
        for q in sorted(set(percentiles))
    )
    return latency + tuple(m for m in METRICS if m.family is None)


class CompareSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    seed: int = 0
    resamples: int = Field(default=2000, ge=500, description="bootstrap resamples: p-values cannot go below 2/(resamples + 1)")
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_effect: float = Field(default=0.01, ge=0, description="relative change below which a significant difference is negligible")
    max_bootstrap_values: int = Field(default=10_000, ge=1000, description="values per run entering the bootstrap (seeded subset)")
    correction: Correction = Field(default="benjamini-hochberg", description="multiple-comparison correction over one benchmark's metrics")
    single_run_noise: dict[str, float] = Field(
        default_factory=lambda: {f"p{q:g}": v for q, v in SINGLE_RUN_NOISE.items()},
        description="latency changes smaller than this between single runs are inconclusive (by quantile: p50 and below, above)",
    )

    percentiles: tuple[float, ...] = Field(
        default=(), description="latency percentiles compared (--percentiles); () = p50 and p99 (`METRICS`)"
    )

    single_run_noise_ms: float = Field(
        default=SINGLE_RUN_NOISE_MS, ge=0,
        description="latency changes smaller than this (ms) between single runs are inconclusive",
    )

    saturated_host_noise: float = Field(
        default=SATURATED_HOST_NOISE, ge=0,
        description="between single runs on a saturated host (mean host CPU ≥ 90%): the relative change below which a latency verdict is inconclusive",
    )
    saturated_host_noise_ms: float = Field(
        default=SATURATED_HOST_NOISE_MS, ge=0,
        description="between single runs on a saturated host (mean host CPU ≥ 90%): the change (ms) below which a latency verdict is inconclusive",
    )

    def noise_floor(self, m: Metric) -> float | None:
        """The run-to-run noise floor of a latency metric's quantile between single runs (None: not latency)."""
        if m.quantile is None:
            return None
        return self.single_run_noise["p50" if m.quantile <= 50.0 else "p99"]


class RunRef(BaseModel):
    label: str
    path: str
    status: str
    model: str | None = None
    started_at: str | None = None


class MetricComparison(BaseModel):
    metric: str
    label: str
    unit: str
    better: Better
    base: float | None
    other: float | None
    delta: float | None
    ratio: float | None = Field(description="other / base")
    ratio_ci95: tuple[float, float] | None
    p_value: float | None
    p_adjusted: float | None = Field(None, description="p adjusted over the benchmark's metrics (settings.correction); the verdict's p")
    noise_floor: float | None = Field(None, description="single runs: the relative change below which a latency verdict is inconclusive")
    noise_floor_ms: float | None = Field(None, description="single runs: the change (ms) below which a latency verdict is inconclusive")
    test: Test
    verdict: Verdict
    word: str = Field(description="the verdict in words: faster, slower, fewer errors, ...")
    note: str | None = None
    sentence: str


class BenchmarkComparison(BaseModel):
    base_name: str
    other_name: str
    base_requests: int
    other_requests: int
    base_iterations: int = 1
    other_iterations: int = 1
    metrics: list[MetricComparison]


class RunComparison(BaseModel):
    run: RunRef
    differences: list[str] = Field(description="what differs in workload or load: comparisons are suspect")
    benchmarks: list[BenchmarkComparison]


class Comparison(BaseModel):
    schema_: str = Field(default=SCHEMA, alias="schema")
    base: RunRef
    runs: list[RunComparison]
    settings: CompareSettings

    model_config = ConfigDict(populate_by_name=True)
