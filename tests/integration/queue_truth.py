"""The steady-state capacity of a K-slot FIFO server, computed independently of tokspeed.

A few tens of thousands of arrivals (Poisson or constant) go through K slots whose service
times are drawn from the service times the simulator really took in the test's own run (its
log: end − start of service), the first 10% dropped; bisection finds the highest rate at which
the chosen percentile of (wait + time to first token, or wait + whole service) meets the limit.
That rate, and K / mean service (the most any arrival process can be served), are what a
capacity search against the same server must find.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

ARRIVALS = 40_000


@dataclass(frozen=True)
class Service:
    """What the server took per request, in seconds: to its first token and in all, measured from its log."""

    first_token_s: np.ndarray
    total_s: np.ndarray

    @classmethod
    def of(cls, entries: dict[str, dict[str, Any]]) -> Service:
        """Each request's service, plus the slot's hand-over: a queued request starts a little after the
        end that freed its slot (the server's own scheduling delay), time the slot serves nobody."""
        done = [e for e in entries.values() if e.get("start_ns") and e.get("end_ns") and e.get("first_token_ns")]
        first = np.array([(e["first_token_ns"] - e["start_ns"]) / 1e9 for e in done])
        total = np.array([(e["end_ns"] - e["start_ns"]) / 1e9 for e in done])
        return cls(first, total + handover_s(done))

    def max_rate(self, slots: int) -> float:
        return slots / float(np.mean(self.total_s))


def handover_s(done: list[dict[str, Any]]) -> float:
    """Median delay from the end that freed a slot to the start of the queued request that took it (its tail,
    the server's event loop stalling on a loaded machine, costs throughput as much as service does)."""
    ends = np.sort(np.array([e["end_ns"] for e in done], dtype=np.int64))
    queued = [e["start_ns"] for e in done if e["start_ns"] - e["received_ns"] > 500_000]
    gaps = []
    for start in queued:
        i = int(np.searchsorted(ends, start, "right")) - 1
        if i >= 0:
            gaps.append(start - int(ends[i]))
    return float(np.median(gaps)) / 1e9 if gaps else 0.0


def latencies(rate: float, slots: int, service: Service, arrival: str, metric: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, ARRIVALS) if arrival == "poisson" else np.full(ARRIVALS, 1 / rate)
    pick = rng.integers(0, len(service.total_s), ARRIVALS)
    total, first = service.total_s[pick], service.first_token_s[pick]
    free = [0.0] * slots
    out = np.empty(ARRIVALS)
    for i, t in enumerate(np.cumsum(gaps).tolist()):
        start = max(t, heapq.heappop(free))
        heapq.heappush(free, start + float(total[i]))
        out[i] = start - t + float(first[i] if metric == "ttft" else total[i])
    return out[ARRIVALS // 10:]


def capacity(slots: int, service: Service, arrival: str, metric: str, percentile: float, limit_s: float) -> float:
    """The highest rate (req/s) whose steady-state `percentile` of `metric` is within `limit_s`."""
    lo, hi = 0.05 * service.max_rate(slots), service.max_rate(slots)
    for _ in range(18):
        mid = (lo + hi) / 2
        if np.percentile(latencies(mid, slots, service, arrival, metric), percentile) <= limit_s:
            lo = mid
        else:
            hi = mid
    return lo
