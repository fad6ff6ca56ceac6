"""A BoundedSample fed one scalar at a time: values collect in a small Python list, flushed in batches.

`BoundedSample.add` takes numpy arrays; calling it once per record would cost a numpy call per
record. `BufferedSample.append` is a list append (tens of nanoseconds); every `FLUSH_AT` values
the list becomes one array added to the sample, so the pending list never holds more than
`FLUSH_AT` values. Values keep the order they were appended in, so while the sample is exact its
statistics are bit-for-bit `distribution.distribution` of the same values in the same order. None (not
applicable) is left out, as the distributions leave out NaN.
"""

from __future__ import annotations

import numpy as np

from tokspeed.stats.sketch import BoundedSample

FLUSH_AT = 4096  # values held in the pending list before they go to the sample (32 KiB as float64)


class BufferedSample:
    """One metric's values, appended one at a time; `read()` gives the BoundedSample holding all of them."""

    __slots__ = ("_pending", "_sample")

    def __init__(self) -> None:
        self._sample = BoundedSample()
        self._pending: list[float] = []

    def append(self, value: float | None) -> None:
        """Add one value (None is skipped, NaN is dropped by the sample)."""
        if value is None:
            return
        pending = self._pending
        pending.append(value)
        if len(pending) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Move the pending values into the sample."""
        if self._pending:
            self._sample.add(np.array(self._pending, dtype=np.float64))
            self._pending.clear()

    def read(self) -> BoundedSample:
        """The sample of every value appended so far (flushes first; appending may go on afterwards)."""
        self.flush()
        return self._sample

    @property
    def pending(self) -> int:
        """Values waiting in the list (never more than FLUSH_AT)."""
        return len(self._pending)


def sample_mean(sample: BoundedSample) -> float | None:
    """The mean of the sample's values: `np.mean` of them while exact (as the list code took it), else the estimate.

    `Distribution.mean` is clamped into [min, max], which can differ from `np.mean` in the last bit.
    """
    if not sample.count:
        return None
    if sample.exact:
        return float(np.mean(sample.values()))
    return sample.distribution().mean
