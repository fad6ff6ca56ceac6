"""Pure functions from request records to the numbers tokspeed reports.

`summarize(records, slos)` gives a load point's `Summary` (the run.json
`summary`); `tokspeed.metrics.request` holds the per-request formulas,
`distribution` (from `tokspeed.stats`) the statistics, `across_iterations` the run-to-run spread, and
`parse_slo` the SLO grammar. Depends only on `tokspeed.records`, `tokspeed.stats`, numpy and pydantic.
"""

from tokspeed.metrics.chunks import ChunkTiming, chunk_timing
from tokspeed.metrics.goodput import implied_thresholds
from tokspeed.metrics.iterations import (
    HEADLINE_METRICS,
    AcrossIterations,
    MetricAcross,
    across_iterations,
    metric_across,
    t_critical_95,
)
from tokspeed.metrics.request import (
    chunk_gaps_ns,
    decode_tokens_per_s,
    e2e_from_scheduled_ns,
    e2e_ns,
    itl_values_ns,
    lateness_ns,
    max_itl_ns,
    tpot_ns,
    ttfa_ns,
    ttft_from_scheduled_ns,
    ttft_ns,
    was_sent,
)
from tokspeed.metrics.schedule import gap_stats
from tokspeed.metrics.schema import (
    Goodput,
    RequestCounts,
    Schedule,
    SLOResult,
    Summary,
    Throughput,
    TokenTotals,
)
from tokspeed.metrics.slo import SLO, parse_slo
from tokspeed.metrics.summary import summarize, summarize_by_iteration
from tokspeed.stats.distribution import STAT_NAMES, Distribution, distribution

__all__ = [
    "AcrossIterations",
    "ChunkTiming",
    "Distribution",
    "Goodput",
    "HEADLINE_METRICS",
    "MetricAcross",
    "RequestCounts",
    "SLO",
    "SLOResult",
    "STAT_NAMES",
    "Schedule",
    "Summary",
    "Throughput",
    "TokenTotals",
    "across_iterations",
    "chunk_gaps_ns",
    "chunk_timing",
    "decode_tokens_per_s",
    "distribution",
    "e2e_from_scheduled_ns",
    "e2e_ns",
    "gap_stats",
    "implied_thresholds",
    "itl_values_ns",
    "lateness_ns",
    "max_itl_ns",
    "metric_across",
    "parse_slo",
    "summarize",
    "summarize_by_iteration",
    "t_critical_95",
    "tpot_ns",
    "ttfa_ns",
    "ttft_from_scheduled_ns",
    "ttft_ns",
    "was_sent",
]
