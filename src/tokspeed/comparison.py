"""The data model of a comparison (what `tokspeed compare --json` writes) and the compared metrics.

Schema `tokspeed.compare/1`: a baseline `RunRef`, then per other run its
workload `differences` and, per benchmark pair, one `MetricComparison` per
metric in `METRICS` — values, delta, ratio other/base with its 95% interval,
p-value, the test that gave it, and the verdict in words and as a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "tokspeed.compare/1"
Better = Literal["lower", "higher"]
Verdict = Literal["better", "worse", "no significant difference", "negligible", "untested"]
Test = Literal["mann-whitney", "welch", "two-proportion", "none"]


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


class CompareSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    seed: int = 0
    resamples: int = Field(default=2000, ge=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_effect: float = Field(default=0.01, ge=0, description="relative change below which a significant difference is negligible")
    max_bootstrap_values: int = Field(default=10_000, ge=1000, description="values per run entering the bootstrap (seeded subset)")


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
