"""One pass over a load point's records: exactly what the point rules and the end-of-point checks need.

`digest_point(records)` reads any iterable of records once (a list, a generator, a file
read back one record at a time) and keeps only bounded state: counters, sums, the first
example of each error cause (at most `MAX_CAUSES` causes), the earliest-sent requests the
cold-start rules compare, and `BoundedSample`s (via `metrics.buffered`) for the medians.
Nothing keeps a record. `PointDigest.add(record)` lets a caller feed the same pass to
other accumulators (the summary) at once.

Who reads what:

* `diagnosis.errors`: measured, finished, the failures per cause, the retried requests;
* `diagnosis.tokens`: the completed responses with a max_tokens (early stops, too long),
  the output-token sources, usage below chunks, approximated inputs;
* `diagnosis.stability.cold_start`: the first iteration's earliest request against the
  median of the rest, the first warm-up request against the measured median;
* `diagnosis.ttft.ttft_prefill`: the prompt-length spread and the TTFT-vs-input line;
* `diagnosis.connections`: the connects paid by measured requests;
* `runner.checks`: the same counts, and the anomalies of measured requests;
* `metrics.cold_start`: `cold`, the in-process cold-start tally.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from tokspeed.diagnosis.causes import Cause, advice_for, cause_of, stopped_early
from tokspeed.metrics.buffered import BufferedSample
from tokspeed.metrics.cold_start import ColdStartTally
from tokspeed.metrics.fit import LinearFit, fit_line
from tokspeed.metrics.request import e2e_ns, ttft_ns
from tokspeed.records import Anomaly, RequestRecord, Status, TokenSource
from tokspeed.stats.median import sample_median
from tokspeed.stats.sketch import EXACT_LIMIT

MAX_CAUSES = 256  # error causes tallied one by one per point; later new causes are only counted
MAX_LABELS = 64  # distinct finish reasons / anomaly names kept; later new ones are counted under OTHER_LABEL
OTHER_LABEL = "other"
MESSAGE_CHARS = 300  # an example message is kept this long (the advice is chosen from the whole message)
NS_PER_MS = 1_000_000


@dataclass(slots=True)
class CauseTally:
    """One error cause: how many measured requests failed of it, and the first one's message and advice."""

    count: int
    example: str  # the first failure's message, cut to MESSAGE_CHARS
    advice: str  # advice_for(kind, http_status, the first failure's whole message)


@dataclass(slots=True)
class _Earliest:
    """The earliest-sent value of a group held apart from the rest (ties: the first in file order)."""

    sent_ns: int
    value: float
    input_tokens: int | None = None  # its prompt's tokens, when the latency is a TTFT (cold start is normalised by them)


class _FirstAndRest:
    """Values in arrival order; at the end, the earliest-sent one and the median of the others."""

    __slots__ = ("first", "rest")

    def __init__(self) -> None:
        self.first: _Earliest | None = None
        self.rest = BufferedSample()

    def add(self, sent_ns: int, value: float, input_tokens: int | None = None) -> None:
        if self.first is None:
            self.first = _Earliest(sent_ns, value, input_tokens)
        elif sent_ns < self.first.sent_ns:
            self.rest.append(self.first.value)
            self.first = _Earliest(sent_ns, value, input_tokens)
        else:
            self.rest.append(value)

    @property
    def count(self) -> int:
        return self.rest.read().count + (self.first is not None)

    def rest_median(self) -> float | None:
        return sample_median(self.rest.read())


class LineFitter:
    """TTFT (ms) against input tokens, fed point by point: `fit_line` on the exact points up to `limit`,
    then ordinary least squares from running co-moments (the same line, to rounding)."""

    __slots__ = ("_cxx", "_cxy", "_cyy", "_mx", "_my", "_x", "_y", "limit", "n")

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.limit = limit
        self._x: array[float] | None = array("d")
        self._y: array[float] | None = array("d")
        self.n = 0
        self._mx = self._my = self._cxx = self._cxy = self._cyy = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        dx = x - self._mx
        self._mx += dx / self.n
        dy = y - self._my
        self._my += dy / self.n
        self._cxx += dx * (x - self._mx)
        self._cxy += dx * (y - self._my)
        self._cyy += dy * (y - self._my)
        if self._x is not None and self._y is not None:
            if self.n > self.limit:
                self._x = self._y = None  # too many to keep: the co-moments carry on alone
            else:
                self._x.append(x)
                self._y.append(y)

    @property
    def kept(self) -> int:
        """Points kept exactly (0 once beyond the limit)."""
        return 0 if self._x is None else len(self._x)

    def fit(self) -> LinearFit:
        if self._x is not None and self._y is not None:
            return fit_line(np.array(self._x, dtype=np.float64), np.array(self._y, dtype=np.float64))
        return _from_moments(self.n, self._mx, self._my, self._cxx, self._cxy, self._cyy)

    def fit_without(self, x: float, y: float) -> LinearFit:
        """The line through every point but one (x, y) added before: the cold-start rule judges the first
        request against the others' line, which its own slowness must not bend."""
        if self._x is not None and self._y is not None:
            xs, ys = np.array(self._x, dtype=np.float64), np.array(self._y, dtype=np.float64)
            hits = np.flatnonzero((xs == x) & (ys == y))
            if len(hits):
                xs, ys = np.delete(xs, hits[0]), np.delete(ys, hits[0])
            return fit_line(xs, ys)
        n = self.n - 1  # Welford's update run backwards
        if n < 2:
            return LinearFit(points=max(n, 0), slope_ms_per_1k_tokens=None, intercept_ms=None, r2=None)
        mx, my = self._mx - (x - self._mx) / n, self._my - (y - self._my) / n
        cxx = self._cxx - (x - mx) * (x - self._mx)
        cxy = self._cxy - (x - mx) * (y - self._my)
        cyy = self._cyy - (y - my) * (y - self._my)
        return _from_moments(n, mx, my, cxx, cxy, cyy)


