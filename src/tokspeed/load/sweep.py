"""Sweeps: which load points to measure, one after another.

A sweep varies one dimension — `concurrency`, `rate`, `input_tokens` or
`output_tokens` — over a list of values; every point is an ordinary benchmark.
The `auto` sweep adapts, like guidellm's: it measures one-at-a-time, then
saturated throughput, then spreads open-loop rates between the two (each point's
sustained throughput: completions per second between its first end and its last send,
never a window holding the ramp or the drain). Sweeps are
generators that receive each finished point's summary through `.send()`, so an
adaptive sweep can use what it learned without knowing the runner.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from tokspeed.errors import ConfigError

DIMENSIONS = ("concurrency", "rate", "input_tokens", "output_tokens")
AUTO_RATES = 6  # open-loop points between synchronous and saturated throughput
AUTO_SATURATION_CONCURRENCY = 64
AUTO_SATURATION_REQUESTS_PER_STREAM = 4  # the saturated point's requests: its steady window holds 3/4 of them


@dataclass(frozen=True, slots=True)
class Point:
    """One load point: a label and the config fields it overrides."""

    label: str
    overrides: dict[str, Any] = field(default_factory=dict)


# A sweep yields points and is sent each point's measured request rate (req/s) or None.
Sweep = Generator[Point, "float | None", None]


def parse_values(text: str, dimension: str) -> list[Any]:
    """`1,2,4,8` -> [1, 2, 4, 8] (ints for counts and lengths, floats for rates)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"--{dimension.replace('_', '-')} needs values, e.g. 1,2,4,8")
    try:
        values: list[Any] = [float(p) if dimension == "rate" else int(p) for p in parts]
    except ValueError as exc:
        raise ConfigError(
            f"--{dimension.replace('_', '-')} {text!r}: not a comma-separated list of numbers"
        ) from exc
    if any(v <= 0 for v in values):
        raise ConfigError(f"--{dimension.replace('_', '-')} values must be positive: {text!r}")
    return values


def is_list(text: str | None) -> bool:
    """True for `1,2,4` (a sweep), false for `8` or a distribution such as `uniform:1,9`."""
    return text is not None and "," in text and ":" not in text


def point_for(dimension: str, value: Any) -> Point:
    if dimension == "concurrency":
        return Point(f"concurrency {value}", {"profile": "concurrency", "concurrency": int(value)})
    if dimension == "rate":
        return Point(f"rate {value:g}/s", {"profile": "rate", "rate": float(value)})
    if dimension == "input_tokens":
        return Point(f"input {value} tokens", {"input_tokens": str(value), "dataset": "synthetic"})
    if dimension == "output_tokens":
        return Point(f"output {value} tokens", {"output_tokens": str(value)})
    raise ConfigError(f"cannot sweep over {dimension!r}", hint=f"sweep one of {', '.join(DIMENSIONS)}")


def list_sweep(dimension: str, values: list[Any]) -> Sweep:
    """The points in the order given; what is sent back is ignored."""
    for v in values:
        yield point_for(dimension, v)


def auto_sweep(rates: int = AUTO_RATES, saturation: int = AUTO_SATURATION_CONCURRENCY) -> Sweep:
    """Synchronous, then saturated (closed loop at `saturation` streams), then rates in between.

    The saturated point measures `AUTO_SATURATION_REQUESTS_PER_STREAM` requests per stream: a
    closed loop of C streams sends its last request when all but C have ended, so with the default
    100 requests at 64 streams its steady window held 36 completions (read as 103 req/s against a
    server that completes 96). It is sent each point's sustained throughput.
    """
    low = yield Point("synchronous", {"profile": "synchronous"})
    high = yield Point(f"throughput (concurrency {saturation})", {"profile": "concurrency", "concurrency": saturation,
                                                                   "requests": AUTO_SATURATION_REQUESTS_PER_STREAM * saturation})
    if not low or not high:
        return
    if high <= low:
        high = low * 1.5
    for rate in spread(low, high, rates):
        yield Point(f"rate {rate:.3g}/s", {"profile": "rate", "rate": round(rate, 4)})


def spread(low: float, high: float, n: int) -> list[float]:
    """n rates strictly between low and high, evenly spaced."""
    step = (high - low) / (n + 1)
    return [low + step * (i + 1) for i in range(n)]
