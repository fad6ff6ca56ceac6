"""Capacity search: the highest offered request rate at which every SLO still holds.

The seed article's QPS is "requests per second within a latency constraint".
The search is a generator: it yields the next rate to probe and is sent the
outcome (`Outcome`: did every SLO hold, what the probe offered and what the
server sustained at steady state). It

1. brackets: starting at `start`, doubles while probes pass (halves while they
   fail), never above `max_value` (a probe there that passes ends the search:
   the SLOs held up to the highest rate probed) nor below `floor`;
2. bisects the bracket [highest pass, lowest fail] until its width is within
   `precision` of the lower end;
3. confirms both ends: re-measures the best passing rate (if it fails, that rate
   becomes the new upper bound and bisection resumes — noise cannot fake a pass),
   then the lowest failing one, unless it failed twice already (if it passes, the
   fail was noise, such as a stall of a loaded machine: the search goes on above
   it, to the next fail above, or first just above it (2 x precision) and then
   doubling: a rate that failed once and passed once is near the answer, and
   doubling from it cost a Poisson p90 search 6 probes and its whole --max-time) —
   nor fake a fail.

Saturation is judged on the probe's steady-state window (`tokspeed.metrics.sustained`):
a server that completes fewer requests than arrive in that window, by more than the
window's own noise (max(5%, 2/√arrivals)), lets its queue grow without bound, and
the probe fails whatever its percentiles say. Completions are never divided by a
window holding the drain (which made any probe of N requests of E2E T "fall
behind" above ~N/T req/s). A probe whose client could not send at the asked rate
(under `CLIENT_SHORT` of it) ends the search: from there on the client, not the
server, is what is measured; unless the server did not keep up even with what was
sent (a queue growing without bound also grows the connections the client must open,
which slows its sends): that probe fails as over-saturated, and the search goes on
below it. The generator's return value is a `Capacity`; the caller builds the same
from `bracket()` when it stops a search itself (budget, Ctrl-C).

The answer is not the highest passing probe: with the probes' SLO figures (`crossing`),
the rate where each figure meets its limit is fitted across the probes near the
bracket, so it is neither biased low by the bracket's width nor set by one probe's
noisy percentile (a p90 over ~600 requests of a queue at 80% load varies by ±30%).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np

KEEP_UP = 0.95  # completed / arrived in the steady window below this (or its noise) = saturated
CLIENT_SHORT = 0.9  # sent / asked below this = the client could not offer the rate
CLIENT_SHORT_SAID = "the client sent only"  # in a probe's reason: its label is not the rate that ran
MIN_RATE = 0.01
REACH = 1.15  # the fit uses the probes within [low / REACH, high × REACH] of the bracket


@dataclass(frozen=True, slots=True)
class Outcome:
    passed: bool  # every SLO held
    achieved_rate: float | None = None  # completions per second in the steady window
    reason: str = ""
    offered_rate: float | None = None  # arrivals per second in that window (what was really sent)
    arrived: int | None = None  # arrivals in the window (sets the noise of the keep-up test)
    client_limited: bool = False  # the client sent under CLIENT_SHORT of the asked rate


@dataclass(frozen=True, slots=True)
class ProbeLog:
    rate: float
    passed: bool
    reason: str


# why a search ended
STOPS = ("bracket", "max_value", "client", "probes", "floor", "baseline", "budget", "interrupted")


@dataclass
class Capacity:
    """The answer: capacity in [low, high] req/s; `low` is the highest confirmed passing rate."""

    low: float | None
    high: float | None
    precision: float
    probes: list[ProbeLog] = field(default_factory=list)
    stopped_by: str = "bracket"

    @property
    def requests_per_s(self) -> float | None:
        return self.low

    @property
    def uncertainty(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2


Search = Generator[float, Outcome, Capacity]


def keep_up_slack(arrived: int | None) -> float:
    """How far completions may fall short of arrivals in a window of `arrived` requests and still keep up."""
    return max(1 - KEEP_UP, 2 / math.sqrt(arrived)) if arrived else 1 - KEEP_UP


def judge(outcome: Outcome, offered: float) -> Outcome:
    """Turn a probe that did not keep up into a fail, saying so.

    "Kept up" compares what the server completed with what arrived in the same
    steady window when the outcome knows it, else with `offered` (the rate asked).
    """
    sent = outcome.offered_rate or offered
    achieved = outcome.achieved_rate
    behind = achieved is not None and achieved < (1 - keep_up_slack(outcome.arrived)) * sent
    if outcome.client_limited and not behind:  # the asked rate was not what ran: no verdict on the server at it
        return dataclasses.replace(outcome, passed=False)
    if behind:  # even short of the asked rate (its queue, and so its connections, grew), the server fell behind
        why = f"over-saturated: completed {achieved:.3g} of {sent:.3g} req/s arriving at steady state"
        if outcome.client_limited:  # a server that fell behind a lower rate is over this one too
            why += f"; {CLIENT_SHORT_SAID} {sent:.3g} of {offered:.3g} req/s asked"
        return dataclasses.replace(outcome, passed=False, reason=why, client_limited=False)
    return outcome


class SearchEnded(Exception):
    """Raised inside the search when a probe shows it cannot go on (the client's limit)."""


def capacity_search(
    start: float,
    precision: float = 0.05,
    max_probes: int = 20,
    integer: bool = False,
    max_value: float | None = None,
    floor: float | None = None,
) -> Search:
    """See the module docstring. `precision` is relative (0.05 = 5%); `integer` probes whole numbers."""
    probes: list[ProbeLog] = []

    def probe(rate: float) -> Generator[float, Outcome, bool]:
        outcome = judge((yield rate), rate)
        probes.append(ProbeLog(rate=rate, passed=outcome.passed, reason=outcome.reason))
        if outcome.client_limited:
            raise SearchEnded("client")
        return outcome.passed

    lowest = max(floor or 0.0, 1.0 if integer else MIN_RATE)
    first = max(start, lowest)
    if max_value is not None:
        first = min(first, max_value)
    try:
        low, high, stop = yield from _bracket(probe, first, max_probes, integer, max_value, lowest)
        if stop:
            return Capacity(low=low, high=high, precision=precision, probes=probes, stopped_by=stop)
        low, high = yield from _bisect(probe, probes, low, high, precision, max_probes, integer, max_value)
    except SearchEnded as ended:
        low, high = bracket(probes)
        return Capacity(low=low, high=high, precision=precision, probes=probes, stopped_by=str(ended))
    stopped = "probes" if len(probes) >= max_probes and (low is None or high is None or high - low > precision * low) else "bracket"
    return Capacity(low=low, high=high, precision=precision, probes=probes, stopped_by=stopped)


def _bisect(probe, probes, low, high, precision, max_probes, integer, max_value=None):  # type: ignore[no-untyped-def]
    """Narrow [low, high] to `precision`, then confirm both ends (see the module docstring)."""
    while len(probes) < max_probes and low is not None and high is not None:
        if (high - low) <= max(precision * low, 1.0 if integer else 0.0):
            if not (yield from probe(low)):  # confirm the best pass once more
                high, low = low, _best_pass_below(probes, low)
                continue
            if _failed_twice(probes, high) or len(probes) >= max_probes or not (yield from probe(high)):
                break  # ... and the lowest fail, unless it already failed twice
            low, high = high, _lowest_fail_above(probes, high)  # the fail was noise (a stall): search on above
            step = 1 + 2 * precision  # a rate that failed once and then passed is near the answer: look just
            while high is None and len(probes) < max_probes and (max_value is None or low < max_value):
                rate = low * step if max_value is None else min(low * step, max_value)  # above it, then double
                rate = float(max(round(rate), low + 1)) if integer else rate
                if (yield from probe(rate)):
                    low, step = rate, 2.0
                else:
                    high = rate
            if high is None:
                break
            continue
        mid = float(round((low + high) / 2)) if integer else (low + high) / 2
        if (yield from probe(mid)):
            low = mid
        else:
            high = mid
    return low, high


def _failed_twice(probes: list[ProbeLog], rate: float) -> bool:
    return sum(1 for p in probes if p.rate == rate and not p.passed) >= 2


def _lowest_fail_above(probes: list[ProbeLog], rate: float) -> float | None:
    """The lowest rate above `rate` whose last verdict was a fail."""
    last: dict[float, bool] = {}
    for p in probes:
        last[p.rate] = p.passed
    above = [r for r, ok in last.items() if not ok and r > rate]
    return min(above) if above else None


def _bracket(probe, rate: float, max_probes: int, integer: bool, max_value: float | None, lowest: float):  # type: ignore[no-untyped-def]
    """Double until a fail (or halve until a pass); returns (highest pass, lowest fail, why it stopped or "")."""
    passed = yield from probe(rate)
    low, high = (rate, None) if passed else (None, rate)
    for _ in range(max_probes - 1):
        if passed:
            if max_value is not None and rate >= max_value:
                return rate, None, "max_value"
            rate = rate * 2 if max_value is None else min(rate * 2, max_value)
        else:
            rate = float(int(rate // 2)) if integer else rate / 2
            if rate < lowest:
                return None, high, "floor"
        passed = yield from probe(rate)
        if passed and high is None:
            low = rate
        elif passed:
            return rate, high, ""
        elif low is not None:
            return low, rate, ""
        else:
            high = rate
    return low, high, "probes"


def bracket(probes: list[ProbeLog]) -> tuple[float | None, float | None]:
    """(highest pass below the lowest fail, lowest fail) of the probes so far; the last verdict at a rate counts."""
    last: dict[float, bool] = {}
    for p in probes:
        last[p.rate] = p.passed
    fails = [r for r, ok in last.items() if not ok]
    high = min(fails) if fails else None
    passes = [r for r, ok in last.items() if ok and (high is None or r < high)]
    return (max(passes) if passes else None), high


def _best_pass_below(probes: list[ProbeLog], limit: float) -> float | None:
    below = [p.rate for p in probes if p.passed and p.rate < limit]
    return max(below) if below else None


def crossing(points: list[tuple[float, float]], limit: float, rising: bool, low: float,
             high: float | None) -> float | None:
    """The rate at which an SLO figure meets `limit`, fitted across the probes near the bracket.

    `points`: (rate probed, the probe's figure), every probe (a rate probed twice counts twice);
    `rising`: the figure grows with the load (a latency under a `<=` limit). log(figure) is fitted
    linearly against the rate over the probes within [low / REACH, high × REACH], solved for
    log(limit), and kept within the rates fitted (never extrapolated). With fewer than 3 distinct
    rates there, it is interpolated in log space between the bracket's ends. None without positive
    figures, or when they do not move the way `rising` says.
    """
    if high is None:
        return None
    near = [(r, v) for r, v in points if low / REACH <= r <= high * REACH and v is not None and v > 0]
    rates = np.array([r for r, _ in near], dtype=float)
    if len(set(rates.tolist())) < 3 or limit <= 0:
        return _interpolated(near, limit, rising, low, high)
    slope, intercept = np.polyfit(rates, np.log([v for _, v in near]), 1)
    if slope == 0 or (slope > 0) != rising:
        return _interpolated(near, limit, rising, low, high)
    return float(np.clip((math.log(limit) - intercept) / slope, rates.min(), rates.max()))


def _interpolated(near: list[tuple[float, float]], limit: float, rising: bool, low: float, high: float) -> float | None:
    """Between the bracket's ends, in log space, from each end's mean figure (log-linear in the rate)."""
    at_low = [v for r, v in near if r == low]
    at_high = [v for r, v in near if r == high]
    if not at_low or not at_high or limit <= 0:
        return None
    a, b = math.log(float(np.mean(at_low))), math.log(float(np.mean(at_high)))
    if (b > a) != rising or a == b:
        return None
    x = (math.log(limit) - a) / (b - a)
    return low + min(max(x, 0.0), 1.0) * (high - low)
