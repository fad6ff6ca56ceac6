"""The run.json models (schema tokspeed.run/1): a run, its load points, sweep and capacity sections.

Additive changes keep the schema name; breaking ones bump it. `write_schema_file`
regenerates the JSON Schema shipped in the package (schemas/run.schema.json).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from tokspeed.metrics import AcrossIterations, Summary
from tokspeed.metrics.fit import LinearFit
from tokspeed.metrics.schema import Goodput
from tokspeed.metrics.token_audit import TokenAudit
from tokspeed.quality.schema import QualityResult
from tokspeed.results.findings import Finding
from tokspeed.telemetry.schema import ServerProfile, TelemetrySummary
from tokspeed.version import __version__

SCHEMA = "tokspeed.run/1"
# The metric definitions (docs/numbers.md, docs/metric-spec.md). Bumped whenever a formula changes, so
# two runs are comparable figure by figure only when their specs match.
METRIC_SPEC = "tokspeed.metrics/2"
RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
RunStatus = Literal["running", "complete", "interrupted", "failed"]


class GroupResult(BaseModel):
    """One stage or class of a point: what it asked for and the summary of its requests."""

    profile: dict[str, Any] = Field(default_factory=dict)
    summary: Summary


class IterationResult(BaseModel):
    iteration: int
    summary: Summary
    partial: bool = Field(False, description="cut short (the run stopped during it): left out of across_iterations")


class Benchmark(BaseModel):
    """One load point: its profile, the pooled summary and, with --iterations, each iteration."""

    name: str
    profile: dict[str, Any]
    summary: Summary
    iterations: list[IterationResult] = Field(default_factory=list)
    across_iterations: AcrossIterations | None = None
    target: dict[str, Any] | None = Field(None, description="what served this point (sweeps over several targets)")
    telemetry: TelemetrySummary | None = Field(None, description="GPU, client and server telemetry over this point")
    server_profile: ServerProfile | None = Field(
        None, description="run --profile: the server's profiler around this point's measured window"
    )
    stages: dict[str, GroupResult] | None = Field(
        None, description="scheduled load (stages, ramp): each stage's or ramp window's requests, by scheduled time"
    )
    classes: dict[str, GroupResult] | None = Field(
        None, description="mixed workload classes: each class's requests, judged on the class's own SLOs"
    )
    classes_goodput: Goodput | None = Field(
        None, description="mixed workload classes together: good requests of every class, each on its own SLOs"
    )
    models: dict[str, GroupResult] | None = Field(
        None, description="a model mix (--model a=3,b=1): each model's requests, with its weight, share and policy"
    )
    token_audit: TokenAudit | None = Field(
        None, description="run --token-audit: usage vs tokenizer counts, tokens per chunk, early stops"
    )


class Sample(BaseModel):
    """One prompt and the response it got (truncated), so a run shows what was generated."""

    index: int
    prompt: str
    response: str


class SweepInfo(BaseModel):
    """What a sweep varied; each point is one entry of `benchmarks`."""

    dimension: str | None = Field(None, description="concurrency, rate, input_tokens, output_tokens; None for --auto")
    values: list[float] = Field(default_factory=list)
    auto: bool = False
    targets: list[str] = Field(default_factory=list)
    ttft_vs_input_tokens: LinearFit | None = Field(None, description="prefill cost fitted over all points")


class CapacityProbe(BaseModel):
    value: float = Field(description="offered rate (req/s) or concurrency probed")
    passed: bool
    reason: str = ""
    benchmark: int = Field(description="index of this probe in `benchmarks`")
    offered_requests_per_s: float | None = Field(None, description="arrivals per second in its steady window (what was sent)")
    sustained_requests_per_s: float | None = Field(None, description="completions per second in that window")


class CapacityResult(BaseModel):
    """The highest load at which every SLO held ('QPS under a latency budget')."""

    by: Literal["rate", "concurrency"]
    requests_per_s: float | None = Field(
        description="capacity in requests per second: where the SLO figures of the probes near the bracket, fitted "
        "against their rates, meet their limits (by rate; the highest passing probe without a fit or by concurrency), "
        "as sent, never above the most the server completed at steady state in any probe"
    )
    value: float | None = Field(description="the highest passing probed rate or concurrency (the knob)")
    low: float | None
    high: float | None = Field(description="lowest failing value: the capacity lies in [low, high)")
    uncertainty: float | None = Field(description="(high - low) / 2, in the unit of `value`")
    precision: float
    slos: list[str]
    goodput_requests_per_s: float | None = None
    probes: list[CapacityProbe] = Field(default_factory=list)
    interval_requests_per_s: list[float | None] | None = Field(
        None, description="[low, high] req/s the capacity lies in: the bracketing probes, widened to the next probe "
        "where a probe's SLO figure is within its own 95% percentile interval of the limit, and to requests_per_s"
    )
    fitted: bool = Field(False, description="requests_per_s comes from the fit of the probes' SLO figures (else: "
                         "the highest passing probe)")
    stopped_by: str = Field("bracket", description="why the search ended: " + ", ".join(
        ["bracket (narrowed to precision)", "max_value (held up to --max-rate)", "client (the client could not send faster)",
         "probes (--max-probes)", "floor (nothing passed down to the lowest rate)", "baseline (one request at a time misses the SLOs)",
         "budget (--max-time)", "interrupted"]))
    finding: str = Field("", description="the search's outcome in one sentence")
    requests_spent: int = 0
    seconds_spent: float = 0.0


class RunResult(BaseModel):
    """The contents of run.json. Additive changes keep the schema name; breaking ones bump it."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(SCHEMA, alias="schema")
    metric_spec: str = Field(METRIC_SPEC, description="version of the metric definitions the figures follow")
    tool: dict[str, str] = Field(default_factory=lambda: {"name": "tokspeed", "version": __version__})
    status: RunStatus = "running"
    started_at: str
    finished_at: str | None = None
    epoch_offset_ns: int = Field(0, description="Unix-epoch ns minus monotonic ns, for converting record times")
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any] = Field(default_factory=dict)
    benchmarks: list[Benchmark] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list, description="first prompts and responses, for eyeballing quality")
    sweep: SweepInfo | None = None
    capacity: CapacityResult | None = None
    warnings: list[str] = Field(default_factory=list)
    telemetry: TelemetrySummary | None = Field(None, description="GPU, client and server telemetry over the whole run")
    diagnosis: list[Finding] = Field(default_factory=list, description="validity and bottleneck findings")
    error: str | None = None
    quality: QualityResult | None = Field(default=None, description="quality probe after the load (run --quality)")

    def to_json_bytes(self, redact: Callable[[Any], Any] | None = None) -> bytes:
        """run.json's bytes; `redact` (a `Redactor.tree`) cleans every string first, the last guard for secrets."""
        data = self.model_dump(mode="json", by_alias=True)
        return orjson.dumps(data if redact is None else redact(data), option=orjson.OPT_INDENT_2)


SCHEMA_FILE = Path(__file__).parent.parent / "schemas" / "run.schema.json"


def run_json_schema() -> dict[str, Any]:
    """The JSON Schema of run.json, generated from the models (shipped as schemas/run.schema.json)."""
    schema = RunResult.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = "https://tokspeed.dev/schemas/" + SCHEMA.replace("/", "-") + ".json"
    schema["title"] = SCHEMA
    return schema


def write_schema_file() -> None:
    """Regenerate schemas/run.schema.json (run after changing the result models)."""
    SCHEMA_FILE.write_bytes(orjson.dumps(run_json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")  # ms: runs in one second still order
