"""Reduce a sampled quantity to `SeriesStats`, and counters to deltas.

Formulas (x = the samples in the window that are not None, n = their count):

* mean = Σx / n; min, max as usual
* p99 = numpy's default percentile (linear interpolation between closest ranks)
* all None when n = 0; `samples` = n
* a counter's delta = last − first; None with fewer than 2 readings, or when it went
  down (the source restarted and its counter began again)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tokspeed.telemetry.schema import SeriesStats


def series_stats(values: Iterable[float | None]) -> SeriesStats:
    """mean, max, min and p99 of the values that are present."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return SeriesStats()
    x = np.asarray(present, dtype=np.float64)
    return SeriesStats(
        mean=float(x.mean()),
        max=float(x.max()),
        min=float(x.min()),
        p99=float(np.percentile(x, 99.0)),
        samples=len(present),
    )


def counter_delta(readings: Sequence[float | None]) -> float | None:
    """How much a monotonic counter rose between its first and last reading in the window."""
    present = [float(v) for v in readings if v is not None]
    if len(present) < 2:
        return None
    delta = present[-1] - present[0]
    return delta if delta >= 0 else None