def _from_moments(n: int, mx: float, my: float, cxx: float, cxy: float, cyy: float) -> LinearFit:
    """Ordinary least squares from means and co-moments."""
    if cxx <= 1e-12 * max(1.0, mx * mx) * max(n, 1):
        return LinearFit(points=n, slope_ms_per_1k_tokens=None, intercept_ms=None, r2=None)
    slope = cxy / cxx
    intercept = my - slope * mx
    residual = max(cyy - slope * cxy, 0.0)
    r2 = 1.0 - residual / cyy if cyy > 0 else 1.0
    return LinearFit(points=n, slope_ms_per_1k_tokens=slope * 1000, intercept_ms=intercept, r2=r2)


def _bump(counts: Counter[str], key: str) -> None:
    """counts[key] += 1, folding new keys beyond MAX_LABELS into OTHER_LABEL."""
    if key in counts or len(counts) < MAX_LABELS:
        counts[key] += 1
    else:
        counts[OTHER_LABEL] += 1


def _latency_ms(r: RequestRecord) -> float | None:
    """TTFT, else E2E (not streamed), in ms: the cold-start rules' latency."""
    value = ttft_ns(r)
    if value is None:
        value = e2e_ns(r)
    return None if value is None else value / NS_PER_MS


def _ttft_input(r: RequestRecord) -> int | None:
    """The prompt's tokens when the cold-start latency is a TTFT (what the prefill line predicts), else None."""
    return r.input_tokens if r.input_tokens and ttft_ns(r) is not None else None


