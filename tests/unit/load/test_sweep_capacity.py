"""Sweep point generation and the capacity search, driven by fake measurements with known answers."""

from __future__ import annotations

import random

import pytest

from tokspeed.errors import ConfigError
from tokspeed.load.capacity import CLIENT_SHORT_SAID, Capacity, Outcome, capacity_search, judge
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
    # both ends re-measured: the best pass, then the lowest fail (unless it had failed twice already)
    assert cap.probes[-2].rate == cap.low and cap.probes[-2].passed or cap.probes[-1].rate == cap.low
    assert sum(1 for p in cap.probes if p.rate == cap.high and not p.passed) == 2


def test_noisy_pass_near_the_boundary_is_not_trusted() -> None:
    seen: dict[float, int] = {}

    def flaky(rate: float) -> Outcome:
        seen[rate] = seen.get(rate, 0) + 1
        lucky = 6.0 < rate <= 6.6 and seen[rate] == 1  # passes once by luck, then fails
        return Outcome(passed=rate <= 6.0 or lucky)

    cap = drive(capacity_search(1.0, precision=0.05), flaky)
    assert cap.low is not None and cap.low <= 6.0


def test_noisy_fail_near_the_boundary_is_not_trusted() -> None:
    """The first probe above the answer fails once by a stall (a loaded machine): the old search kept it as
    the upper bound forever and answered 2 for a capacity of 2.35; re-measured, it passes and the search
    goes on above it."""
    seen: dict[float, int] = {}

    def stalled(rate: float) -> Outcome:
        seen[rate] = seen.get(rate, 0) + 1
        return Outcome(passed=rate <= 2.35 and not (rate == 2.0 and seen[rate] == 1))

    cap = drive(capacity_search(1.0, precision=0.05), stalled)
    assert cap.low is not None and cap.high is not None and cap.low <= 2.35 < cap.high
    assert cap.low >= 2.35 / 1.05


def test_a_fail_that_passes_when_confirmed_is_followed_just_above_it_not_by_doubling() -> None:
    """A Poisson p90 search in CI (fc7): 80 req/s failed, then passed when confirmed against a capacity of ~80.5;
    the search doubled to 160 and spent 6 probes (160, 120, 100, 90, 85, 82.5) coming back, then its whole
    --max-time. Now the next probe is 80 x 1.1 = 88, and the search ends within its precision in 12 probes, not 16."""
    seen: dict[float, int] = {}

    def p90(rate: float) -> Outcome:
        seen[rate] = seen.get(rate, 0) + 1
        return Outcome(passed=rate <= 80.5 and not (rate == 80.0 and seen[rate] == 1))

    cap = drive(capacity_search(40.0, precision=0.05), p90)
    rates = [p.rate for p in cap.probes]
    flip = min(i for i, r in enumerate(rates) if r == 80.0 and cap.probes[i].passed)
    assert rates[flip + 1] == pytest.approx(88.0), rates
    assert 160.0 not in rates and len(rates) <= 12, rates
    assert cap.low is not None and cap.high is not None and cap.low <= 80.5 < cap.high <= cap.low * 1.05, rates


def test_over_saturation_counts_as_a_fail() -> None:
    # SLOs "hold" everywhere, but above 10 req/s the server only completes 10/s at steady state
    cap = drive(capacity_search(2.0), lambda r: Outcome(passed=True, achieved_rate=min(r, 10.0), arrived=1000))
    assert cap.low is not None and cap.low <= 10.0 / 0.95
    assert any("over-saturated" in p.reason for p in cap.probes)


def test_keeping_up_is_judged_on_the_steady_window_with_its_noise() -> None:
    """Completions vs arrivals of the same steady window; the slack is max(5%, 2/sqrt(arrivals))."""
    kept_up = judge(Outcome(passed=True, achieved_rate=8.2, offered_rate=8.5, arrived=2000), 10.0)
    assert kept_up.passed  # 3.5% short of what arrived: within 5%
    unknown = judge(Outcome(passed=True, achieved_rate=8.4), 10.0)  # without the window, the asked rate is the bar
    assert not unknown.passed and "8.4 of 10 req/s arriving" in unknown.reason
    behind = judge(Outcome(passed=True, achieved_rate=7.0, offered_rate=8.5, arrived=2000), 10.0)
    assert not behind.passed and "7 of 8.5 req/s arriving" in behind.reason
    few = judge(Outcome(passed=True, achieved_rate=7.6, offered_rate=8.5, arrived=100), 10.0)
    assert few.passed  # 10.6% short of 100 arrivals: inside their 2/sqrt(100) = 20% noise


def test_a_probe_that_kept_up_under_drain_arithmetic_is_not_called_saturated() -> None:
    """The old rule divided completions by a window holding the drain: 100 requests of E2E 2.6 s at 8 req/s
    'achieved' 100 / (12.5 + 2.6) = 6.6 and failed. At steady state the server completed what arrived."""
    assert judge(Outcome(passed=True, achieved_rate=7.96, offered_rate=8.0, arrived=800), 8.0).passed


