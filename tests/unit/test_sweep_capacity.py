"""Sweep point generation and the capacity search, driven by fake measurements with known answers."""

from __future__ import annotations

import random

import pytest

from tokspeed.errors import ConfigError
from tokspeed.load.capacity import Capacity, Outcome, capacity_search, judge
from tokspeed.load.sweep import auto_sweep, is_list, list_sweep, parse_values, spread


def drive(search, verdict) -> Capacity:  # type: ignore[no-untyped-def]
    rate = next(search)
    try:
        while True:
            rate = search.send(verdict(rate))
    except StopIteration as stop:
        return stop.value


@pytest.mark.parametrize("true_capacity,start", [(7.3, 1.0), (0.8, 4.0), (123.0, 2.0), (1.0, 1.0)])
def test_search_lands_within_precision(true_capacity: float, start: float) -> None:
    cap = drive(capacity_search(start, precision=0.05), lambda r: Outcome(passed=r <= true_capacity))
    assert cap.low is not None and cap.high is not None
    assert cap.low <= true_capacity < cap.high
    assert (cap.high - cap.low) <= 0.05 * cap.low
    assert cap.probes[-1].rate == cap.low and cap.probes[-1].passed  # the answer was re-confirmed


def test_noisy_pass_near_the_boundary_is_not_trusted() -> None:
    seen: dict[float, int] = {}

    def flaky(rate: float) -> Outcome:
        seen[rate] = seen.get(rate, 0) + 1
        lucky = 6.0 < rate <= 6.6 and seen[rate] == 1  # passes once by luck, then fails
        return Outcome(passed=rate <= 6.0 or lucky)

    cap = drive(capacity_search(1.0, precision=0.05), flaky)
    assert cap.low is not None and cap.low <= 6.0


def test_over_saturation_counts_as_a_fail() -> None:
    # SLOs "hold" everywhere, but above 10 req/s the server only completes 10/s
    cap = drive(capacity_search(2.0), lambda r: Outcome(passed=True, achieved_rate=min(r, 10.0)))
    assert cap.low is not None and cap.low <= 10.0 / 0.9
    assert any("over-saturated" in p.reason for p in cap.probes)


def test_keeping_up_is_judged_against_the_rate_the_schedule_offered() -> None:
    """A drawn Poisson schedule that offered 8.5 req/s for a probe of 10 is kept up with at 8.4 completed/s."""
    kept_up = judge(Outcome(passed=True, achieved_rate=8.4, offered_rate=8.5), 10.0)
    assert kept_up.passed
    unknown = judge(Outcome(passed=True, achieved_rate=8.4), 10.0)  # without it, the probe's rate is the bar
    assert not unknown.passed and "8.4 of 10 req/s offered" in unknown.reason
    behind = judge(Outcome(passed=True, achieved_rate=7.0, offered_rate=8.5), 10.0)
    assert not behind.passed and "7 of 8.5 req/s offered" in behind.reason


def test_nothing_passes() -> None:
    cap = drive(capacity_search(1.0), lambda r: Outcome(passed=False))
    assert cap.low is None and cap.requests_per_s is None


def test_probe_budget_is_respected() -> None:
    rng = random.Random(0)
    cap = drive(capacity_search(1.0, precision=0.0001, max_probes=12), lambda r: Outcome(passed=rng.random() < 0.5))
    assert len(cap.probes) <= 12


def test_list_values_and_sweeps() -> None:
    assert parse_values("1, 2,4", "concurrency") == [1, 2, 4]
    assert parse_values("0.5,2", "rate") == [0.5, 2.0]
    for bad in ("", "a,b", "1,-2"):
        with pytest.raises(ConfigError):
            parse_values(bad, "concurrency")
    assert is_list("1,2") and not is_list("8") and not is_list("uniform:1,9")
    points = list(list_sweep("input_tokens", [128, 512]))
    assert [p.overrides for p in points] == [
        {"input_tokens": "128", "dataset": "synthetic"},
        {"input_tokens": "512", "dataset": "synthetic"},
    ]


def test_auto_sweep_spreads_rates_between_sync_and_saturation() -> None:
    sweep = auto_sweep(rates=3, saturation=32)
    assert next(sweep).overrides == {"profile": "synchronous"}
    assert sweep.send(2.0).overrides == {"profile": "concurrency", "concurrency": 32}
    rates = [sweep.send(10.0).overrides["rate"]] + [p.overrides["rate"] for p in sweep]
    assert rates == pytest.approx([4.0, 6.0, 8.0])
    assert spread(2.0, 10.0, 3) == pytest.approx(rates)


def test_integer_search_for_concurrency() -> None:
    cap = drive(capacity_search(1, precision=0.05, integer=True), lambda c: Outcome(passed=c <= 13))
    assert cap.low == 13 and cap.high == 14
    assert all(p.rate == int(p.rate) for p in cap.probes)
