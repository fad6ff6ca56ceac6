"""The quality result models: per-item results, per-category scores, comparisons, lm-eval scores.

`QualityResult` is the content of `quality.json` (schema tokspeed.quality/1) and of the
`quality` block `tokspeed run --quality` adds to run.json. Additive changes keep the name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tokspeed.version import __version__

QUALITY_SCHEMA = "tokspeed.quality/1"
ALPHA = 0.05  # significance level of the comparison


class ItemResult(BaseModel):
    """One probe item sent to one target (a line of quality.jsonl)."""

    target: str
    id: str
    category: str
    lang: str
    correct: bool
    response: str = ""
    error: str | None = None
    latency_ms: float | None = None
    completion_tokens: int | None = None


class Score(BaseModel):
    """Accuracy over a group of items, with its Wilson 95% interval."""

    name: str
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    errors: int = Field(0, description="items whose request failed (counted as wrong)")


class TargetQuality(BaseModel):
    """One target's probe result."""

    label: str
    url: str
    model: str | None = None
    overall: Score
    categories: list[Score] = Field(default_factory=list)
    langs: list[Score] = Field(default_factory=list)
    duration_s: float = 0.0
    output_tokens: int = 0
    output_tokens_per_s: float | None = Field(
        None, description="probe speed: completion tokens / summed request latency (per-request rate, not a benchmark)"
    )
    mean_latency_ms: float | None = None
    lm_eval: LmEvalResult | None = None


class Difference(BaseModel):
    """Candidate minus baseline accuracy over the same items, with McNemar's exact test."""

    name: str
    n: int
    baseline_accuracy: float
    accuracy: float
    difference: float
    ci_low: float
    ci_high: float
    only_baseline: int = Field(description="items only the baseline got right")
    only_candidate: int = Field(description="items only the candidate got right")
    p_value: float
    significant: bool


class Agreement(BaseModel):
    """How often the two targets gave the same output."""

    n: int
    exact: float = Field(description="share of items with identical responses")
    normalised: float = Field(description="share equal after NFKC, lowercase, no spaces or punctuation")


class Comparison(BaseModel):
    baseline: str
    candidate: str
    overall: Difference
    categories: list[Difference] = Field(default_factory=list)
    agreement: Agreement
    speed_ratio: float | None = Field(None, description="candidate speed / baseline speed")
    speed_source: str | None = Field(None, description="where the speed figures came from")
    sentence: str = ""


class LmEvalScore(BaseModel):
    task: str
    metric: str
    filter: str | None = None
    value: float
    stderr: float | None = None


class LmEvalResult(BaseModel):
    """Scores read from an lm-evaluation-harness results JSON file."""

    source: str
    model: str | None = None
    model_args: str | None = None
    version: str | None = None
    scores: list[LmEvalScore] = Field(default_factory=list)


class QualityResult(BaseModel):
    """The contents of quality.json (and of run.json's `quality` block)."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(QUALITY_SCHEMA, alias="schema")
    tool: dict[str, str] = Field(default_factory=lambda: {"name": "tokspeed", "version": __version__})
    started_at: str | None = None
    finished_at: str | None = None
    probe_source: str | None = None
    probe_items: int = 0
    settings: dict[str, Any] = Field(default_factory=dict)
    alpha: float = ALPHA
    targets: list[TargetQuality] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    lm_eval: list[LmEvalResult] = Field(default_factory=list, description="lm-eval results not paired with a target")


TargetQuality.model_rebuild()
