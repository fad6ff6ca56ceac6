"""A load point over time, in 1 s bins (finer for runs under 20 s): output tokens per second, requests in flight, errors.

Pure: records in, arrays out. Time 0 is the first measured request's send.

* output tokens/s in bin [t, t+1): tokens of the completed requests' chunks that
  arrived in the bin (a chunk's tokens are `chunk_tokens[i]` when known, else
  output_tokens / chunks spread evenly; a response without chunks counts at its end);
* in flight: the time-average number of sent requests not yet finished in the bin,
  ∫ in_flight(t) dt / bin width (an unfinished request counts until the last event);
* errors: errored requests whose failure falls in the bin;
* server running / waiting (`server_over_time`, when the server's /metrics were scraped): the mean of
  the telemetry samples of the server's running and waiting requests taken in the bin (NaN: none).
  Telemetry `t_ns` and the records read from requests.jsonl are both Unix-epoch ns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from tokspeed.metrics.request import was_sent
from tokspeed.records import RequestRecord, Status

NS_PER_S = 1_000_000_000
MIN_BINS = 20
BIN_CHOICES_S = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per-bin series; `start_s` holds each bin's start, seconds since the first send."""

    start_s: np.ndarray
    output_tokens_per_s: np.ndarray
    in_flight: np.ndarray
    errors: np.ndarray
    bin_s: float