def test_max_value_ends_the_search_with_a_lower_bound() -> None:
    cap = drive(capacity_search(2.0, max_value=20.0), lambda r: Outcome(passed=True))
    assert cap.stopped_by == "max_value" and cap.low == 20.0 and cap.high is None
    assert max(p.rate for p in cap.probes) == 20.0


def test_the_clients_limit_ends_the_search() -> None:
    cap = drive(capacity_search(2.0), lambda r: Outcome(passed=True, client_limited=r > 10))
    assert cap.stopped_by == "client" and cap.low == 8.0


def test_halving_stops_at_the_floor() -> None:
    cap = drive(capacity_search(8.0, floor=1.5), lambda r: Outcome(passed=False))
    assert cap.low is None and cap.stopped_by == "floor" and min(p.rate for p in cap.probes) >= 1.5


def test_bracket_of_probes_so_far() -> None:
    from tokspeed.load.capacity import ProbeLog, bracket

    logs = [ProbeLog(4, True, ""), ProbeLog(8, True, ""), ProbeLog(16, False, ""), ProbeLog(12, True, ""),
            ProbeLog(14, False, ""), ProbeLog(12, False, "")]  # 12 re-measured and failed: the last verdict counts
    assert bracket(logs) == (8, 12)
    assert bracket([]) == (None, None)


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
    assert sweep.send(2.0).overrides == {"profile": "concurrency", "concurrency": 32, "requests": 128}
    rates = [sweep.send(10.0).overrides["rate"]] + [p.overrides["rate"] for p in sweep]
    assert rates == pytest.approx([4.0, 6.0, 8.0])
    assert spread(2.0, 10.0, 3) == pytest.approx(rates)


def test_integer_search_for_concurrency() -> None:
    cap = drive(capacity_search(1, precision=0.05, integer=True), lambda c: Outcome(passed=c <= 13))
    assert cap.low == 13 and cap.high == 14
    assert all(p.rate == int(p.rate) for p in cap.probes)


def test_each_probe_holds_its_rate_with_its_own_seed() -> None:
    from tokspeed.runner.sweep import ProbeSettings, _probe_overrides, _probe_seconds

    settings = ProbeSettings(duration_s=10.0, warmup_s=3.0)
    a, b = _probe_overrides("rate", 50.0, settings, 1), _probe_overrides("rate", 50.0, settings, 2)
    assert a["seed"] != b["seed"] and a["warmup_s"] == 3.0 and a["requests"] is None and a["duration_s"] == 10.0
    assert _probe_seconds("rate", 2.0, settings) == 60.0  # 200 arrivals at 2 req/s would take 100 s: capped
    assert _probe_seconds("rate", 2.0, ProbeSettings(min_requests=300)) == 150.0  # asked for: honoured


def _curve(rate: float) -> float:
    """A p90 that doubles every 10 req/s: 10 ms at 0, 40 ms at 20 req/s."""
    return 10.0 * 2 ** (rate / 10)


def test_the_capacity_is_where_the_fitted_slo_figure_meets_its_limit_not_the_highest_pass() -> None:
    """The bracket [19, 21.5] holds the answer 20: the highest pass (19) is 5% low, the fit is exact."""
    from tokspeed.load.capacity import crossing

    points = [(r, _curve(r)) for r in (10.0, 15.0, 19.0, 21.5, 25.0, 40.0)]
    assert crossing(points, 40.0, True, 19.0, 21.5) == pytest.approx(20.0)
    # two rates only: log-linear interpolation between the bracket's ends (exact on this curve too)
    assert crossing([(19.0, _curve(19)), (21.5, _curve(21.5))], 40.0, True, 19.0, 21.5) == pytest.approx(20.0)
    # a `>=` SLO (a speed that falls with the load) crosses the same way
    falling = [(r, 1000 / _curve(r)) for r in (15.0, 19.0, 21.5, 25.0)]
    assert crossing(falling, 25.0, False, 19.0, 21.5) == pytest.approx(20.0)


def test_the_fit_pools_every_probe_near_the_boundary_and_never_extrapolates() -> None:
    """The bracket's ends misread, the lower 30% high and the upper 30% low (each one probe's noise): between
    the two alone the figure falls with the load (no answer); the fit over the five probes near the boundary
    lands within 2% of 20."""
    from tokspeed.load.capacity import crossing

    points = [(r, _curve(r)) for r in (17.5, 22.0, 23.0)] + [(19.0, 1.3 * _curve(19.0)), (21.5, 0.7 * _curve(21.5))]
    assert crossing(points, 40.0, True, 19.0, 21.5) == pytest.approx(20.0, rel=0.02)
    assert crossing(points[3:], 40.0, True, 19.0, 21.5) is None
    both_high = [(19.0, 1.3 * _curve(19.0)), (21.5, 1.3 * _curve(21.5))]
    assert crossing(both_high, 40.0, True, 19.0, 21.5) == 19.0  # between two ends: kept within the bracket
    far = [(r, _curve(r)) for r in (19.0, 19.5, 20.5)]
    assert crossing(far, 1000.0, True, 19.0, 20.5) == 20.5  # the limit lies far above: kept at the rates fitted


