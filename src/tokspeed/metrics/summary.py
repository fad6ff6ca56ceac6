"""Summarise the records of one load point: counts, distributions, throughput, goodput.

Warm-up records (`warmup=True`) are always left out. Formulas:

* error_rate = errored / (completed + errored); None when none finished
* window_s = (last end_ns − first sent_ns) / 10^9 over completed, errored and cancelled requests
* cancelled: requests the client aborted on purpose (--cancel-share); neither completed nor errored,
  so they are in no latency distribution and not in error_rate
* requests_per_s = completed / window_s
* output_tokens_per_s = Σ output_tokens of completed requests / window_s
* input_tokens_per_s = Σ input_tokens of completed requests / window_s
* total_tokens_per_s = (Σ input_tokens + Σ output_tokens) / window_s
* sustained_requests_per_s, window_arrivals_per_s, sustained_window_s: the
  rates at steady state, without ramp-up and drain (`tokspeed.metrics.sustained`;
  the one formula that also counts warm-up records: those ending in the window)
  (rates are None when the window is unknown or zero; unknown counts add 0)
* TTFT, TTFA, ITL (per token, pooled), chunk gaps, TPOT, NTPOT, E2E, decode speed and
  token counts are over completed requests; lateness over every sent request.
* percentile_ci: the 95% CI of p50, p90, p99, p99.9 of TTFT, ITL, TPOT and E2E: order-statistic
  for the per-request ones (`tokspeed.stats.distribution.distribution_with_ci`; None where n is too
  small); ITL's by a seeded bootstrap that resamples requests, because a request's tokens are not
  independent (`tokspeed.stats.bootstrap`; None past the exact sample's limit or too few values)
* open-loop points only (`target_rate` given): TTFT and E2E from the scheduled
  time (coordinated-omission corrected) over completed requests, and the
  schedule's realised rates (`tokspeed.metrics.schedule`); otherwise empty / None.

Which distributions there are, over which requests and with which interval comes from the table in
`tokspeed.metrics.table`; per-request formulas live in `tokspeed.metrics.request`, pooled chunk timing in
`tokspeed.metrics.chunks`, goodput and SLO verdicts in `tokspeed.metrics.goodput`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tokspeed.metrics import request as rq
from tokspeed.metrics.chunks import chunk_timing
from tokspeed.metrics.conversations import ConversationAccumulator
from tokspeed.metrics.goodput import (
    good_count,
    goodput_of,
    implied_thresholds,
    judge_counts,
    met_counts,
)
from tokspeed.metrics.samples import itl_count
from tokspeed.metrics.schedule import schedule_of
from tokspeed.metrics.schema import (
    RequestCounts,
    Schedule,
    Summary,
    Throughput,
    TokenTotals,
)
from tokspeed.metrics.server_timing import ServerTimingAccumulator
from tokspeed.metrics.slo import SLO
from tokspeed.metrics.sustained import Sustained, SustainedWindow
from tokspeed.metrics.table import METRICS, PER_REQUEST_SLOS, WITH_INTERVALS
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource
from tokspeed.stats.bootstrap import bootstrap_percentile_cis
from tokspeed.stats.distribution import (
    CI_QUANTILES,
    QUANTILES,
    Distribution,
    QuantileCI,
    percentile_name,
)
from tokspeed.stats.sketch import BoundedSample

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
ITL_RESAMPLES = 400  # the ITL interval's bootstrap: ~0.1 s for 10,000 tokens
ITL_MAX_VALUES = 10_000  # tokens entering it (a seeded subset beyond: a wider interval, never narrower)


def summarize(
    records: Iterable[RequestRecord],
    slos: Sequence[SLO] = (),
    target_rate: float | None = None,
    turns: int | None = None,
    percentiles: Sequence[float] = (),
) -> Summary:
    """The Summary of the measured (non-warm-up) records, judged against `slos`.

    `target_rate` is the rate an open-loop point asked for; None for a closed loop,
    whose schedule-based metrics are then left empty (its "schedule" is only when a
    worker picked each request). `turns`: the conversation length a --multi-turn run
    planned (conversations are judged complete against it; else the longest seen).
    `percentiles`: --percentiles; those beyond the standard ones go to `Summary.percentiles`.
    One pass through `SummaryBuilder`: `records` may be a generator.
    """
    builder = SummaryBuilder(slos, target_rate, turns, percentiles)
    for r in records:
        builder.add(r)
    return builder.summary()


class SummaryBuilder:
    """`summarize`, one record at a time, in memory that does not grow with the records fed.

    Records are processed in batches of at most _BATCH_RECORDS records or
    _BATCH_CHUNKS chunks (vectorised, then dropped); what stays is counters and one
    `BoundedSample` per distribution (exact up to its limit, then a log histogram:
    `Summary.approximate` names the distributions that went past it), plus, for open-loop
    points, the scheduled and sent times (16 bytes a request, for the schedule's gaps).
    """

    def __init__(self, slos: Sequence[SLO] = (), target_rate: float | None = None, turns: int | None = None,
                 percentiles: Sequence[float] = ()) -> None:
        self._slos = tuple(slos)
        # the SLOs' own percentiles too (`itl_p75_ms<=20` needs p75 whether or not --percentiles asked for it)
        wanted = [*percentiles, *(q for q in (slo.quantile for slo in slos) if q is not None)]
        self._extra = extra_percentiles(wanted)
        self._thresholds = implied_thresholds(self._slos)
        self._target_rate = target_rate
        self._turns = turns
        self._batch: list[RequestRecord] = []
        self._batch_chunks = 0
        self._samples = {m.field: BoundedSample() for m in METRICS}
        self._measured = self._completed = self._errored = self._cancelled = self._good = 0
        self._errors: Counter[str] = Counter()
        self._first_sent: int | None = None  # of finished (completed or errored) measured requests
        self._last_end: int | None = None
        self._input_total = self._output_total = 0
        self._input_sources: Counter[str] = Counter()
        self._output_sources: Counter[str] = Counter()
        self._met: Counter[str] = Counter()  # per-request SLO text -> requests meeting it
        self._scheduled: dict[int, array[int]] = {}  # open loop: iteration -> scheduled_ns
        self._sent: dict[int, array[int]] = {}  # ... and sent_ns of the requests sent
        self._conversations = ConversationAccumulator()
        self._server_timing = ServerTimingAccumulator()
        self._sustained = SustainedWindow()
        self._itl_counts: list[int] | None = []  # ITL values per completed request, in order (None: unknown)

    def add(self, r: RequestRecord) -> None:
        """Take one record (warm-up records are left out of everything)."""
        self._conversations.add(r)
        self._server_timing.add(r)
        self._sustained.add(r)
        if r.warmup:
            return
        self._measured += 1
        if r.status is not Status.INCOMPLETE:
            self._first_sent = r.sent_ns if self._first_sent is None else min(self._first_sent, r.sent_ns)
            if r.end_ns is not None:
                self._last_end = r.end_ns if self._last_end is None else max(self._last_end, r.end_ns)
        if r.status is Status.ERROR:
            self._errored += 1
            self._errors[error_key(r)] += 1
        elif r.status is Status.CANCELLED:
            self._cancelled += 1
        if self._target_rate is not None:
            self._scheduled.setdefault(r.iteration, array("q")).append(r.scheduled_ns)
            if rq.was_sent(r):
                self._sent.setdefault(r.iteration, array("q")).append(r.sent_ns)
        self._batch.append(r)
        self._batch_chunks += len(r.chunk_ns)
        if len(self._batch) >= _BATCH_RECORDS or self._batch_chunks >= _BATCH_CHUNKS:
            self._flush()

    def summary(self) -> Summary:
        """The Summary of everything added so far."""
        self._flush()
        samples = self._samples
        completed, window = self._completed, self._window_s()
        tokens = TokenTotals(
            input_total=self._input_total,
            output_total=self._output_total,
            input_sources=dict(sorted(self._input_sources.items())),
            output_sources=dict(sorted(self._output_sources.items())),
        )
        with_ci = {m.field: samples[m.field].distribution_with_ci(m.scale) for m in WITH_INTERVALS}
        plain = {m.field: samples[m.field].distribution(m.scale) for m in METRICS if m.interval is None}
        base = Summary(
            requests=RequestCounts(
                completed=completed,
                errored=self._errored,
                incomplete=self._measured - completed - self._errored - self._cancelled,
                cancelled=self._cancelled,
                total=self._measured,
            ),
            error_rate=self._errored / (completed + self._errored) if completed or self._errored else None,
            errors=dict(sorted(self._errors.items())),
            window_s=window,
            **{m.field: with_ci[m.field][0] if m.interval else plain[m.field] for m in METRICS},
            throughput=_throughput(completed, tokens, window, self._sustained.result()),
            schedule=self._schedule(),
            tokens=tokens,
            goodput=goodput_of(self._good, self._thresholds, completed, window) if self._thresholds else None,
            percentile_ci={field: ci for field, (dist, ci) in self._request_cis(with_ci).items() if dist.count},
            by_turn=self._conversations.by_turn(),
            conversations=self._conversations.conversations(self._turns),
            prefix_cache=self._conversations.prefix_cache(),
            server_timing=self._server_timing.summary(),
            percentiles=self._extra_values(),
            approximate=sorted(name for name, sample in samples.items() if not sample.exact),
        )
        if not self._slos:
            return base
        return base.model_copy(update={"slo": judge_counts(self._slos, base.flat(), self._met, completed)})

    def _extra_values(self) -> dict[str, dict[str, float | None]]:
        """The --percentiles beyond the standard ones, per distribution with values, in its unit.

        numpy's default percentile of the raw values, then scaled (as `distribution.distribution` does);
        from the log histogram past the exact limit (as the standard percentiles).
        """
        if not self._extra:
            return {}
        out: dict[str, dict[str, float | None]] = {}
        for m in METRICS:
            sample = self._samples[m.field]
            if sample.count:
                out[m.field] = {name: _scale(sample.quantile(q), m.scale) for name, q in self._extra}
        return out

    def _request_cis(self, with_ci: dict[str, tuple[Distribution, dict[str, QuantileCI | None]]]
                     ) -> dict[str, tuple[Distribution, dict[str, QuantileCI | None]]]:
        """The intervals, with ITL's from resampling requests (its tokens are not independent draws).

        While the ITL sample is exact and each value's request is known, a seeded bootstrap by
        request (`metrics.bootstrap`, ITL_RESAMPLES resamples); else no ITL interval at all.
        """
        dist, _pooled = with_ci["itl_ms"]
        sample = self._samples["itl_ms"]
        cis: dict[str, QuantileCI | None] = dict.fromkeys(CI_QUANTILES)
        if dist.count and sample.exact and self._itl_counts is not None and sum(self._itl_counts) == sample.count:
            owner = np.repeat(np.arange(len(self._itl_counts)), self._itl_counts)
            boot = bootstrap_percentile_cis(sample.values() / NS_PER_MS, tuple(CI_QUANTILES.values()), owner=owner,
                                            resamples=ITL_RESAMPLES, max_n=ITL_MAX_VALUES)
            for name, q in CI_QUANTILES.items():
                b, estimate = boot[q], dist.stat(name)
                if b is not None and b.reliable and estimate is not None:
                    cis[name] = QuantileCI(low=min(b.low, estimate), high=max(b.high, estimate), coverage=0.95,
                                           method="request-bootstrap", units=b.units)
        return {**with_ci, "itl_ms": (dist, cis)}

    def _flush(self) -> None:
        """Fold the batch into the counters and samples, then drop it."""
        batch, self._batch, self._batch_chunks = self._batch, [], 0
        if not batch:
            return
        samples = self._samples
        for m in _OVER_MEASURED:
            if m.value is not None:
                samples[m.field].add(_column(m.value, batch))
        ok = [r for r in batch if r.status is Status.OK]
        if not ok:
            return
        timing = chunk_timing(ok)
        if self._itl_counts is not None:
            counts = [itl_count(r) for r in ok]
            self._itl_counts = self._itl_counts + counts if sum(counts) == timing.itl_ns.size else None
        columns = {m.field: _column(m.value, ok) for m in _OVER_COMPLETED if m.value is not None}
        pooled = {"tokens": timing.itl_ns, "chunks": timing.gaps_ns}
        for m in METRICS:
            if m.over != "measured" and (self._target_rate is not None or not m.open_loop):  # open loop: from the schedule
                samples[m.field].add(pooled[m.over] if m.value is None else columns[m.field])
        self._completed += len(ok)
        self._input_total += sum(r.input_tokens or 0 for r in ok)
        self._output_total += sum(r.output_tokens or 0 for r in ok)
        self._input_sources.update(_source(r.input_tokens_source) for r in ok)
        self._output_sources.update(_source(r.output_tokens_source) for r in ok)
        slo_values = {m.name: (timing.max_itl_ns if m.slo == "max" else columns[m.field]) / m.divisor
                      for m in PER_REQUEST_SLOS}
        if self._thresholds:
            self._good += good_count(slo_values, self._thresholds, len(ok))
        self._met.update(met_counts(self._slos, slo_values))

    def _window_s(self) -> float | None:
        """First sent_ns to last end_ns of the completed or errored requests: (max end − min sent) / 10^9.

        None when no such request has an end.
        """
        if self._last_end is None or self._first_sent is None:
            return None
        return (self._last_end - self._first_sent) / NS_PER_S

    def _schedule(self) -> Schedule | None:
        if self._target_rate is None:
            return None
        return schedule_of(
            self._target_rate,
            [self._scheduled[i] for i in sorted(self._scheduled)],
            [self._sent[i] for i in sorted(self._sent)],
        )


_OVER_MEASURED = tuple(m for m in METRICS if m.over == "measured")
_OVER_COMPLETED = tuple(m for m in METRICS if m.over == "completed")
_BATCH_RECORDS = 4096
_BATCH_CHUNKS = 1 << 16  # ~256 records of 256 tokens: the batch's numpy temporaries stay a few MB


def extra_percentiles(percentiles: Sequence[float]) -> tuple[tuple[str, float], ...]:
    """(stat name, q) of the requested percentiles a Distribution does not already carry (p75, p99.99, ...)."""
    standard = set(QUANTILES)
    return tuple((percentile_name(q), float(q)) for q in sorted(set(percentiles)) if float(q) not in standard)


def _scale(value: float | None, scale: float) -> float | None:
    if value is None:
        return None
    inverse = 1.0 / scale
    return value / inverse if inverse.is_integer() else value * scale


def summarize_by_iteration(
    records: Iterable[RequestRecord],
    slos: Sequence[SLO] = (),
    target_rate: float | None = None,
    turns: int | None = None,
    percentiles: Sequence[float] = (),
) -> dict[int, Summary]:
    """One Summary per measured iteration (≥ 1), in iteration order; warm-up left out."""
    builders: dict[int, SummaryBuilder] = {}
    for r in records:
        if not r.warmup and r.iteration >= 1:
            if r.iteration not in builders:
                builders[r.iteration] = SummaryBuilder(slos, target_rate, turns, percentiles)
            builders[r.iteration].add(r)
    return {i: builders[i].summary() for i in sorted(builders)}


def error_key(r: RequestRecord) -> str:
    """The key an errored request is counted under: `http_503`, `timeout`, ... (`other`)."""
    if r.http_status is not None and r.error_kind in (None, ErrorKind.HTTP):
        return f"http_{r.http_status}"
    return r.error_kind.value if r.error_kind is not None else "other"


def _column(
    value: Callable[[RequestRecord], float | int | None], records: Sequence[RequestRecord]
) -> np.ndarray:
    """`value(r)` for each record as float64, NaN where it is None."""
    return np.fromiter(
        (np.nan if (v := value(r)) is None else v for r in records),
        dtype=np.float64,
        count=len(records),
    )


def _source(source: TokenSource | None) -> str:
    """A token-count source's key (`usage`, `tokenizer`, ...; `unknown` if unset)."""
    return "unknown" if source is None else source.value


def _throughput(completed: int, tokens: TokenTotals, window: float | None, sustained: Sustained | None) -> Throughput:
    if not window:
        return Throughput()
    return Throughput(
        requests_per_s=completed / window,
        output_tokens_per_s=tokens.output_total / window,
        total_tokens_per_s=(tokens.input_total + tokens.output_total) / window,
        input_tokens_per_s=tokens.input_total / window,
        sustained_requests_per_s=sustained.requests_per_s if sustained else None,
        window_arrivals_per_s=sustained.arrivals_per_s if sustained else None,
        sustained_window_s=sustained.window_s if sustained else None,
    )
