"""Per-request derived values: one RequestRecord in, one number (or None) out.

Every function returns None where the metric does not apply to the record —
never 0. Times are integer nanoseconds from the record's one monotonic clock;
differences are taken on Python ints, so they stay exact on the epoch scale too.

All generated tokens count alike (content and reasoning): TTFT is the first of
either, ITL, TPOT and decode speed run over all of them. Only `ttfa_ns` (time to
first answer) looks at content alone.
"""

from __future__ import annotations

import numpy as np

from tokspeed.metrics.chunks import chunk_timing
from tokspeed.records import RequestRecord, Status

NS_PER_S = 1_000_000_000


def ttft_ns(r: RequestRecord) -> int | None:
    """Time to first token (content or reasoning).

    Formula: first_token_ns − sent_ns; None when no token arrived.
    """
    return None if r.first_token_ns is None else r.first_token_ns - r.sent_ns


def ttfa_ns(r: RequestRecord) -> int | None:
    """Time to first answer: the first *content* token, after any reasoning.

    Formula: first_content_ns − sent_ns; None when no content token arrived.
    """
    return None if r.first_content_ns is None else r.first_content_ns - r.sent_ns


def e2e_ns(r: RequestRecord) -> int | None:
    """End-to-end latency of a completed request.

    Formula: end_ns − sent_ns, for status ok only (a failed request's end is its
    failure time, not a latency).
    """
    if r.status is not Status.OK or r.end_ns is None:
        return None
    return r.end_ns - r.sent_ns


def was_sent(r: RequestRecord) -> bool:
    """Whether the request reached the transport.

    Completed and errored requests were sent. An incomplete one was sent only if
    its sent_ns is not before its scheduled_ns: a request cancelled before it was
    sent keeps the record's default sent_ns (0, or the epoch offset once saved),
    which lies before any real schedule time.
    """
    return r.status is not Status.INCOMPLETE or r.sent_ns >= r.scheduled_ns


def lateness_ns(r: RequestRecord) -> int | None:
    """The client's own delay in starting the request.

    Formula: sent_ns − scheduled_ns; None for a request that was never sent.
    """
    return r.sent_ns - r.scheduled_ns if was_sent(r) else None


def ttft_from_scheduled_ns(r: RequestRecord) -> int | None:
    """Time to first token counted from when the request was due, not from when it was sent.

    Formula: first_token_ns − scheduled_ns (= lateness + TTFT); None when no token
    arrived. Corrects for coordinated omission: time a request spent waiting inside
    the client (for a --max-concurrency slot, behind a client that fell behind)
    counts, as the user who sent it at its scheduled time would feel it. Meaningful
    for open-loop runs only (a closed loop schedules a request when a worker picks it).
    """
    return None if r.first_token_ns is None else r.first_token_ns - r.scheduled_ns


def e2e_from_scheduled_ns(r: RequestRecord) -> int | None:
    """End-to-end latency counted from when the request was due (open loop).

    Formula: end_ns − scheduled_ns (= lateness + E2E), for status ok only.
    """
    if r.status is not Status.OK or r.end_ns is None:
        return None
    return r.end_ns - r.scheduled_ns


def tpot_ns(r: RequestRecord) -> float | None:
    """Time per output token after the first.

    Formula: (E2E − TTFT) / (output_tokens − 1); None unless the request completed
    with a known TTFT and output_tokens ≥ 2.
    """
    decode = _decode_ns(r)
    if decode is None or r.output_tokens is None or r.output_tokens < 2:
        return None
    return decode / (r.output_tokens - 1)


def ntpot_ns(r: RequestRecord) -> float | None:
    """Normalized time per output token (inference-perf's NTPOT): the whole latency per token.

    Formula: E2E / output_tokens; None unless the request completed with output_tokens ≥ 1.
    Unlike TPOT it counts the wait for the first token too, so it is what a user pays per token
    of the answer, queueing and prefill included (inference-perf's `normalized_time_per_output_token`,
    `(end − start) / output_tokens`; it records 0 for a request without output tokens, tokspeed None).
    """
    e2e = e2e_ns(r)
    if e2e is None or r.output_tokens is None or r.output_tokens < 1:
        return None
    return e2e / r.output_tokens


def decode_tokens_per_s(r: RequestRecord) -> float | None:
    """Per-user decode speed: the tokens per second a user sees once output starts.

    Formula: (output_tokens − 1) / ((E2E − TTFT) / 10^9) = 1 / TPOT: the tokens that
    arrive after the first, over the time they take (the first token arrives at TTFT,
    so it is not part of E2E − TTFT); None unless the request completed with
    output_tokens ≥ 2 and E2E > TTFT (a one-token answer has no decode phase to time).
    """
    decode = _decode_ns(r)
    if decode is None or decode <= 0 or r.output_tokens is None or r.output_tokens < 2:
        return None
    return (r.output_tokens - 1) * NS_PER_S / decode


def chunk_gaps_ns(r: RequestRecord) -> np.ndarray:
    """Raw gaps between consecutive token-bearing chunks, whatever they carried.

    Formula: chunk_ns[i] − chunk_ns[i−1] for i ≥ 1 (int64); empty below 2 chunks.
    """
    return np.diff(np.asarray(r.chunk_ns, dtype=np.int64))


def itl_values_ns(r: RequestRecord) -> np.ndarray:
    """Per-token inter-token latencies of one request (float64 ns).

    Formula, with g_i = chunk_ns[i] − chunk_ns[i−1] for i ≥ 1:

    * chunk_tokens known: chunk i carries k_i tokens, so g_i / k_i repeated k_i
      times (chunks carrying 0 tokens are skipped, their time goes to the next);
    * chunk_tokens unknown (or of the wrong length): k = output_tokens / C over
      the C chunks (output_tokens unknown: k = 1), and each gap gives one value
      g_i / k — with equal weights this has the same mean and percentiles as
      repeating it k times.

    Empty below 2 chunks. See `tokspeed.metrics.chunks` for the pooled form.
    """
    return chunk_timing([r]).itl_ns


def max_itl_ns(r: RequestRecord) -> float | None:
    """The request's worst per-token ITL (what a per-request `itl_ms` SLO judges).

    Formula: max(itl_values_ns(r)); None below 2 chunks.
    """
    values = itl_values_ns(r)
    return float(values.max()) if values.size else None


def _decode_ns(r: RequestRecord) -> int | None:
    """E2E − TTFT (= end_ns − first_token_ns) for a completed request, else None."""
    e2e, ttft = e2e_ns(r), ttft_ns(r)
    if e2e is None or ttft is None:
        return None
    return e2e - ttft
