"""docs/metric-spec.md documents every key of a run's summary, under the spec version run.json names."""

from __future__ import annotations

from locations import DOCS
from tokspeed.metrics.schema import Summary
from tokspeed.results import METRIC_SPEC, RunResult
from tokspeed.stats.distribution import STAT_NAMES

SPEC = (DOCS / "metric-spec.md").read_text(encoding="utf-8")


def _keys(model: type) -> set[str]:
    return set(model.model_fields)  # type: ignore[attr-defined]


def test_the_spec_names_the_version_run_json_carries() -> None:
    assert f"`{METRIC_SPEC}`" in SPEC.splitlines()[0]
    assert RunResult.model_fields["metric_spec"].default == METRIC_SPEC


def test_every_summary_key_is_documented() -> None:
    missing = {k for k in _keys(Summary) if f"`{k}`" not in SPEC}
    assert missing == set()


def test_every_nested_key_and_stat_is_documented() -> None:
    from tokspeed.metrics.schema import (
        Goodput,
        RequestCounts,
        Schedule,
        SLOResult,
        Throughput,
        TokenTotals,
    )

    nested = set().union(*(_keys(m) for m in (RequestCounts, Throughput, TokenTotals, Schedule, Goodput, SLOResult)))
    missing = {k for k in nested | set(STAT_NAMES) if f"`{k}`" not in SPEC}
    assert missing == set()


def test_every_record_field_a_formula_reads_is_documented() -> None:
    """The record fields the metric formulas read (other fields, added by features, describe the request)."""
    used = {"scheduled_ns", "sent_ns", "first_token_ns", "first_content_ns", "end_ns", "chunk_offsets_ns",
            "chunk_tokens", "reasoning_chunks", "output_tokens", "output_tokens_source", "input_tokens",
            "input_tokens_source", "max_tokens", "finish_reason", "status", "error_kind", "http_status",
            "anomalies", "warmup", "iteration", "connect_duration_ns"}
    from tokspeed.records import RequestRecord

    assert used <= set(RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0).to_json_dict(0))
    assert {f for f in used if f"`{f}`" not in SPEC} == set()


def test_every_metric_of_the_table_has_its_formula_and_summary_rows() -> None:
    """Each per-request formula the metric table names is a row of the spec's formula table, and each
    distribution a row of its summary table (`input_tokens`, `output_tokens` share one)."""
    from tokspeed.metrics.table import METRICS

    rows = [line for line in SPEC.splitlines() if line.startswith("| ")]
    formulas = {line.split(" | ")[0].removeprefix("| ") for line in rows}
    assert {m.spec for m in METRICS if m.spec is not None} - formulas == set()
    documented = {m.field for m in METRICS if any(line.startswith(f"| `{m.field}`") or f"`, `{m.field}` |" in line for line in rows)}
    assert documented == {m.field for m in METRICS}
