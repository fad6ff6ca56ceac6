"""Summarise the records of one load point: counts, distributions, throughput, goodput.

Warm-up records (`warmup=True`) are always left out. Formulas:

* error_rate = errored / (completed + errored); None when none finished
* window_s = (last end_ns − first sent_ns) / 10^9 over completed and errored requests
* requests_per_s = completed / window_s
* output_tokens_per_s = Σ output_tokens of completed requests / window_s
* input_tokens_per_s = Σ input_tokens of completed requests / window_s
* total_tokens_per_s = (Σ input_tokens + Σ output_tokens) / window_s
  (rates are None when the window is unknown or zero; unknown counts add 0)
* TTFT, TTFA, ITL (per token, pooled), chunk gaps, TPOT, E2E, decode speed and
  token counts are over completed requests; lateness over every sent request.
* percentile_ci: the 95% order-statistic CI of p50, p90, p99, p99.9 of TTFT, ITL,
  TPOT and E2E (`tokspeed.metrics.stats.distribution_with_ci`; None where n is too small)
* open-loop points only (`target_rate` given): TTFT and E2E from the scheduled
  time (coordinated-omission corrected) over completed requests, and the
  schedule's realised rates (`tokspeed.metrics.schedule`); otherwise empty / None.

Per-request formulas live in `tokspeed.metrics.request`, pooled chunk timing in
`tokspeed.metrics.chunks`, goodput and SLO verdicts in `tokspeed.metrics.goodput`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tokspeed.metrics import conversations as conv
from tokspeed.metrics import request as rq
from tokspeed.metrics.chunks import ChunkTiming, chunk_timing
from tokspeed.metrics.goodput import goodput, judge
from tokspeed.metrics.schedule import schedule_summary
from tokspeed.metrics.schema import RequestCounts, Summary, Throughput, TokenTotals
from tokspeed.metrics.server_timing import summarize_server_timing
from tokspeed.metrics.slo import SLO
from tokspeed.metrics.stats import distribution, distribution_with_ci
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def summarize(
    records: Iterable[RequestRecord], slos: Sequence[SLO] = (), target_rate: float | None = None
) -> Summary:
    """The Summary of the measured (non-warm-up) records, judged against `slos`.

    `target_rate` is the rate an open-loop point asked for; None for a closed loop,
    whose schedule-based metrics are then left empty (its "schedule" is only when a
    worker picked each request).
    """
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.status is Status.OK]
    failed = [r for r in measured if r.status is Status.ERROR]
    window = window_s(measured)
    timing = chunk_timing(ok)
    per_request = _PerRequest.of(ok, timing)
    tokens = _token_totals(ok)
    on_schedule = ok if target_rate is not None else []  # open loop: latency from the scheduled time
    with_ci = {
        "ttft_ms": distribution_with_ci(per_request.ttft_ns, 1 / NS_PER_MS),
        "itl_ms": distribution_with_ci(timing.itl_ns, 1 / NS_PER_MS),
        "tpot_ms": distribution_with_ci(per_request.tpot_ns, 1 / NS_PER_MS),
        "e2e_ms": distribution_with_ci(per_request.e2e_ns, 1 / NS_PER_MS),
    }
    base = Summary(
        requests=RequestCounts(
            completed=len(ok),
            errored=len(failed),
            incomplete=len(measured) - len(ok) - len(failed),
            total=len(measured),
        ),
        error_rate=len(failed) / (len(ok) + len(failed)) if ok or failed else None,
        errors=error_counts(failed),
        window_s=window,
        ttft_ms=with_ci["ttft_ms"][0],
        ttfa_ms=distribution(per_request.ttfa_ns, 1 / NS_PER_MS),
        itl_ms=with_ci["itl_ms"][0],
        chunk_gap_ms=distribution(timing.gaps_ns, 1 / NS_PER_MS),
        tpot_ms=with_ci["tpot_ms"][0],
        e2e_ms=with_ci["e2e_ms"][0],
        lateness_ms=distribution(_column(rq.lateness_ns, measured), 1 / NS_PER_MS),
        connect_ms=distribution(_column(lambda r: r.connect_duration_ns, measured), 1 / NS_PER_MS),
        ttft_from_scheduled_ms=distribution(_column(rq.ttft_from_scheduled_ns, on_schedule), 1 / NS_PER_MS),
        e2e_from_scheduled_ms=distribution(_column(rq.e2e_from_scheduled_ns, on_schedule), 1 / NS_PER_MS),
        decode_tokens_per_s=distribution(per_request.decode_tokens_per_s),
        input_tokens=distribution(_column(lambda r: r.input_tokens, ok)),
        output_tokens=distribution(_column(lambda r: r.output_tokens, ok)),
        throughput=_throughput(len(ok), tokens, window),
        schedule=schedule_summary(measured, target_rate) if target_rate is not None else None,
        tokens=tokens,
        goodput=goodput(per_request.slo_values(), slos, len(ok), window),
        percentile_ci={field: ci for field, (dist, ci) in with_ci.items() if dist.count},
        by_turn=conv.by_turn(ok),
        conversations=conv.conversations(measured, None),
        prefix_cache=conv.prefix_cache(ok),
        server_timing=summarize_server_timing(ok),
    )
    if not slos:
        return base
    return base.model_copy(update={"slo": judge(slos, base.flat(), per_request.slo_values())})


def summarize_by_iteration(
    records: Iterable[RequestRecord], slos: Sequence[SLO] = (), target_rate: float | None = None
) -> dict[int, Summary]:
    """One Summary per measured iteration (≥ 1), in iteration order; warm-up left out."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup and r.iteration >= 1:
            groups.setdefault(r.iteration, []).append(r)
    return {i: summarize(groups[i], slos, target_rate) for i in sorted(groups)}