def test_figures_that_do_not_grow_with_the_load_give_no_fit() -> None:
    from tokspeed.load.capacity import crossing

    assert crossing([(10.0, 50.0), (12.0, 40.0), (14.0, 30.0)], 45.0, True, 10.0, 14.0) is None
    assert crossing([(10.0, 50.0)], 45.0, True, 10.0, None) is None  # no bracket, no crossing


def test_the_searchs_capacity_is_the_lowest_slos_crossing_and_never_past_a_saturated_probe() -> None:
    from tokspeed.metrics.schema import SLOResult, Summary
    from tokspeed.metrics.slo import parse_slo
    from tokspeed.results import Benchmark, CapacityProbe
    from tokspeed.runner.sweep import fitted_value

    class Base:
        slos = [parse_slo("ttft_p90_ms<=40"), parse_slo("e2e_p90_ms<=80")]

    def probe(rate: float, reason: str = "") -> tuple[CapacityProbe, Benchmark]:
        slo = [SLOResult(slo="ttft_p90_ms<=40", kind="percentile", observed=_curve(rate), met=_curve(rate) <= 40),
               SLOResult(slo="e2e_p90_ms<=80", kind="percentile", observed=_curve(rate - 2) * 2, met=True)]
        ok = _curve(rate) <= 40 and not reason
        return (CapacityProbe(value=rate, passed=ok, reason=reason, benchmark=0),
                Benchmark(name="p", profile={}, summary=Summary(slo=slo)))

    rates = [10.0, 15.0, 19.0, 21.5, 25.0]
    probes, benches = zip(*(probe(r) for r in rates))
    # TTFT meets 40 ms at 20 req/s, E2E (its figure 2× TTFT's 2 req/s earlier) at 22: the capacity is 20
    assert fitted_value(list(probes), list(benches), 19.0, 21.5, Base()) == pytest.approx(20.0)  # type: ignore[arg-type]
    saturated = probe(19.5, "over-saturated: completed 18 of 19.5 req/s arriving at steady state")
    assert fitted_value(list(probes) + [saturated[0]], list(benches) + [saturated[1]], 19.0, 19.5,
                        Base()) == 19.0  # type: ignore[arg-type]
    # a probe whose client sent short of its label is left out of the fit, saturated or not: the label did not run
    for reason in ("the client sent only 18 of 20.5 req/s asked",
                   "over-saturated: completed 17 of 18 req/s arriving at steady state; the client sent only 18 of 20.5 req/s asked"):
        short = probe(20.5, reason)  # its 60 ms, fitted at 20.5 req/s, would move the crossing to 19
        short[1].summary.slo[0] = SLOResult(slo="ttft_p90_ms<=40", kind="percentile", observed=60.0, met=False)
        assert fitted_value(list(probes) + [short[0]], list(benches) + [short[1]], 19.0, 21.5,
                            Base()) == pytest.approx(20.0)  # type: ignore[arg-type]
    # and a server that fell behind the 18 req/s such a probe sent is not given 20: the highest pass below 18
    short[0].offered_requests_per_s = 18.0
    assert fitted_value(list(probes) + [short[0]], list(benches) + [short[1]], 19.0, 21.5, Base()) == 15.0  # type: ignore[arg-type]


def test_a_server_that_fell_behind_what_the_client_did_send_is_a_fail_not_the_clients_limit() -> None:
    """Against a 4-slot server of ~97 req/s, the doubling probe at 160 req/s sent 137 (the queue, and so the
    connections, grew without bound) while the server completed 97: it did not keep up with what arrived, so
    160 is above its capacity whatever the client's shortfall. This ended searches with 'client' and no answer."""
    drowned = judge(Outcome(passed=False, achieved_rate=97.0, offered_rate=137.1, arrived=2742, client_limited=True), 160.0)
    assert not drowned.passed and not drowned.client_limited
    assert drowned.reason.startswith("over-saturated") and "137 of 160" in drowned.reason
    assert CLIENT_SHORT_SAID in drowned.reason  # so the fit leaves it out: its label is not the rate that ran

    def server(rate: float) -> Outcome:  # keeps up to 97 req/s; the client sends at most 140
        sent = min(rate, 140.0)
        return Outcome(passed=rate <= 97, achieved_rate=min(sent, 97.0), offered_rate=sent, arrived=int(sent * 20),
                       client_limited=sent < 0.9 * rate)

    cap = drive(capacity_search(40.0, precision=0.05), server)
    assert cap.stopped_by == "bracket" and cap.low is not None and cap.high is not None
    assert cap.low <= 97 < cap.high and cap.high <= cap.low * 1.05 + 1e-9, cap


def test_a_client_short_of_the_rate_against_a_server_that_kept_up_still_ends_the_search() -> None:
    kept_up = judge(Outcome(passed=True, achieved_rate=120.0, offered_rate=121.0, arrived=2420, client_limited=True), 160.0)
    assert not kept_up.passed and kept_up.client_limited
