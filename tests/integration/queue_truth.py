"""The steady-state capacity of a K-slot FIFO server, computed independently of tokspeed.

A hundred thousand arrivals (Poisson or constant) go through K slots; bisection finds the
highest rate at which the chosen percentile of the latency (wait + time to first token, or
wait + whole service) meets the limit; the first 10% are dropped. What the arrivals meet is
what this run's server and machine did, from the simulator's log (and the client's legs):

* service: each request's end − start of service, replayed in the order the server started
  them (from a seeded offset, wrapping round). In order, not drawn one by one: a stall of a
  loaded machine stretches every request in service at once, and the replay keeps those long
  services together, as the queue met them.
* hand-over: a request that waits for a slot starts a little after the end that freed it (the
  server's event loop waking it), the median such gap of the requests that really found every
  slot busy; only a waiting request pays it.
* legs (when the client's records are given): what the client saw beyond the server's queue and
  service — the trip in (sent → the server's arrival stamp, plus parsing before the gate for a
  request that did not queue) and back (the server's write → the client's read), per request,
  in the same order (warm-up requests, whose trips hold their connections' opening, and requests
  the client has no record of get the median). The queue is modelled; the legs are measured.
* which requests: on a shared machine the server's speed moves with the load it carries (a probe
  at twice the capacity starves the simulator's event loop), so `truth` takes the requests of the
  probes within ±`BAND` of a first answer computed from the probes that kept up.

`Service.max_rate` is K / mean service: the most any arrival process can be served.
`steadiness` says whether there is one answer to find: the capacity computed on the first and on
the second half of those requests; a machine whose load changed in between (another test starting
beside this one) gives two.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

ARRIVALS = 100_000
BAND = 0.15  # probes within ±15% of the first answer make the second
MIN_NEAR = 500  # requests needed near the answer for the second pass


@dataclass(frozen=True)
class Service:
    """What each request took, in seconds, in the order the server started them."""

    first_token_s: np.ndarray
    total_s: np.ndarray
    handover_s: float = 0.0
    legs_first_s: np.ndarray | None = None
    legs_total_s: np.ndarray | None = None

    def halves(self) -> tuple[Service, Service]:
        """The first and the second half of the requests (in start order): a machine whose load changed
        during the run served them differently."""
        n = len(self.total_s) // 2
        def part(sl: slice) -> Service:
            legs = (self.legs_first_s[sl] if self.legs_first_s is not None else None,
                    self.legs_total_s[sl] if self.legs_total_s is not None else None)
            return Service(self.first_token_s[sl], self.total_s[sl], self.handover_s, *legs)
        return part(slice(0, n)), part(slice(n, None))

    @classmethod
    def of(cls, entries: dict[str, dict[str, Any]], records: list[dict[str, Any]] | None = None,
           benchmarks: set[int] | None = None, slots: int | None = None) -> Service:
        """From the simulator's log; `records` (requests.jsonl) add the client's legs; `benchmarks` keeps only
        the requests of those load points; `slots` lets the hand-over be measured on requests that found
        every slot busy (else: on requests that started 0.5 ms or more after they arrived)."""
        done = [e for e in entries.values() if e.get("start_ns") and e.get("end_ns") and e.get("first_token_ns")]
        by_id = {r["response_id"]: r for r in records or () if r.get("response_id") and r.get("status") == "ok"}
        if benchmarks is not None:
            done = [e for e in done if e["id"] in by_id and by_id[e["id"]]["benchmark"] in benchmarks]
        done.sort(key=lambda e: e["start_ns"])
        first = np.array([(e["first_token_ns"] - e["start_ns"]) / 1e9 for e in done])
        total = np.array([(e["end_ns"] - e["start_ns"]) / 1e9 for e in done])
        queued = _queued(done, slots)
        legs = _legs(done, by_id, queued) if records is not None else (None, None)
        return cls(first, total, handover_s(done, queued), *legs)

    def max_rate(self, slots: int) -> float:
        return slots / (float(np.mean(self.total_s)) + self.handover_s)


def _queued(done: list[dict[str, Any]], slots: int | None) -> np.ndarray:
    """Which requests found `slots` others in the server (in service or waiting) when they arrived (by the log)."""
    if slots is None:
        return np.array([e["start_ns"] - e["received_ns"] > 500_000 for e in done], dtype=bool)
    received = np.sort(np.array([e["received_ns"] for e in done], dtype=np.int64))
    ends = np.sort(np.array([e["end_ns"] for e in done], dtype=np.int64))
    arrived = np.array([e["received_ns"] for e in done], dtype=np.int64)
    ahead = np.searchsorted(received, arrived, "left") - np.searchsorted(ends, arrived, "right")  # in service or waiting
    return ahead >= slots


def handover_s(done: list[dict[str, Any]], queued: np.ndarray) -> float:
    """Median delay from the end that freed a slot to the start of the waiting request that took it."""
    ends = np.sort(np.array([e["end_ns"] for e in done], dtype=np.int64))
    gaps = []
    for e, waited in zip(done, queued):
        i = int(np.searchsorted(ends, e["start_ns"], "right")) - 1
        if waited and i >= 0 and ends[i] >= e["received_ns"]:
            gaps.append(e["start_ns"] - int(ends[i]))
    return float(np.median(gaps)) / 1e9 if gaps else 0.0


def _legs(done: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], queued: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request (in `done`'s order): client latency − (the server's time from its arrival stamp), plus the
    time before the gate of a request that did not queue (a queued one gets the median of those)."""
    before_gate = np.array([(e["start_ns"] - e["received_ns"]) / 1e9 for e in done])
    typical = float(np.median(before_gate[~queued])) if (~queued).any() else 0.0
    first, total = np.full(len(done), np.nan), np.full(len(done), np.nan)
    for i, e in enumerate(done):
        r = by_id.get(e["id"])
        pre = typical if queued[i] else before_gate[i]
        if r is None or r.get("warmup") or not r.get("first_token_ns") or not r.get("end_ns"):
            continue  # a warm-up request's trip holds its connection's opening (a probe's first second)
        off = e["epoch_offset_ns"]  # the log's clock → the client's wall-clock stamps
        trip_in = (e["received_ns"] + off - r["sent_ns"]) / 1e9
        first[i] = trip_in + pre + (r["first_token_ns"] - e["first_token_ns"] - off) / 1e9
        total[i] = trip_in + pre + (r["end_ns"] - e["end_ns"] - off) / 1e9
    for legs in (first, total):  # the requests without a measured trip: the median trip
        legs[np.isnan(legs)] = float(np.nanmedian(legs)) if (~np.isnan(legs)).any() else typical
    return first, total


