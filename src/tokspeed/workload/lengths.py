"""Length specifications: how many tokens a prompt or a reply should have.

One grammar serves `--input-tokens` (synthetic prompts) and `--output-tokens`
(the `max_tokens` asked for):

    N                  every request gets N (an integer >= 1)
    uniform:MIN,MAX    an integer drawn uniformly from MIN..MAX, both inclusive
    normal:MEAN,SD     a normal draw, rounded to the nearest integer, clipped to >= 1

Draws come from a generator seeded by (seed, index, stream) (`request_rng`), so
request i gets the same length in every run with the same seed, whatever order
requests are built in, and seed 0 is a seed like any other.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from tokspeed.errors import ConfigError

LENGTH_FORMS = "N, uniform:MIN,MAX or normal:MEAN,SD (e.g. 256, uniform:128,512, normal:256,64)"
LENGTH_HINT = f"use {LENGTH_FORMS}"
MAX_LENGTH_TOKENS = 2_000_000  # past the longest context windows served; a 10^8-token prompt is gigabytes of text
_SEED_MODULUS = 1 << 64  # SeedSequence takes non-negative entropy; negative seeds wrap


class Stream(IntEnum):
    """Independent random streams per request, so one draw never shifts another."""

    OUTPUT_LENGTH = 0
    INPUT_LENGTH = 1
    PROMPT_TEXT = 2
    ORDER = 3  # keyed by pass number rather than request index


def request_rng(seed: int, key: int, stream: Stream) -> np.random.Generator:
    """A generator that depends only on (seed, key, stream)."""
    return np.random.default_rng([seed % _SEED_MODULUS, key, int(stream)])


class LengthSpec(ABC):
    """A distribution of token counts; `str()` gives the canonical spec text."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> int:
        """One length (>= 1) drawn with `rng`."""

    def draw(self, seed: int, index: int, stream: Stream) -> int:
        """The length for request `index`: deterministic for (seed, index, stream)."""
        return self.sample(request_rng(seed, index, stream))


@dataclass(frozen=True)
class FixedLength(LengthSpec):
    n: int

    def sample(self, rng: np.random.Generator) -> int:
        return self.n

    def draw(self, seed: int, index: int, stream: Stream) -> int:
        return self.n  # no generator needed

    def __str__(self) -> str:
        return str(self.n)


@dataclass(frozen=True)
class UniformLength(LengthSpec):
    low: int
    high: int  # inclusive

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high, endpoint=True))

    def __str__(self) -> str:
        return f"uniform:{self.low},{self.high}"


@dataclass(frozen=True)
class NormalLength(LengthSpec):
    mean: float
    sd: float

    def sample(self, rng: np.random.Generator) -> int:
        return max(1, round(float(rng.normal(self.mean, self.sd))))

    def __str__(self) -> str:
        return f"normal:{_num(self.mean)},{_num(self.sd)}"


def parse_length_spec(text: str | int) -> LengthSpec:
    """Parse `N`, `uniform:MIN,MAX` or `normal:MEAN,SD`; anything else is a ConfigError."""
    raw = str(text)
    kind, sep, args = raw.strip().lower().partition(":")
    if not sep:
        return FixedLength(_positive_int(kind, raw))
    parts = [p.strip() for p in args.split(",")]
    if kind == "uniform":
        return _uniform(parts, raw)
    if kind == "normal":
        return _normal(parts, raw)
    raise _error(raw, f"unknown distribution {kind!r}")


def _uniform(parts: list[str], raw: str) -> UniformLength:
    if len(parts) != 2:
        raise _error(raw, "uniform needs two integers, MIN,MAX")
    low, high = (_positive_int(p, raw) for p in parts)
    if low > high:
        raise _error(raw, f"MIN ({low}) is larger than MAX ({high})")
    return UniformLength(low, high)


def _normal(parts: list[str], raw: str) -> NormalLength:
    if len(parts) != 2:
        raise _error(raw, "normal needs two numbers, MEAN,SD")
    mean, sd = (_finite(p, raw) for p in parts)
    if mean <= 0:
        raise _error(raw, "MEAN must be positive")
    if mean > MAX_LENGTH_TOKENS:
        raise _error(raw, f"MEAN is larger than {MAX_LENGTH_TOKENS:,} tokens")
    if sd < 0:
        raise _error(raw, "SD must not be negative")
    return NormalLength(mean, sd)


def _positive_int(part: str, raw: str) -> int:
    if not (part.isascii() and part.isdigit()) or int(part) < 1:
        raise _error(raw, f"{part!r} is not a whole number >= 1")
    if int(part) > MAX_LENGTH_TOKENS:
        raise _error(raw, f"{part} is larger than {MAX_LENGTH_TOKENS:,} tokens (longer than any model's context)")
    return int(part)


def _finite(part: str, raw: str) -> float:
    try:
        value = float(part)
    except ValueError:
        raise _error(raw, f"{part!r} is not a number") from None
    if not math.isfinite(value):
        raise _error(raw, f"{part!r} is not a finite number")
    return value


def _error(raw: str, why: str) -> ConfigError:
    return ConfigError(f"cannot parse length {raw!r}: {why}", hint=LENGTH_HINT)


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)
