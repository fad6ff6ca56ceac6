"""Length specs: parsing, errors with hints, distributions, seeding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokspeed.errors import ConfigError
from tokspeed.workload import FixedLength, NormalLength, UniformLength, parse_length_spec
from tokspeed.workload.lengths import Stream, request_rng


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256", FixedLength(256)),
        (" 1 ", FixedLength(1)),
        ("uniform:128,512", UniformLength(128, 512)),
        ("Uniform: 5 , 5", UniformLength(5, 5)),
        ("normal:256,64", NormalLength(256.0, 64.0)),
        ("normal:100.5,0", NormalLength(100.5, 0.0)),
    ],
)
def test_parses_each_form(text: str, expected: object) -> None:
    assert parse_length_spec(text) == expected


@pytest.mark.parametrize("text", ["256", "uniform:128,512", "normal:256,64", "normal:100.5,2.5"])
def test_str_is_the_canonical_spec_and_round_trips(text: str) -> None:
    spec = parse_length_spec(text)
    assert str(spec) == text
    assert parse_length_spec(str(spec)) == spec


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0",
        "-5",
        "1.5",
        "abc",
        "²",
        "uniform:5",
        "uniform:10,5",
        "uniform:0,5",
        "uniform:a,b",
        "uniform:1,2,3",
        "normal:256",
        "normal:256,-1",
        "normal:0,10",
        "normal:nan,1",
        "normal:inf,1",
        "poisson:3",
        "dataset",
    ],
)
def test_bad_specs_raise_config_error_with_hint(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_length_spec(text)
    assert repr(text) in str(info.value)
    assert info.value.hint is not None and "uniform:MIN,MAX" in info.value.hint


def test_fixed_always_returns_n() -> None:
    spec = parse_length_spec("77")
    assert {spec.draw(3, i, Stream.OUTPUT_LENGTH) for i in range(50)} == {77}


def test_uniform_stays_in_bounds_and_reaches_both_ends() -> None:
    spec = parse_length_spec("uniform:10,14")
    draws = [spec.draw(0, i, Stream.OUTPUT_LENGTH) for i in range(400)]
    assert set(draws) == {10, 11, 12, 13, 14}


def test_normal_mean_and_sd_are_close_over_many_samples() -> None:
    spec = parse_length_spec("normal:500,50")
    rng = np.random.default_rng(1)
    draws = np.array([spec.sample(rng) for _ in range(4000)])
    assert abs(draws.mean() - 500) < 5  # standard error ~0.8
    assert abs(draws.std() - 50) < 5
    assert all(isinstance(d, int) for d in draws.tolist())


def test_normal_is_clipped_to_at_least_one() -> None:
    spec = parse_length_spec("normal:2,50")
    rng = np.random.default_rng(2)
    draws = [spec.sample(rng) for _ in range(500)]
    assert min(draws) == 1
    assert draws.count(1) > 100  # the whole lower tail lands on 1


def test_draws_are_deterministic_per_seed_and_index() -> None:
    spec = parse_length_spec("uniform:1,1000000")
    first = [spec.draw(42, i, Stream.OUTPUT_LENGTH) for i in range(20)]
    again = [spec.draw(42, i, Stream.OUTPUT_LENGTH) for i in reversed(range(20))][::-1]
    assert first == again  # order of building does not matter


def test_seed_zero_is_a_real_seed() -> None:
    spec = parse_length_spec("uniform:1,1000000")
    zero = [spec.draw(0, i, Stream.OUTPUT_LENGTH) for i in range(20)]
    assert zero == [spec.draw(0, i, Stream.OUTPUT_LENGTH) for i in range(20)]
    assert zero != [spec.draw(1, i, Stream.OUTPUT_LENGTH) for i in range(20)]


def test_streams_are_independent() -> None:
    spec = parse_length_spec("uniform:1,1000000")
    out = [spec.draw(0, i, Stream.OUTPUT_LENGTH) for i in range(20)]
    assert out != [spec.draw(0, i, Stream.INPUT_LENGTH) for i in range(20)]


def test_negative_seeds_work() -> None:
    assert request_rng(-1, 0, Stream.ORDER).integers(1 << 30) != request_rng(1, 0, Stream.ORDER).integers(
        1 << 30
    )


@given(low=st.integers(1, 10_000), width=st.integers(0, 10_000), index=st.integers(0, 10**9))
def test_uniform_any_bounds_and_index(low: int, width: int, index: int) -> None:
    spec = parse_length_spec(f"uniform:{low},{low + width}")
    assert low <= spec.draw(7, index, Stream.OUTPUT_LENGTH) <= low + width


@given(mean=st.floats(0.01, 1e6), sd=st.floats(0, 1e6), seed=st.integers(-(2**70), 2**70))
def test_normal_never_below_one(mean: float, sd: float, seed: int) -> None:
    spec = NormalLength(mean, sd)
    assert spec.draw(seed, 3, Stream.OUTPUT_LENGTH) >= 1