def latencies(rate: float, slots: int, service: Service, arrival: str, metric: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, ARRIVALS) if arrival == "poisson" else np.full(ARRIVALS, 1 / rate)
    pick = (int(rng.integers(0, len(service.total_s))) + np.arange(ARRIVALS)) % len(service.total_s)
    total, first = service.total_s[pick], service.first_token_s[pick]
    legs = service.legs_first_s if metric == "ttft" else service.legs_total_s
    extra = legs[pick] if legs is not None else np.zeros(ARRIVALS)
    served = first if metric == "ttft" else total
    free = [0.0] * slots
    out = np.empty(ARRIVALS)
    for i, t in enumerate(np.cumsum(gaps).tolist()):
        slot = heapq.heappop(free)
        start = t if slot <= t else slot + service.handover_s
        heapq.heappush(free, start + float(total[i]))
        out[i] = start - t + float(served[i]) + float(extra[i])
    return out[ARRIVALS // 10:]


def capacity(slots: int, service: Service, arrival: str, metric: str, percentile: float, limit_s: float) -> float:
    """The highest rate (req/s) whose steady-state `percentile` of `metric` is within `limit_s`."""
    lo, hi = 0.02 * service.max_rate(slots), service.max_rate(slots)
    for _ in range(18):
        mid = (lo + hi) / 2
        if np.percentile(latencies(mid, slots, service, arrival, metric), percentile) <= limit_s:
            lo = mid
        else:
            hi = mid
    return lo


def truth(slots: int, entries: dict[str, dict[str, Any]], records: list[dict[str, Any]], result: dict[str, Any],
          arrival: str, metric: str, percentile: float, limit_s: float) -> tuple[float, Service]:
    """The capacity for this run's machine, and the service it was computed from (see the module docstring).

    First pass: the requests of every probe that kept up (its server completed ≥ 95% of what arrived in its
    steady window). Second: the requests of the probes within ±BAND of that answer, when there are MIN_NEAR.
    """
    probes = (result.get("capacity") or {}).get("probes") or []
    kept = {p["benchmark"] for p in probes if p.get("sustained_requests_per_s") and p.get("offered_requests_per_s")
            and p["sustained_requests_per_s"] >= 0.95 * p["offered_requests_per_s"]}
    service = Service.of(entries, records, kept or None, slots)
    first = capacity(slots, service, arrival, metric, percentile, limit_s)
    near = {p["benchmark"] for p in probes if abs(p["value"] / first - 1) <= BAND}
    near_service = Service.of(entries, records, near, slots) if near else None
    if near_service is None or len(near_service.total_s) < MIN_NEAR:
        return first, service
    return capacity(slots, near_service, arrival, metric, percentile, limit_s), near_service


def steadiness(slots: int, service: Service, arrival: str, metric: str, percentile: float,
               limit_s: float) -> tuple[float, float]:
    """The capacity on the first and on the second half of `service`'s requests."""
    first, second = service.halves()
    return (capacity(slots, first, arrival, metric, percentile, limit_s),
            capacity(slots, second, arrival, metric, percentile, limit_s))
