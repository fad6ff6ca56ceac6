"""The median of a BoundedSample as `statistics.median` gives it, while the sample is exact.

`Distribution.p50` is `np.percentile`'s linear interpolation, `b − (b − a)·0.5` between the two
middle values, which can differ in the last bit from `statistics.median`'s `(a + b) / 2` that the
list-based cold-start rules and figures used. While the sample keeps every value the median is
taken exactly that way; beyond its exact limit it is the sample's p50 (relative accuracy
`sketch.RELATIVE_ACCURACY`).
"""

from __future__ import annotations

import statistics

from tokspeed.stats.sketch import BoundedSample


def sample_median(sample: BoundedSample) -> float | None:
    """The median of the sample's values (None when empty); see the module docstring."""
    if not sample.count:
        return None
    if sample.exact:
        return float(statistics.median(sample.values().tolist()))
    return sample.distribution().p50
