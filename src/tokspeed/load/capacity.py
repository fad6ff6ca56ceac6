"""Capacity search: the highest offered request rate at which every SLO still holds.

The seed article's QPS is "requests per second within a latency constraint".
The search is a generator: it yields the next rate to probe and is sent the
outcome (`Outcome`: did every SLO hold, and did the server keep up). It

1. brackets: starting at `start`, doubles while probes pass (halves while they fail);
2. bisects the bracket [highest pass, lowest fail] until its width is within
   `precision` of the lower end;
3. confirms: re-measures the best passing rate; if the re-measurement fails,
   that rate becomes the new upper bound and bisection resumes — noise cannot
   fake a pass.

A probe where the server did not keep up (achieved rate well under the offered
rate: queues grow without bound) counts as a fail even if the SLOs happened to
hold during a short measurement: that is over-saturation, and pushing further
is pointless. The generator's return value is a `Capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator

KEEP_UP = 0.9  # achieved / offered below this = saturated
MIN_RATE = 0.01


@dataclass(frozen=True, slots=True)
class Outcome:
    passed: bool  # every SLO held
    achieved_rate: float | None = None  # completed requests / window
    reason: str = ""
    offered_rate: float | None = None  # what the drawn schedule offered (poisson/gamma gaps are not rescaled)


@dataclass(frozen=True, slots=True)
class ProbeLog:
    rate: float
    passed: bool
    reason: str


@dataclass
class Capacity:
    """The answer: capacity in [low, high] req/s; `low` is the highest confirmed passing rate."""

    low: float | None
    high: float | None
    precision: float
    probes: list[ProbeLog] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float | None:
        return self.low

    @property
    def uncertainty(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2


Search = Generator[float, Outcome, Capacity]


def judge(outcome: Outcome, offered: float) -> Outcome:
    """Turn a probe that did not keep up into a fail, saying so.

    "Kept up" is judged against the rate the probe's schedule really offered when
    the outcome knows it (a drawn Poisson schedule is a few percent off the rate
    asked), else against `offered`.
    """
    offered = outcome.offered_rate or offered
    if outcome.achieved_rate is not None and outcome.achieved_rate < KEEP_UP * offered:
        why = f"over-saturated: achieved {outcome.achieved_rate:.3g} of {offered:.3g} req/s offered"
        return Outcome(passed=False, achieved_rate=outcome.achieved_rate, reason=why, offered_rate=outcome.offered_rate)
    return outcome


def capacity_search(start: float, precision: float = 0.05, max_probes: int = 20, integer: bool = False) -> Search:
    """See the module docstring. `precision` is relative (0.05 = 5%); `integer` probes whole numbers."""
    probes: list[ProbeLog] = []

    def probe(rate: float) -> Generator[float, Outcome, bool]:
        outcome = judge((yield rate), rate)
        probes.append(ProbeLog(rate=rate, passed=outcome.passed, reason=outcome.reason))
        return outcome.passed

    low, high = yield from _bracket(probe, max(start, 1.0 if integer else MIN_RATE), max_probes, integer)
    while len(probes) < max_probes and low is not None and high is not None:
        if (high - low) <= max(precision * low, 1.0 if integer else 0.0):
            if (yield from probe(low)):  # confirm the best pass once more
                break
            high, low = low, _best_pass_below(probes, low)
            continue
        mid = float(round((low + high) / 2)) if integer else (low + high) / 2
        if (yield from probe(mid)):
            low = mid
        else:
            high = mid
    return Capacity(low=low, high=high, precision=precision, probes=probes)


def _bracket(probe, rate: float, max_probes: int, integer: bool):  # type: ignore[no-untyped-def]
    """Double until a fail (or halve until a pass); returns (highest pass, lowest fail)."""
    passed = yield from probe(rate)
    low, high = (rate, None) if passed else (None, rate)
    for _ in range(max_probes - 1):
        if passed:
            rate *= 2
        else:
            rate = float(int(rate // 2)) if integer else rate / 2
            if rate < (1.0 if integer else MIN_RATE):
                return None, high
        passed = yield from probe(rate)
        if passed and high is None:
            low = rate
        elif passed:
            return rate, high
        elif low is not None:
            return low, rate
        else:
            high = rate
    return low, high


def _best_pass_below(probes: list[ProbeLog], limit: float) -> float | None:
    below = [p.rate for p in probes if p.passed and p.rate < limit]
    return max(below) if below else None
