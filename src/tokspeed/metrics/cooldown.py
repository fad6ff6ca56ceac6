"""Cool-down trimming by share of the run (`--cooldown SHARE`, guidellm's `cooldown`): drop the tail.

The end of a run drains: no new requests start while the last ones finish, so the load and
its latencies fall. guidellm leaves that tail out with a cool-down given as a share of the run
(`TransientPhaseConfig.percent`, in (0, 1)), measured in time when the run is bounded by
duration, else in requests. tokspeed does the same after the run, from the records:

* the window starts at the first send of the measured requests that finished (completed or
  errored) and ends at the last end among them (the summary's window);
* `duration` mode (the point had a planned --duration D): the cut is `start + D − SHARE·D`
  — guidellm's cool-down `[end − SHARE·D, end]` with end = start + D;
* `requests` mode (no duration): of the N measured requests that finished, the last
  k = ⌊SHARE·N⌋ to finish are the cool-down; the cut is the end of the (N − k)-th to finish
  (k = 0: nothing is trimmed);
* the summary keeps the measured requests sent at or before the cut — guidellm's
  `get_within_range`: a request that started before the cool-down counts even if it ends in it.
  Its throughput runs over the kept requests' own window (first send → last end).

The detected steady state (`tokspeed.metrics.steady_state`) sits beside it: that one is found
from the data, this one is a fixed share the user chose. Only for a point with one measured
iteration (iterations restart the load, each with its own drain); else None.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np

from tokspeed.metrics.schema import Cooldown, Summary
from tokspeed.metrics.steady_state import SummaryOf
from tokspeed.records import RequestRecord, Status

NS_PER_S = 1_000_000_000


def cooldown_cut(
    sent_ns: np.ndarray, end_ns: np.ndarray, share: float, planned_duration_s: float | None = None
) -> tuple[Literal["duration", "requests"], int]:
    """(mode, cut in ns) for the finished measured requests' send and end times (module docstring)."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"a cool-down share is in [0, 1), got {share:g}")
    start = int(sent_ns.min())
    if planned_duration_s is not None:
        planned_ns = planned_duration_s * NS_PER_S
        return "duration", start + round(planned_ns - share * planned_ns)
    n = int(end_ns.size)
    k = int(np.floor(share * n + 1e-9))
    ends = np.sort(end_ns)
    return "requests", int(ends[-1] if k == 0 else ends[n - k - 1])


def cooldown(
    records: Iterable[RequestRecord], share: float, summary_of: SummaryOf, planned_duration_s: float | None = None
) -> Cooldown | None:
    """The point without its cool-down, and the summary over what is left (module docstring).

    Two passes over `records` (a list, or a re-iterable such as results.StoredRecords).
    """
    if iter(records) is records:
        raise TypeError("cooldown reads the records twice: pass a list or a re-iterable, not an iterator")
    iterations: set[int] = set()
    sent: list[int] = []
    ends: list[int] = []
    for r in records:
        if r.warmup:
            continue
        iterations.add(r.iteration)
        if r.status is not Status.INCOMPLETE and r.end_ns is not None:
            sent.append(r.sent_ns)
            ends.append(r.end_ns)
    if len(iterations) != 1 or not sent:
        return None
    sent_arr, end_arr = np.asarray(sent, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    mode, cut = cooldown_cut(sent_arr, end_arr, share, planned_duration_s)
    start, end = int(sent_arr.min()), int(end_arr.max())
    inside = summary_of(r for r in records if not r.warmup and r.sent_ns <= cut)
    measured = sum(1 for r in records if not r.warmup)
    return Cooldown(
        share=share,
        mode=mode,
        cut_s=(cut - start) / NS_PER_S,
        trimmed_s=max(0, end - cut) / NS_PER_S,
        full_window_s=(end - start) / NS_PER_S,
        requests=inside.requests.total,
        dropped=measured - inside.requests.total,
        summary=inside if inside.requests.total else None,
    )


def with_cooldown(
    summary: Summary, records: Iterable[RequestRecord], share: float | None, summary_of: SummaryOf,
    planned_duration_s: float | None = None,
) -> Summary:
    """`summary` with `cooldown` filled in (unchanged without a share, or when it does not apply)."""
    if not share:
        return summary
    found = cooldown(records, share, summary_of, planned_duration_s)
    return summary if found is None else summary.model_copy(update={"cooldown": found})
