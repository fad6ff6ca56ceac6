"""Summarise one load point's records into a `Benchmark`: pooled, per iteration, across iterations."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tokspeed.metrics import across_iterations, summarize
from tokspeed.metrics.cooldown import with_cooldown
from tokspeed.metrics.slo import SLO
from tokspeed.metrics.steady_state import TimedSpan, with_steady_state
from tokspeed.metrics.summary import Summary, SummaryBuilder, summarize_by_iteration
from tokspeed.records import RequestRecord
from tokspeed.results.run_json import Benchmark, IterationResult


def build_benchmark(
    name: str,
    profile: dict[str, Any],
    records: Iterable[RequestRecord],
    slos: Sequence[SLO],
    also: Callable[[RequestRecord], None] | None = None,
    percentiles: Sequence[float] = (),
    cooldown: float | None = None,
    planned_duration_s: float | None = None,
) -> Benchmark:
    """Summaries of one load point: pooled over iterations, per iteration, and across iterations.

    An open-loop `profile` (kind "rate") passes its rate on, for the schedule-based metrics.
    `records` is read in passes (one for the summaries, two more for the steady state), never
    held: a list, or a `StoredRecords` that streams them from requests.jsonl each time. `also`
    gets every record of the first pass (the runner's diagnosis digest), saving it a pass.
    `percentiles` (--percentiles) go into every summary; `cooldown` (--cooldown SHARE) adds the
    summary without the run's last share (`metrics.cooldown`; by `planned_duration_s` when it had one).
    """
    rate = profile.get("rate") if profile.get("kind") == "rate" or profile.get("open_loop") else None
    turns = profile.get("turns") if profile.get("kind") == "conversations" else None  # --multi-turn's plan
    pooled_builder, span = SummaryBuilder(slos, rate, turns, percentiles), TimedSpan()
    unnumbered = False  # a measured record outside iterations ≥ 1: the pooled summary is not one iteration's
    for r in records:
        pooled_builder.add(r)
        span.add(r)
        unnumbered = unnumbered or (not r.warmup and r.iteration < 1)
        if also is not None:
            also(r)
    def summary_of(rs: Iterable[RequestRecord]) -> Summary:
        return summarize(rs, slos, rate, turns, percentiles)

    pooled = with_steady_state(pooled_builder.summary(), records, summary_of, span)
    pooled = with_cooldown(pooled, records, cooldown, summary_of, planned_duration_s)
    if len(span.iterations) == 1 and not unnumbered:
        per_iteration = {next(iter(span.iterations)): pooled}  # one iteration: its summary is the pooled one
    else:  # one more pass
        per_iteration = summarize_by_iteration(records, slos, rate, turns, percentiles)
    iterations = mark_partial([IterationResult(iteration=i, summary=s) for i, s in sorted(per_iteration.items())])
    complete = [it for it in iterations if not it.partial]
    across = None
    if len(iterations) > 1:
        across = across_iterations([it.summary for it in complete])
        across = across.model_copy(update={"partial": [it.iteration for it in iterations if it.partial]})
    return Benchmark(
        name=name,
        profile=profile,
        summary=pooled,
        iterations=iterations,
        across_iterations=across,
    )


PARTIAL_SHARE = 0.9  # a last iteration with fewer measured requests than this share of the others' fewest


def mark_partial(iterations: list[IterationResult]) -> list[IterationResult]:
    """The iterations, the last one marked partial when it has fewer than PARTIAL_SHARE of the
    measured requests of the smallest other one (a run stopped during it: 60 of 100 requests)."""
    if len(iterations) < 2:
        return iterations
    *others, last = iterations
    fewest = min(it.summary.requests.total for it in others)
    if last.summary.requests.total < PARTIAL_SHARE * fewest:
        return [*others, last.model_copy(update={"partial": True})]
    return iterations

