"""Fault draws in the simulator: parsing `--fault`, seeded and exclusive draws, who is spared."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from tokspeed.sim.config import SimConfig
from tokspeed.sim.faults import STREAM_ONLY, Fault, FaultPicker, parse_fault


@pytest.mark.parametrize(
    "text,expected",
    [
        ("http_429=0.1", (Fault.HTTP_429, 0.1)),
        ("HTTP_503 = 0.5", (Fault.HTTP_503, 0.5)),
        ("stall", (Fault.STALL, 1.0)),
        ("no_done=0", (Fault.NO_DONE, 0.0)),
    ],
)
def test_parse_fault(text: str, expected: tuple[Fault, float]) -> None:
    assert parse_fault(text) == expected


@pytest.mark.parametrize("text,needle", [("bogus=0.1", "unknown fault"), ("reset=x", "not a number"),
                                         ("reset=1.5", "between 0 and 1"), ("reset=-0.1", "between 0 and 1")])
def test_bad_fault_specs(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_fault(text)


def test_probabilities_must_not_exceed_one_in_total() -> None:
    with pytest.raises(ValidationError, match="add up to"):
        SimConfig(faults={Fault.HTTP_500: 0.6, Fault.RESET: 0.5})
    SimConfig(faults={Fault.HTTP_500: 0.5, Fault.RESET: 0.5})


def draws(picker: FaultPicker, n: int, stream: bool = True) -> list[Fault | None]:
    return [picker.pick(stream) for _ in range(n)]


def test_draws_are_seeded_and_follow_the_probabilities() -> None:
    rates = {Fault.HTTP_429: 0.2, Fault.DISCONNECT: 0.1}
    a = draws(FaultPicker(rates, seed=5), 20_000)
    assert a == draws(FaultPicker(rates, seed=5), 20_000)
    assert a != draws(FaultPicker(rates, seed=6), 20_000)
    counts = Counter(a)
    assert counts[Fault.HTTP_429] / 20_000 == pytest.approx(0.2, abs=0.015)
    assert counts[Fault.DISCONNECT] / 20_000 == pytest.approx(0.1, abs=0.015)
    assert set(counts) == {None, Fault.HTTP_429, Fault.DISCONNECT}


def test_clean_requests_are_spared_without_shifting_later_draws() -> None:
    rates = {Fault.HTTP_500: 0.5}
    plain = draws(FaultPicker(rates, seed=1), 50)
    spared = draws(FaultPicker(rates, seed=1, clean_requests=3), 50)
    assert spared[:3] == [None] * 3 and spared[3:] == plain[3:]


def test_stream_faults_spare_non_streamed_requests() -> None:
    for fault in Fault:
        got = FaultPicker({fault: 1.0}).pick(stream=False)
        assert got == (None if fault in STREAM_ONLY else fault)


def test_no_faults_means_none() -> None:
    assert draws(FaultPicker({}), 10) == [None] * 10
