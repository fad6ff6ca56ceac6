"""The open-loop schedule as drawn and as sent: realised rates and how even the arrivals were.

Computed over the measured (non-warm-up) records of an open-loop load point.
Each iteration restarts its schedule, so gaps are taken between consecutive
requests of one iteration and pooled:

* offered_requests_per_s = number of gaps / Σ gaps between consecutive
  scheduled_ns (= 1 / mean gap; (n − 1) / (last − first) for one iteration),
  over every measured record (sent or not: the schedule is what was offered)
* sent_requests_per_s = the same over the sent_ns of the requests that were sent
* scheduled_gap_cv, sent_gap_cv = sample stdev / mean of those gaps
  (0 for perfectly even arrivals, about 1 for Poisson)

A rate or CV is None without a gap (fewer than two times in every iteration)
or when the gaps sum to zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tokspeed.metrics.schema import Schedule

NS_PER_S = 1_000_000_000


def schedule_of(target_rate: float, scheduled: Iterable[Sequence[int]], sent: Iterable[Sequence[int]]) -> Schedule:
    """The Schedule from the scheduled and the sent times (ns), one group per iteration."""
    offered_rate, offered_cv = gap_stats(scheduled)
    sent_rate, sent_cv = gap_stats(sent)
    return Schedule(
        target_requests_per_s=target_rate,
        offered_requests_per_s=offered_rate,
        sent_requests_per_s=sent_rate,
        scheduled_gap_cv=offered_cv,
        sent_gap_cv=sent_cv,
    )


def gap_stats(groups: Iterable[Sequence[int]]) -> tuple[float | None, float | None]:
    """(rate per second, CV) of the gaps between consecutive times (ns) within each group, pooled.

    Formula: rate = count of gaps / Σ gaps × 10^9; CV = stdev(gaps, ddof=1) / mean(gaps)
    (0.0 for a single gap). Each group is sorted first.
    """
    parts = [np.diff(np.sort(np.asarray(g, dtype=np.int64))) for g in groups if len(g) > 1]
    if not parts:
        return None, None
    gaps = np.concatenate(parts).astype(np.float64)
    total = float(gaps.sum())
    if total <= 0:
        return None, None
    mean = total / gaps.size
    stdev = float(gaps.std(ddof=1)) if gaps.size > 1 else 0.0
    return gaps.size * NS_PER_S / total, stdev / mean
