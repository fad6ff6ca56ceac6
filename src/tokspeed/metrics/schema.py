"""The `Summary` model: what one load point measured, as saved in run.json's `summary`.

Its JSON (`Summary.model_dump(mode="json")`) is the file contract; `Summary.flat()`
gives the same numbers under the `<metric>_<stat>_<unit>` names that SLOs,
CSV columns and comparisons use (`ttft_p99_ms`, `output_tokens_per_s`, ...).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from tokspeed.metrics.conversations import (
    ConversationStats,
    PrefixCacheStats,
    TurnStats,
)
from tokspeed.metrics.server_timing import ServerTimingSummary
from tokspeed.metrics.table import METRICS
from tokspeed.stats.distribution import STAT_NAMES, Distribution, QuantileCI

# Summary field -> (metric name, unit suffix) for flat names; "" = a plain count (from the metric table)
DISTRIBUTIONS: dict[str, tuple[str, str]] = {m.field: (m.name, m.unit) for m in METRICS}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class RequestCounts(_Frozen):
    """Measured (non-warm-up) requests by how they ended; total = the sum of the four."""

    completed: int = 0
    errored: int = 0
    incomplete: int = 0
    total: int = 0
    cancelled: int = 0  # aborted on purpose by the client (--cancel-share), after --cancel-after


class Throughput(_Frozen):
    """System-wide rates over the measurement window (None without a window)."""

    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    input_tokens_per_s: float | None = None
    # at steady state: completions and arrivals inside [first end, last send] (tokspeed.metrics.sustained)
    sustained_requests_per_s: float | None = None
    window_arrivals_per_s: float | None = None
    sustained_window_s: float | None = None


class TokenTotals(_Frozen):
    """Token sums over completed requests, and how many requests took each count source."""

    input_total: int = 0
    output_total: int = 0
    input_sources: dict[str, int] = {}
    output_sources: dict[str, int] = {}


class Schedule(_Frozen):
    """Open-loop runs only: the rate asked for, the rate the drawn schedule offered, and how requests went out.

    offered = 1 / mean gap between scheduled times ((n − 1) / (last − first) in one
    iteration); sent = the same over the send times; each gap CV is stdev / mean of
    those gaps (0 for perfectly even arrivals, ~1 for Poisson). See
    `tokspeed.metrics.schedule`.
    """

    target_requests_per_s: float | None = None
    offered_requests_per_s: float | None = None
    sent_requests_per_s: float | None = None
    scheduled_gap_cv: float | None = None
    sent_gap_cv: float | None = None


class Goodput(_Frozen):
    """Completed requests that met every per-request threshold in `slos`."""

    good: int
    requests_per_s: float | None
    fraction: float | None
    slos: list[str]


class SLOResult(_Frozen):
    """One SLO's verdict.

    kind `percentile` and `run`: observed is the summary value named by the SLO.
    kind `per_request`: observed is the fraction of completed requests meeting it,
    and met means all of them did.
    """

    slo: str
    kind: Literal["percentile", "per_request", "run"]
    observed: float | None
    met: bool


class Summary(_Frozen):
    """Everything reported for one load point (warm-up excluded)."""

    requests: RequestCounts = RequestCounts()
    error_rate: float | None = None
    errors: dict[str, int] = {}
    window_s: float | None = None
    ttft_ms: Distribution = Distribution()
    ttfa_ms: Distribution = Distribution()
    itl_ms: Distribution = Distribution()
    chunk_gap_ms: Distribution = Distribution()
    tpot_ms: Distribution = Distribution()
    ntpot_ms: Distribution = Distribution()  # E2E / output tokens (inference-perf's NTPOT); empty in older results
    e2e_ms: Distribution = Distribution()
    lateness_ms: Distribution = Distribution()
    connect_ms: Distribution = Distribution()  # TCP/TLS connects paid by measured requests (reused: none)
    ttft_from_scheduled_ms: Distribution = Distribution()  # open loop only: first token − scheduled
    e2e_from_scheduled_ms: Distribution = Distribution()  # open loop only: end − scheduled
    decode_tokens_per_s: Distribution = Distribution()
    input_tokens: Distribution = Distribution()
    output_tokens: Distribution = Distribution()
    throughput: Throughput = Throughput()
    schedule: Schedule | None = None  # open loop only
    tokens: TokenTotals = TokenTotals()
    goodput: Goodput | None = None
    slo: list[SLOResult] = []
    # 95% CI of p50/p90/p99/p999 for ttft_ms, itl_ms, tpot_ms, e2e_ms (None: too few samples);
    # {} in results written before it existed
    percentile_ci: dict[str, dict[str, QuantileCI | None]] = {}
    # multi-turn and shared-prefix workloads (metrics/conversations.py); None for other workloads
    by_turn: list[TurnStats] | None = None
    conversations: ConversationStats | None = None
    prefix_cache: PrefixCacheStats | None = None
    # the server's own timings beside the client's (metrics/server_timing.py); None unless a server reported them
    server_timing: ServerTimingSummary | None = None
    # the detected steady window (ramp-up and drain trimmed) and the summary over it (metrics/steady_state.py)
    steady_state: SteadyState | None = None
    # --percentiles beyond the standard ones: distribution field -> {stat name: value} ({"ttft_ms": {"p75": 41.2}});
    # names by `distribution.percentile_name`; {} when none were asked for
    percentiles: dict[str, dict[str, float | None]] = {}
    # --cooldown: the summary without the last share of the run (metrics/cooldown.py); None when not asked for
    cooldown: Cooldown | None = None
    # distributions whose values outgrew the exact buffer (stats/sketch.py): their percentiles
    # come from a log histogram, each within 0.01% of a true value; [] = every figure exact
    approximate: list[str] = []

    def flat(self) -> dict[str, float | None]:
        """Every number under its flat name.

        Distributions give `<metric>_<stat>_<unit>` (`ttft_p99_ms`,
        `decode_p50_tokens_per_s`), `<metric>_<stat>` for token counts
        (`output_tokens_p50`) and `<metric>_count`, and any --percentiles beyond the standard
        ones (`ttft_p75_ms`, `e2e_p9999_ms`); then `requests_per_s`,
        `output_tokens_per_s`, `total_tokens_per_s`, `input_tokens_per_s`,
        `error_rate`, `goodput_requests_per_s`, `goodput_fraction`, and for
        open-loop runs `offered_requests_per_s`, `sent_requests_per_s` and
        `sent_gap_cv` (None otherwise).
        """
        out: dict[str, float | None] = {}
        for field, (metric, unit) in DISTRIBUTIONS.items():
            dist: Distribution = getattr(self, field)
            for stat in STAT_NAMES:
                out[flat_name(metric, stat, "" if stat == "count" else unit)] = dist.stat(stat)
        for field, extra in self.percentiles.items():
            if field in DISTRIBUTIONS:
                metric, unit = DISTRIBUTIONS[field]
                out.update({flat_name(metric, stat, unit): value for stat, value in extra.items()})
        out.update(self.throughput.model_dump())
        out["error_rate"] = self.error_rate
        out["goodput_requests_per_s"] = self.goodput.requests_per_s if self.goodput else None
        out["goodput_fraction"] = self.goodput.fraction if self.goodput else None
        schedule = self.schedule or Schedule()
        out["offered_requests_per_s"] = schedule.offered_requests_per_s
        out["sent_requests_per_s"] = schedule.sent_requests_per_s
        out["sent_gap_cv"] = schedule.sent_gap_cv
        return out


class SteadyState(_Frozen):
    """The steady window MSER-5 found in a point's token-arrival rate, and the summary over it.

    Times are seconds; trimmed_start_s / trimmed_end_s were cut from the full window's
    start (ramp-up) and end (drain). See `tokspeed.metrics.steady_state`.
    """

    method: str
    bins: int
    bin_s: float
    trimmed_start_s: float
    trimmed_end_s: float
    window_s: float
    full_window_s: float
    requests: int  # measured requests sent and finished inside the window
    summary: Summary | None = None


class Cooldown(_Frozen):
    """--cooldown SHARE: the point without its last share (guidellm's cool-down), and the summary over it.

    mode `duration`: the cut is SHARE of the planned --duration before its end; `requests`: the
    cut is the end of the last request to finish before the final ⌊SHARE·N⌋ of the N measured ones.
    The summary keeps the measured requests sent at or before the cut. Times are seconds from the
    window's start (the first send). See `tokspeed.metrics.cooldown`.
    """

    share: float
    mode: Literal["duration", "requests"]
    cut_s: float
    trimmed_s: float  # full window's end − the cut
    full_window_s: float
    requests: int  # measured requests kept
    dropped: int  # measured requests sent after the cut
    summary: Summary | None = None


Summary.model_rebuild()


def flat_name(metric: str, stat: str, unit: str) -> str:
    """`ttft`, `p99`, `ms` -> `ttft_p99_ms`; an empty unit is left out."""
    return "_".join(part for part in (metric, stat, unit) if part)
