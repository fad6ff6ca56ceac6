"""Raw per-request samples of one load point, for plots and comparisons (not summaries).

`request_samples(records)` keeps the measured (non-warm-up) completed requests,
the same ones `summarize` reports on, and returns their values in ms, aligned
by request (NaN where a metric does not apply), plus every per-token ITL value
with the position of the request it came from, so that analyses can treat a
request's tokens as one unit (they are not independent of each other).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokspeed.metrics import request as rq
from tokspeed.metrics.chunks import chunk_timing
from tokspeed.records import RequestRecord, Status

NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class RequestSamples:
    """Values of the completed measured requests; arrays of one entry per request unless noted."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    itl_mean_ms: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    itl_ms: np.ndarray  # per token, pooled
    itl_owner: np.ndarray  # per token: the index of its request in the arrays above

    @property
    def count(self) -> int:
        return int(self.ttft_ms.size)

    def per_request(self, family: str) -> np.ndarray:
        """One value per request for `family` (ITL: each request's mean per-token ITL)."""
        return {
            "ttft": self.ttft_ms,
            "itl": self.itl_mean_ms,
            "tpot": self.tpot_ms,
            "e2e": self.e2e_ms,
        }[family]

    def values(self, family: str) -> tuple[np.ndarray, np.ndarray | None]:
        """All values of `family` and, for ITL, each value's request (None: one value per request)."""
        if family == "itl":
            return self.itl_ms, self.itl_owner
        return self.per_request(family), None


def measured_ok(records: list[RequestRecord]) -> list[RequestRecord]:
    """The records `summarize` computes latencies from: completed and not warm-up."""
    return [r for r in records if not r.warmup and r.status is Status.OK]


def request_samples(records: list[RequestRecord]) -> RequestSamples:
    """Per-request values (ms) of the completed measured requests in `records`."""
    ok = measured_ok(records)
    itl_ms, owner = _itl_with_owner(ok)
    counts = np.bincount(owner, minlength=len(ok))
    with np.errstate(invalid="ignore", divide="ignore"):
        itl_mean = np.bincount(owner, weights=itl_ms, minlength=len(ok)) / counts
    return RequestSamples(
        ttft_ms=_column([rq.ttft_ns(r) for r in ok], NS_PER_MS),
        tpot_ms=_column([rq.tpot_ns(r) for r in ok], NS_PER_MS),
        e2e_ms=_column([rq.e2e_ns(r) for r in ok], NS_PER_MS),
        itl_mean_ms=np.where(counts > 0, itl_mean, np.nan),
        input_tokens=_column([r.input_tokens for r in ok]),
        output_tokens=_column([r.output_tokens for r in ok]),
        itl_ms=itl_ms,
        itl_owner=owner,
    )


def _itl_with_owner(ok: list[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Pooled per-token ITL (ms) and each value's request position.

    `chunk_timing` pools the records in order, so the owners follow from how many
    values each record yields (`itl_count`); should that ever disagree with the
    pooled size, the values are recomputed record by record instead.
    """
    pooled = chunk_timing(ok).itl_ns / NS_PER_MS
    counts = np.fromiter((itl_count(r) for r in ok), dtype=np.int64, count=len(ok))
    if int(counts.sum()) == pooled.size:
        return pooled, np.repeat(np.arange(len(ok)), counts)
    per_record = [rq.itl_values_ns(r) / NS_PER_MS for r in ok]
    sizes = np.fromiter((v.size for v in per_record), dtype=np.int64, count=len(ok))
    values = np.concatenate(per_record) if per_record else np.empty(0)
    return values, np.repeat(np.arange(len(ok)), sizes)


def itl_count(r: RequestRecord) -> int:
    """How many ITL values a record yields (see `tokspeed.metrics.chunks`): the tokens of every
    token-bearing chunk after the first when chunk_tokens is known, else one per gap."""
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        kept = [k for k in r.chunk_tokens if k > 0]
        return sum(kept[1:])
    return max(len(r.chunk_ns) - 1, 0)


def _column(values: list[float | int | None], divisor: float = 1.0) -> np.ndarray:
    arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return arr / divisor if divisor != 1.0 else arr
