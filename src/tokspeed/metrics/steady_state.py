"""Steady-state detection: trim the ramp-up and the drain of a load point, and summarise what is left.

A fixed `--warmup N` only drops the first N requests; the load may still be
ramping (connections, caches, batch sizes) after them, and a run's tail always
drains (in-flight requests finish while no new ones start). Here the window is
found from the data:

1. the token-arrival rate over time: the measured window (first send → last
   end) cut into k equal bins (k = 100, fewer for short runs, at least 20), each
   holding the output tokens that arrived in it (a chunk's tokens: its
   chunk_tokens, else output_tokens / chunks of its request);
2. MSER-5 (White 1997): average consecutive bins in batches of 5 (Z_1..Z_m) and
   pick the truncation d ≤ m/2 minimising Σ_{j>d}(Z_j − Z̄_{>d})² / (m − d)²; the
   ramp-up ends at batch d — if the dropped batches' mean differs from the kept ones' by
   more than 3 standard errors, else nothing is trimmed (a flat series has its MSER minimum
   anywhere by chance). The same on the reversed series gives the drain;
3. the steady window is [start + d₁·5·bin, end − d₂·5·bin]; the steady summary
   is the ordinary summary of the requests sent and finished inside it.

Only for a point with one measured iteration (iterations restart the load) and
enough tokens in time (≥ 20 bins of at least one token on average); else None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tokspeed.metrics.schema import SteadyState, Summary
from tokspeed.records import RequestRecord, Status

NS_PER_S = 1_000_000_000
SummaryOf = Callable[[Iterable[RequestRecord]], Summary]  # summarize with the point's SLOs and rate
BATCH = 5
MAX_BINS = 100
MIN_BINS = 20


def mser_truncation(series: Sequence[float] | np.ndarray, batch: int = BATCH) -> int:
    """MSER-`batch`: how many leading values of `series` to drop (a multiple of `batch`).

    Formula: Z_j = mean of values (j−1)·b … j·b − 1 (m = ⌊n / b⌋ whole batches);
    d* = argmin_{0 ≤ d ≤ m/2} Σ_{j>d}(Z_j − Z̄_{>d})² / (m − d)²; returns d*·b.
    0 when there are fewer than 2 batches.
    """
    x = np.asarray(series, dtype=np.float64)
    m = x.size // batch
    if m < 2:
        return 0
    z = x[: m * batch].reshape(m, batch).mean(axis=1)
    # suffix sums give every candidate's statistic in one pass
    rev = z[::-1]
    s1 = np.cumsum(rev)[::-1]  # Σ_{j≥d} Z_j
    s2 = np.cumsum(rev * rev)[::-1]
    count = np.arange(m, 0, -1, dtype=np.float64)  # m − d
    sse = s2 - s1 * s1 / count
    stat = sse / (count * count)
    limit = m // 2 + 1
    d = int(np.argmin(stat[:limit]))
    return d * batch if d and _differs(z[:d], z[d:]) else 0


def _differs(dropped: np.ndarray, kept: np.ndarray, z: float = 3.0) -> bool:
    """Whether the batches MSER would drop are a transient: their mean differs from the kept ones'
    by more than z standard errors of that difference (the kept batches' spread). On a flat
    series MSER's minimum falls anywhere by chance (a flat 260 s run lost 130 s to it); that is
    not a ramp-up."""
    spread = float(np.std(kept, ddof=1)) if kept.size > 1 else 0.0
    gap = abs(float(dropped.mean()) - float(kept.mean()))
    if spread == 0.0:
        return gap > 0.0
    return gap > z * spread * float(np.sqrt(1.0 / dropped.size + 1.0 / kept.size))


def token_rate_series(
    records: Iterable[RequestRecord], bins: int, span: tuple[int, int] | None = None
) -> tuple[np.ndarray, int, int]:
    """(tokens per bin, window start ns, window end ns) over the completed records' chunk arrivals.

    `span` is the window (first send, last end of those records) when the caller knows it;
    else it is found in a first pass (then `records` must be re-iterable, e.g. a list).
    """
    start, end = span if span is not None else TimedSpan.of(records).window()
    width = max(1, end - start)
    counts = np.zeros(bins)
    times: list[np.ndarray] = []
    weights: list[np.ndarray] = []

    def fold() -> None:
        hist, _ = np.histogram(np.concatenate(times) - start, bins=bins, range=(0, width), weights=np.concatenate(weights))
        counts[:] += hist
        times.clear()
        weights.clear()

    pending = 0
    for r in records:
        if _timed(r):
            times.append(np.asarray(r.chunk_ns, dtype=np.int64))
            weights.append(_chunk_weights(r))
            pending += len(r.chunk_ns)
            if pending >= _BATCH_CHUNKS:
                fold()
                pending = 0
    if times:
        fold()
    return counts, start, end


_BATCH_CHUNKS = 1 << 16  # chunk times binned at once (a few MB of temporaries)


def _timed(r: RequestRecord) -> bool:
    """A completed, measured record with chunk times: it places tokens in time."""
    return not r.warmup and r.status is Status.OK and bool(r.chunk_ns) and r.end_ns is not None


@dataclass
class TimedSpan:
    """What the detection needs before binning, fed one record at a time (`add`) in a caller's pass."""

    iterations: set[int] = field(default_factory=set)  # of the measured records
    timed: int = 0  # completed records with chunk times
    chunks: int = 0
    start: int | None = None  # first send of the timed records
    end: int | None = None  # ... and last end

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> TimedSpan:
        span = cls()
        for r in records:
            span.add(r)
        return span

    def add(self, r: RequestRecord) -> None:
        if r.warmup:
            return
        self.iterations.add(r.iteration)
        if _timed(r):
            self.timed += 1
            self.chunks += len(r.chunk_ns)
            self.start = r.sent_ns if self.start is None else min(self.start, r.sent_ns)
            self.end = r.end_ns if self.end is None else max(self.end, r.end_ns or 0)

    def window(self) -> tuple[int, int]:
        return self.start or 0, self.end or 0


def _chunk_weights(r: RequestRecord) -> np.ndarray:
    n = len(r.chunk_ns)
    if r.chunk_tokens is not None and len(r.chunk_tokens) == n:
        return np.asarray(r.chunk_tokens, dtype=np.float64)
    share = (r.output_tokens or n) / n
    return np.full(n, share)


def steady_state(
    records: Iterable[RequestRecord], summary_of: SummaryOf, span: TimedSpan | None = None
) -> SteadyState | None:
    """The detected steady window of one point's measured records and the summary over it (module docstring).

    Up to three passes over `records` (so it must be re-iterable: a list, or results.StoredRecords,
    which reads the file afresh each time), never holding more than a batch of them; two when the
    caller fed every record to `span` in a pass of its own.
    """
    if iter(records) is records:
        raise TypeError("steady_state reads the records more than once: pass a list or a re-iterable, not an iterator")
    if span is None:
        span = TimedSpan.of(records)
    if len(span.iterations) != 1 or span.timed < 2:
        return None
    bins = min(MAX_BINS, span.chunks)
    if bins < MIN_BINS:
        return None
    series, start, end = token_rate_series(records, bins, span.window())
    width = (end - start) / bins
    head = mser_truncation(series)
    tail = mser_truncation(series[head:][::-1])
    lo = start + int(head * width)
    hi = end - int(tail * width)
    inside = summary_of(r for r in records if not r.warmup and r.sent_ns >= lo and r.end_ns is not None and r.end_ns <= hi)
    return SteadyState(
        method="mser-5 on output tokens per bin",
        bins=bins,
        bin_s=width / NS_PER_S,
        trimmed_start_s=(lo - start) / NS_PER_S,
        trimmed_end_s=(end - hi) / NS_PER_S,
        window_s=(hi - lo) / NS_PER_S,
        full_window_s=(end - start) / NS_PER_S,
        requests=inside.requests.total,
        summary=inside if inside.requests.total else None,
    )


def with_steady_state(
    summary: Summary, records: Iterable[RequestRecord], summary_of: SummaryOf, span: TimedSpan | None = None
) -> Summary:
    """`summary` with `steady_state` filled in (unchanged when none is detected)."""
    found = steady_state(records, summary_of, span)
    return summary if found is None else summary.model_copy(update={"steady_state": found})