@dataclass(slots=True)
class PointDigest:
    """Bounded tallies of one load point's records (warm-up included), fed by `add`; see the module docstring."""

    # every measured (non-warm-up) request
    measured: int = 0
    finished: int = 0  # status ok or error
    measured_sent: int = 0  # with a send time (reconnects' denominator)
    connects: int = 0  # ... that opened a new connection
    connect_sum_ns: int = 0
    connect_max_ns: int = 0
    retried: int = 0  # succeeded or not after --retries
    retries: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)  # any status
    # measured failures, by cause (first seen first)
    failed: int = 0
    causes: dict[Cause, CauseTally] = field(default_factory=dict)
    untallied_failed: int = 0  # failures of causes beyond MAX_CAUSES
    # measured, ok
    ok: int = 0
    sources: Counter[str] = field(default_factory=Counter)  # output_tokens_source
    chunk_counted: int = 0  # ... counted one per chunk for want of any usage (a wrong usage is usage_below)
    approx_input: int = 0
    usage_below: int = 0  # anomaly usage_below_chunks
    usage_below_sources: Counter[str] = field(default_factory=Counter)
    asked: int = 0  # ... with a max_tokens and an output token count
    short: int = 0  # ... stopped early
    short_reasons: Counter[str] = field(default_factory=Counter)
    short_output_sum: int = 0
    short_max_sum: int = 0
    too_long: int = 0  # usage-counted and longer than max_tokens
    worst_output: int | None = None
    worst_max: int | None = None
    with_input: int = 0  # input_tokens > 0
    input_min: int | None = None
    input_max: int | None = None
    prefill: LineFitter = field(default_factory=LineFitter)
    # cold start (latency: TTFT, else E2E)
    warmup_ok: int = 0
    warmup_timed: int = 0  # ... with a latency
    first_warmup: _Earliest | None = None  # the earliest-sent of those
    first_iteration: int | None = None  # the lowest iteration of a measured ok request
    first_iteration_latency: _FirstAndRest = field(default_factory=_FirstAndRest)
    measured_latency: BufferedSample = field(default_factory=BufferedSample)
    cold: ColdStartTally = field(default_factory=ColdStartTally)

    def add(self, r: RequestRecord) -> None:
        """Fold one record in."""
        self.cold.add(r)
        if r.warmup:
            if r.status is Status.OK:
                self._add_warmup_ok(r)
            return
        self._add_measured(r)
        if r.status is Status.OK:
            self._add_ok(r)
        elif r.status is Status.ERROR:
            self._add_failed(r)

    # measured -------------------------------------------------------------------
    def _add_measured(self, r: RequestRecord) -> None:
        self.measured += 1
        self.finished += r.status in (Status.OK, Status.ERROR)
        if r.sent_ns:
            self.measured_sent += 1
            if r.connect_duration_ns is not None:
                self.connects += 1
                self.connect_sum_ns += r.connect_duration_ns
                self.connect_max_ns = r.connect_duration_ns if self.connects == 1 else max(
                    self.connect_max_ns, r.connect_duration_ns)
        if r.retries:
            self.retried += 1
            self.retries += r.retries
        for a in r.anomalies or ():
            _bump(self.anomalies, a)

    def _add_failed(self, r: RequestRecord) -> None:
        self.failed += 1
        cause = cause_of(r)
        tally = self.causes.get(cause)
        if tally is not None:
            tally.count += 1
        elif len(self.causes) < MAX_CAUSES:
            message = r.error or ""
            self.causes[cause] = CauseTally(1, message[:MESSAGE_CHARS], advice_for(cause.kind, cause.http_status, message))
        else:
            self.untallied_failed += 1

    # measured, ok ----------------------------------------------------------------
    def _add_ok(self, r: RequestRecord) -> None:
        self.ok += 1
        source = r.output_tokens_source
        if source is not None:
            _bump(self.sources, source.value)
        self.approx_input += r.input_tokens_source is TokenSource.APPROX
        if r.anomalies and Anomaly.USAGE_BELOW_CHUNKS.value in r.anomalies:
            self.usage_below += 1  # usage was given but wrong: counted another way, which that finding says
            if source is not None:
                _bump(self.usage_below_sources, source.value)
        else:
            self.chunk_counted += source is TokenSource.CHUNKS  # no usage at all
        if r.max_tokens and r.output_tokens is not None:
            self._add_asked(r, r.output_tokens, r.max_tokens)
        self._add_prefill(r)
        latency = _latency_ms(r)
        if latency is not None:
            self.measured_latency.append(latency)
        self._add_first_iteration(r, latency)

    def _add_asked(self, r: RequestRecord, output: int, max_tokens: int) -> None:
        self.asked += 1
        if stopped_early(r):
            self.short += 1
            _bump(self.short_reasons, r.finish_reason or "none")
            self.short_output_sum += output
            self.short_max_sum += max_tokens
        if r.output_tokens_source is TokenSource.USAGE and output > max_tokens:
            self.too_long += 1
            if self.worst_output is None or output - max_tokens > self.worst_output - (self.worst_max or 0):
                self.worst_output, self.worst_max = output, max_tokens

    def _add_prefill(self, r: RequestRecord) -> None:
        if r.input_tokens:
            self.with_input += 1
            self.input_min = r.input_tokens if self.input_min is None else min(self.input_min, r.input_tokens)
            self.input_max = r.input_tokens if self.input_max is None else max(self.input_max, r.input_tokens)
            ttft = ttft_ns(r)
            if ttft is not None:  # metrics.fit.ttft_vs_input_tokens over these requests
                self.prefill.add(float(r.input_tokens), ttft / 1e6)

    def _add_first_iteration(self, r: RequestRecord, latency: float | None) -> None:
        if self.first_iteration is None or r.iteration < self.first_iteration:
            self.first_iteration = r.iteration  # a lower iteration turned up: start over (rare: files are in order)
            self.first_iteration_latency = _FirstAndRest()
        if r.iteration == self.first_iteration and latency is not None:
            self.first_iteration_latency.add(r.sent_ns, latency, _ttft_input(r))

    # warm-up ---------------------------------------------------------------------
    def _add_warmup_ok(self, r: RequestRecord) -> None:
        self.warmup_ok += 1
        latency = _latency_ms(r)
        if latency is not None:
            if self.first_warmup is None or r.sent_ns < self.first_warmup.sent_ns:
                self.first_warmup = _Earliest(r.sent_ns, latency, _ttft_input(r))
            self.warmup_timed += 1

    # what the rules read ----------------------------------------------------------
    def measured_median(self) -> float | None:
        """The median latency of the measured ok requests (TTFT, else E2E; ms)."""
        return sample_median(self.measured_latency.read())

    @property
    def measured_timed(self) -> int:
        """Measured ok requests with a latency."""
        return self.measured_latency.read().count

    def ranked_causes(self) -> list[tuple[Cause, CauseTally]]:
        """The causes, largest first (ties: first seen first)."""
        return sorted(self.causes.items(), key=lambda item: -item[1].count)

    @property
    def cause_count(self) -> int:
        """Distinct causes: those tallied, plus one for any failures beyond MAX_CAUSES (at least one more)."""
        return len(self.causes) + (self.untallied_failed > 0)


def digest_point(records: Iterable[RequestRecord]) -> PointDigest:
    """Read a load point's records once (warm-up included) into a `PointDigest`."""
    digest = PointDigest()
    for r in records:
        digest.add(r)
    return digest
