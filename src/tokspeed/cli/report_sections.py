"""`tokspeed report DIR --token-audit / --stats`: the measurement sections, per load point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokspeed.metrics.schema import Summary
from tokspeed.records import RequestRecord
from tokspeed.results import RunResult


def print_measurement_sections(
    result: RunResult, records: Sequence[RequestRecord], *, token_audit: bool, tokenizer: str | None, stats: bool
) -> None:
    """Print the token audit and/or the statistics of every load point (a ConfigError for a bad --tokenizer)."""
    from tokspeed.metrics.token_audit import audit_tokens
    from tokspeed.reports.measurement_text import stats_lines, token_audit_lines
    from tokspeed.workload.tokens import HFTokenizerCounter

    counter = HFTokenizerCounter(tokenizer) if tokenizer else None
    for i, bench in enumerate(result.benchmarks):
        own = [r for r in records if r.benchmark == i]
        if token_audit:
            saved = bench.token_audit if counter is None else None
            audit = saved if saved is not None else audit_tokens(own, counter)
            print("\n".join(["", *token_audit_lines(bench.name, audit)]))
        if stats:
            print("\n".join(["", *stats_lines(bench.name, _with_steady(bench.summary, bench.profile, own), own)]))


def _with_steady(summary: Summary, profile: dict[str, Any], records: Sequence[RequestRecord]) -> Summary:
    """The summary with its steady state, detected now for a run saved before it was computed."""
    if summary.steady_state is not None:
        return summary
    from tokspeed.metrics import summarize
    from tokspeed.metrics.steady_state import with_steady_state

    rate = profile.get("rate") if profile.get("kind") == "rate" or profile.get("open_loop") else None
    return with_steady_state(summary, records, lambda rs: summarize(rs, (), rate))