def window_s(records: Iterable[RequestRecord]) -> float | None:
    """Measurement window: first sent_ns to last end_ns of completed or errored requests.

    Formula: (max end_ns − min sent_ns) / 10^9; None when no such request has an end.
    """
    finished = [r for r in records if r.status is not Status.INCOMPLETE and not r.warmup]
    ends = [r.end_ns for r in finished if r.end_ns is not None]
    if not ends:
        return None
    return (max(ends) - min(r.sent_ns for r in finished)) / NS_PER_S


def error_key(r: RequestRecord) -> str:
    """The key an errored request is counted under: `http_503`, `timeout`, ... (`other`)."""
    if r.http_status is not None and r.error_kind in (None, ErrorKind.HTTP):
        return f"http_{r.http_status}"
    return r.error_kind.value if r.error_kind is not None else "other"


def error_counts(failed: Iterable[RequestRecord]) -> dict[str, int]:
    """Errored requests per `error_key`, keys sorted."""
    counts = Counter(error_key(r) for r in failed)
    return dict(sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class _PerRequest:
    """Per-request values of the completed requests, in ns (NaN = not applicable)."""

    ttft_ns: np.ndarray
    ttfa_ns: np.ndarray
    tpot_ns: np.ndarray
    e2e_ns: np.ndarray
    decode_tokens_per_s: np.ndarray
    max_itl_ns: np.ndarray
    ttft_from_scheduled_ns: np.ndarray
    e2e_from_scheduled_ns: np.ndarray

    @classmethod
    def of(cls, ok: Sequence[RequestRecord], timing: ChunkTiming) -> _PerRequest:
        return cls(
            ttft_ns=_column(rq.ttft_ns, ok),
            ttfa_ns=_column(rq.ttfa_ns, ok),
            tpot_ns=_column(rq.tpot_ns, ok),
            e2e_ns=_column(rq.e2e_ns, ok),
            decode_tokens_per_s=_column(rq.decode_tokens_per_s, ok),
            max_itl_ns=timing.max_itl_ns,
            ttft_from_scheduled_ns=_column(rq.ttft_from_scheduled_ns, ok),
            e2e_from_scheduled_ns=_column(rq.e2e_from_scheduled_ns, ok),
        )

    def slo_values(self) -> dict[str, np.ndarray]:
        """Per-request SLO metric -> values in the SLO's unit (ms, tokens/s)."""
        return {
            "ttft": self.ttft_ns / NS_PER_MS,
            "ttfa": self.ttfa_ns / NS_PER_MS,
            "tpot": self.tpot_ns / NS_PER_MS,
            "itl": self.max_itl_ns / NS_PER_MS,
            "e2e": self.e2e_ns / NS_PER_MS,
            "decode": self.decode_tokens_per_s,
            "ttft_from_scheduled": self.ttft_from_scheduled_ns / NS_PER_MS,
            "e2e_from_scheduled": self.e2e_from_scheduled_ns / NS_PER_MS,
        }


def _column(
    value: Callable[[RequestRecord], float | int | None], records: Sequence[RequestRecord]
) -> np.ndarray:
    """`value(r)` for each record as float64, NaN where it is None."""
    return np.fromiter(
        (np.nan if (v := value(r)) is None else v for r in records),
        dtype=np.float64,
        count=len(records),
    )


def _token_totals(ok: Sequence[RequestRecord]) -> TokenTotals:
    return TokenTotals(
        input_total=sum(r.input_tokens or 0 for r in ok),
        output_total=sum(r.output_tokens or 0 for r in ok),
        input_sources=_sources(r.input_tokens_source for r in ok),
        output_sources=_sources(r.output_tokens_source for r in ok),
    )


def _sources(sources: Iterable[TokenSource | None]) -> dict[str, int]:
    """Requests per token-count source (`usage`, `tokenizer`, ...; `unknown` if unset)."""
    counts = Counter("unknown" if s is None else s.value for s in sources)
    return dict(sorted(counts.items()))


def _throughput(completed: int, tokens: TokenTotals, window: float | None) -> Throughput:
    if not window:
        return Throughput()
    return Throughput(
        requests_per_s=completed / window,
        output_tokens_per_s=tokens.output_total / window,
        total_tokens_per_s=(tokens.input_total + tokens.output_total) / window,
        input_tokens_per_s=tokens.input_total / window,
    )