def timeline(records: Sequence[RequestRecord], bin_s: float | None = None) -> Timeline | None:
    """The series of the measured records; None when nothing measured was sent.

    `bin_s` defaults to 1 s, or for runs shorter than MIN_BINS seconds the largest of
    0.5, 0.2, 0.1, … s that still gives MIN_BINS bins, so short runs have a shape too.
    """
    sent = [r for r in records if not r.warmup and was_sent(r)]
    if not sent:
        return None
    t0 = min(r.sent_ns for r in sent)
    last = max(max(r.end_ns or r.sent_ns, r.chunk_ns[-1] if r.chunk_ns else 0) for r in sent)
    bin_s = bin_s or bin_width_s((last - t0) / NS_PER_S)
    width = int(bin_s * NS_PER_S)
    bins = max(1, -(-(last - t0) // width))
    edges = t0 + np.arange(bins + 1, dtype=np.int64) * width
    tokens = _token_arrivals(sent, edges)
    failed = np.array([r.end_ns for r in sent if r.status is Status.ERROR and r.end_ns is not None], dtype=np.int64)
    return Timeline(
        start_s=np.arange(bins) * bin_s,
        output_tokens_per_s=tokens / bin_s,
        in_flight=_mean_in_flight(sent, edges, last),
        errors=np.histogram(failed, bins=edges)[0] if failed.size else np.zeros(bins, dtype=np.int64),
        bin_s=bin_s,
    )


@dataclass(frozen=True, slots=True)
class LatencyOverTime:
    """Per-bin latency percentiles (NaN: nothing in the bin) and errors per kind, on a Timeline's bins.

    TTFT of a completed request counts in the bin of its send; ITL values in the bin their chunk
    arrived in (a chunk's gap belongs to the time it ended); an error in the bin it failed in,
    under its `error_key` (`http_503`, `timeout`, ...).
    """

    ttft_p50_ms: np.ndarray
    ttft_p99_ms: np.ndarray
    itl_p50_ms: np.ndarray
    itl_p99_ms: np.ndarray
    errors_by_kind: dict[str, np.ndarray]


def latency_over_time(records: Sequence[RequestRecord], tl: Timeline) -> LatencyOverTime:
    """The latency percentiles and error kinds of the measured records per bin of `tl` (same origin)."""
    from tokspeed.metrics.chunks import chunk_timing
    from tokspeed.metrics.summary import error_key

    sent = [r for r in records if not r.warmup and was_sent(r)]
    bins = tl.start_s.size
    width = int(round(tl.bin_s * NS_PER_S))
    t0 = min(r.sent_ns for r in sent) if sent else 0

    def index(t: np.ndarray) -> np.ndarray:
        return np.clip((t - t0) // width, 0, bins - 1)

    ok = [r for r in sent if r.status is Status.OK and r.first_token_ns is not None]
    ttft_bin = index(np.array([r.sent_ns for r in ok], dtype=np.int64))
    ttft = np.array([(r.first_token_ns or 0) - r.sent_ns for r in ok], dtype=np.float64) / 1e6
    itl_values, itl_times = [], []
    for r in ok:
        values = chunk_timing([r]).itl_ns
        if values.size:
            ends = _itl_times(r, values.size)
            itl_values.append(values / 1e6)
            itl_times.append(ends)
    itl = np.concatenate(itl_values) if itl_values else np.zeros(0)
    itl_bin = index(np.concatenate(itl_times)) if itl_times else np.zeros(0, dtype=np.int64)
    errors: dict[str, np.ndarray] = {}
    for r in sent:
        if r.status is Status.ERROR and r.end_ns is not None:
            counts = errors.setdefault(error_key(r), np.zeros(bins, dtype=np.int64))
            counts[int(index(np.array([r.end_ns]))[0])] += 1
    return LatencyOverTime(*_binned(ttft, ttft_bin, bins), *_binned(itl, itl_bin, bins), dict(sorted(errors.items())))


def _itl_times(r: RequestRecord, n: int) -> np.ndarray:
    """When each of a request's n ITL values arrived: the end of its gap (values of one chunk share it)."""
    chunks = np.asarray(r.chunk_ns, dtype=np.int64)
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        tokens = np.asarray(r.chunk_tokens, dtype=np.int64)
        kept = chunks[tokens > 0]
        reps = tokens[tokens > 0][1:]
        if reps.sum() == n:
            return np.repeat(kept[1:], reps)
    ends = chunks[1:]
    return ends[:n] if ends.size >= n else np.resize(ends, n)


def _binned(values: np.ndarray, which: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(p50, p99) of the values falling in each bin; NaN for an empty bin."""
    p50, p99 = np.full(bins, np.nan), np.full(bins, np.nan)
    if values.size:
        order = np.argsort(which, kind="stable")
        which, values = which[order], values[order]
        cuts = np.searchsorted(which, np.arange(bins + 1))
        for b in range(bins):
            part = values[cuts[b]:cuts[b + 1]]
            if part.size:
                p50[b], p99[b] = np.percentile(part, [50, 99])
    return p50, p99


def bin_width_s(span_s: float) -> float:
    """1 s, unless the run is too short for MIN_BINS of them."""
    for width in BIN_CHOICES_S:
        if span_s >= MIN_BINS * width:
            return width
    return BIN_CHOICES_S[-1]


def _token_arrivals(sent: Sequence[RequestRecord], edges: np.ndarray) -> np.ndarray:
    ok = [r for r in sent if r.status is Status.OK]
    times = np.fromiter(chain.from_iterable(_times(r) for r in ok), dtype=np.int64)
    weights = np.fromiter(chain.from_iterable(_weights(r) for r in ok), dtype=np.float64)
    if times.size == 0:
        return np.zeros(edges.size - 1)
    return np.histogram(times, bins=edges, weights=weights)[0]


def _times(r: RequestRecord) -> list[int]:
    if r.chunk_ns:
        return r.chunk_ns
    return [r.end_ns] if r.end_ns is not None else []


def _weights(r: RequestRecord) -> list[float]:
    if not r.chunk_ns:
        return [float(r.output_tokens or 0)] if r.end_ns is not None else []
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        return [float(max(k, 0)) for k in r.chunk_tokens]
    share = (r.output_tokens if r.output_tokens is not None else len(r.chunk_ns)) / len(r.chunk_ns)
    return [share] * len(r.chunk_ns)


def _mean_in_flight(sent: Sequence[RequestRecord], edges: np.ndarray, last: int) -> np.ndarray:
    """Average of the in-flight count over each bin, from +1/−1 events and their running integral."""
    starts = np.array([r.sent_ns for r in sent], dtype=np.int64)
    ends = np.array([r.end_ns if r.end_ns is not None else last for r in sent], dtype=np.int64)
    times = np.concatenate((starts, ends))
    steps = np.concatenate((np.ones(starts.size), -np.ones(ends.size)))
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])  # level holds from times[i] to times[i+1]
    area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(times).astype(np.float64))))

    def integral(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(times, t, side="right") - 1
        inside = i >= 0
        out = np.zeros(t.size)
        j = i[inside]
        out[inside] = area[j] + level[j] * (t[inside] - times[j]).astype(np.float64)
        return out

    return np.diff(integral(edges)) / np.diff(edges).astype(np.float64)


@dataclass(frozen=True, slots=True)
class ServerOverTime:
    """The server's own running and waiting requests per bin of a Timeline (NaN: no sample in the bin)."""

    running: np.ndarray
    waiting: np.ndarray


def server_over_time(records: Sequence[RequestRecord], tl: Timeline, lines: Iterable[dict[str, Any]]) -> ServerOverTime | None:
    """The mean of the server samples (telemetry.jsonl `kind: server`, `ok`) in each bin of `tl`; None without any."""
    sent = [r for r in records if not r.warmup and was_sent(r)]
    samples = [
        (int(line["t_ns"]), line.get("running"), line.get("waiting"))
        for line in lines
        if line.get("kind") == "server" and line.get("ok") and isinstance(line.get("t_ns"), int)
    ]
    if not sent or not samples:
        return None
    t0 = min(r.sent_ns for r in sent)
    bins, width = tl.start_s.size, int(round(tl.bin_s * NS_PER_S))
    which = np.array([(t - t0) // width for t, _, _ in samples], dtype=np.int64)
    inside = (which >= 0) & (which < bins)
    if not inside.any():
        return None
    return ServerOverTime(*(_bin_means(which, [s[k] for s in samples], inside, bins) for k in (1, 2)))


def _bin_means(which: np.ndarray, values: list[Any], inside: np.ndarray, bins: int) -> np.ndarray:
    """Per bin, the mean of the numeric values whose sample falls in it (NaN for none)."""
    v = np.array([float(x) if isinstance(x, (int, float)) else np.nan for x in values])
    keep = inside & np.isfinite(v)
    sums = np.bincount(which[keep], weights=v[keep], minlength=bins)
    counts = np.bincount(which[keep], minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
