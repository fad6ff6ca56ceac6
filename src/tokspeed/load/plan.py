"""Load profiles: when each request should start.

Closed loop (`synchronous`, `concurrency N`): N workers, each sends its next
request as soon as its previous one finishes. Open loop (`rate R`): arrival
times are precomputed from the seed before the run and never delayed by slow
responses (an optional `max_concurrency` cap makes requests wait for a free
slot; that wait shows up as lateness, not as a shifted schedule).

Arrivals (open loop), first request at t = 0:
* constant: gap = 1/R.
* poisson: exponential gaps with mean 1/R.
* gamma: gamma gaps with shape B (`burstiness`) and scale 1/(R·B); B = 1 is
  Poisson, B < 1 burstier, B > 1 more regular.

By default (`exact_rate`) the drawn gaps are rescaled so that n arrivals take
exactly n/R seconds, the last at (n − 1)/R as with constant arrivals (what vLLM's
and evalscope's clients do): a schedule offers the rate it is labelled with.
With only a duration, n = round(R × duration) arrivals are drawn and rescaled the
same way. A request count and a duration together: the count is drawn (and
rescaled), then cut at the duration. Raw draws (`--raw-arrivals`) are used as
drawn: over n arrivals the realised offered rate, (n − 1) / (last − first
arrival), is then off the target by about R/√n (±5% over 400 Poisson arrivals;
seed 0 offers 0.84× at n = 100). Either way the run reports the offered and sent
rates beside the target (`summary.schedule`).

R = inf (`--rate inf`, vLLM's meaning) sends every request at t = 0; it needs a
request count, and `max_concurrency` caps how many are in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tokspeed.load.timeline import Timeline

NS = 1_000_000_000
_MAX_OPEN_LOOP_ARRIVALS = 10_000_000


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """A load profile. `workers` is the closed-loop width or the open-loop in-flight cap."""

    kind: str  # "synchronous" | "concurrency" | "rate"
    workers: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    exact_rate: bool = True
    timeline: Timeline | None = field(default=None, compare=False)  # a trace, stages or classes: its arrivals

    @property
    def open_loop(self) -> bool:
        return self.kind == "rate"

    def describe(self) -> dict[str, Any]:
        """The profile as saved in run.json."""
        if self.timeline is not None:
            return self.timeline.describe()
        if self.kind == "synchronous":
            return {"kind": "synchronous", "concurrency": 1}
        if self.kind == "concurrency":
            return {"kind": "concurrency", "concurrency": self.workers}
        if self.rate is not None and math.isinf(self.rate):  # JSON has no infinity: say it in words
            return {"kind": "rate", "rate": None, "all_at_once": True, "max_concurrency": self.workers}
        profile: dict[str, Any] = {
            "kind": "rate",
            "rate": self.rate,
            "arrival": self.arrival,
            "burstiness": self.burstiness if self.arrival == "gamma" else None,
            "max_concurrency": self.workers,
        }
        if self.arrival != "constant":  # constant gaps are exact either way
            profile["exact_rate"] = self.exact_rate
        return profile

    def label(self) -> str:
        if self.timeline is not None:
            return self.timeline.label_text()
        if self.kind == "synchronous":
            return "synchronous"
        if self.kind == "concurrency":
            return f"concurrency {self.workers}"
        cap = f", max {self.workers} in flight" if self.workers else ""
        if self.rate is not None and math.isinf(self.rate):
            return f"all at once{cap}"
        raw = ", raw draws" if not self.exact_rate and self.arrival != "constant" else ""
        return f"rate {self.rate:g}/s {self.arrival}{raw}{cap}"

    def arrivals_ns(self, n: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        """Open-loop start offsets in ns from the phase start (int64, non-decreasing)."""
        if not self.open_loop or self.rate is None:
            raise ValueError("arrivals exist only for the rate profile")
        if self.timeline is not None:
            return self.timeline.offsets(n, duration_s)
        return arrival_offsets_ns(
            self.rate, self.arrival, self.burstiness, n, duration_s, seed, exact_rate=self.exact_rate
        )


def arrival_offsets_ns(
    rate: float,
    arrival: str,
    burstiness: float,
    n: int | None,
    duration_s: float | None,
    seed: int,
    exact_rate: bool = True,
) -> np.ndarray:
    """See the module docstring for the rules."""
    if n is None and duration_s is None:
        raise ValueError("an open-loop schedule needs a request count or a duration")
    if math.isinf(rate):
        if n is None:
            raise ValueError("--rate inf sends a request count at once: it needs --requests")
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if n is None and exact_rate:
        assert duration_s is not None
        n = max(1, round(rate * duration_s))
    if n is not None:
        gaps = _gaps(rng, rate, arrival, burstiness, max(n - 1, 0))
        if exact_rate:
            gaps = rescaled(gaps, rate)
        offsets = np.concatenate(([0.0], np.cumsum(gaps)))
        if duration_s is not None:
            offsets = offsets[offsets < duration_s]
    else:
        assert duration_s is not None
        offsets = _until(rng, rate, arrival, burstiness, duration_s)
    return np.round(offsets * NS).astype(np.int64)


def rescaled(gaps: np.ndarray, rate: float) -> np.ndarray:
    """Gaps scaled so that their mean is exactly 1/rate (n arrivals then take n/rate seconds).

    Formula: gaps × (len(gaps) / rate) / Σ gaps; unchanged when empty or all zero.
    """
    total = float(gaps.sum())
    if not len(gaps) or total <= 0:
        return gaps
    return gaps * ((len(gaps) / rate) / total)


def _until(rng: np.random.Generator, rate: float, arrival: str, burstiness: float, duration_s: float) -> np.ndarray:
    expected = int(rate * duration_s * 1.5) + 16
    chunks: list[np.ndarray] = [np.zeros(1)]
    last = 0.0
    while last < duration_s:
        gaps = _gaps(rng, rate, arrival, burstiness, expected)
        part = last + np.cumsum(gaps)
        chunks.append(part)
        last = float(part[-1])
        if sum(len(c) for c in chunks) > _MAX_OPEN_LOOP_ARRIVALS:
            break
    offsets = np.concatenate(chunks)
    return offsets[offsets < duration_s]


def _gaps(rng: np.random.Generator, rate: float, arrival: str, burstiness: float, count: int) -> np.ndarray:
    if arrival == "constant":
        return np.full(count, 1.0 / rate)
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, count)
    if arrival == "gamma":
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), count)
    raise ValueError(f"unknown arrival process {arrival!r}")
