"""Stages and ramps: parse `--stages`, `--ramp` and the scenario `stages:` list into rate segments.

    --stages 'warm:rate=2:30s,steady:rate=8:60s,spike:rate=20:10s,cool-down:rate=2:30s'
        stages run back to back, each at a constant rate; the name is optional
        (default "stage K")
    --ramp 'rate=1..20:60s'            linear ramp: the rate rises from 1 to 20 req/s over 60 s,
                                       reported in 5 equal windows (`:windows=N` to change)
    --ramp 'rate=1..20:60s:steps=5'    stepped ramp: 5 stages of 12 s at 1, 5.75, 10.5, 15.25, 20 req/s

Scenario YAML: `stages: [{name: warm, rate: 2, duration: 30s}, ...]` (a stage may
also give `rate_end` for a linear ramp inside it).

All stages of a run make one continuous open-loop schedule (`tokspeed.load.timeline`):
no gap and no drain between stages, arrivals of one process across boundaries. A
request belongs to the stage in which it was *scheduled*; each stage gets its own
summary in run.json (`benchmarks[i].stages`). Only rate stages exist: a closed loop
(`concurrency=N`) in stages is refused.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tokspeed.errors import ConfigError
from tokspeed.load.timeline import Segment, Window
from tokspeed.units import parse_duration

DEFAULT_RAMP_WINDOWS = 5
MAX_CONCURRENCY_STEPS = 100
_RAMP_RE = re.compile(r"^\s*(rate|concurrency)\s*=\s*([0-9.]+)\s*\.\.\s*([0-9.]+)\s*:\s*([^:]+?)\s*(?::\s*(steps|windows)\s*=\s*(\d+)\s*)?$")
STAGE_HINT = "use e.g. --stages 'warm:rate=2:30s,steady:rate=8:60s' (NAME: optional; rate=R:DURATION)"
RAMP_HINT = "use e.g. --ramp rate=1..20:60s (linear) or --ramp rate=1..20:60s:steps=5 (stepped)"


def _seconds(value: Any) -> float:
    return parse_duration(value)


class StageConfig(BaseModel):
    """One stage: a name, a rate (req/s, open loop) held for a duration, or ramped to `rate_end`."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    rate: float | None = Field(None, ge=0, description="requests per second at the stage's start (open loop)")
    duration_s: float = Field(gt=0, description="how long the stage lasts")
    rate_end: float | None = Field(None, ge=0, description="rate at the stage's end (linear in between)")
    concurrency: int | None = Field(None, ge=1, description="closed loop: this many requests in flight")

    @model_validator(mode="after")
    def _one_kind(self) -> StageConfig:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("a stage gives exactly one of rate and concurrency")
        if self.concurrency is not None and self.rate_end is not None:
            raise ValueError("rate_end applies to rate stages only")
        return self

    @field_validator("duration_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return _seconds(v)


def stages_value(value: Any) -> Any:
    """The scenario/flag value of `stages` as a list of dicts (a `--stages` string is parsed)."""
    if isinstance(value, str):
        return parse_stages(value)
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict) and "duration" in item and "duration_s" not in item:
                item = {**item, "duration_s": item["duration"]}
                del item["duration"]
            out.append(item)
        return out
    return value


def parse_stages(text: str) -> list[dict[str, Any]]:
    """`[NAME:]rate=R:DURATION,...` -> [{"name", "rate", "duration_s"}, ...]."""
    items = [p.strip() for p in text.split(",") if p.strip()]
    if not items:
        raise ConfigError(f"--stages {text!r} names no stage", hint=STAGE_HINT)
    return [_parse_stage(item, k) for k, item in enumerate(items, 1)]


def _parse_stage(item: str, k: int) -> dict[str, Any]:
    parts = [p.strip() for p in item.split(":")]
    name = None
    if parts and "=" not in parts[0]:
        name, parts = parts[0], parts[1:]
    if len(parts) != 2 or "=" not in parts[0]:
        raise ConfigError(f"--stages: cannot read stage {item!r}", hint=STAGE_HINT)
    key, _, value = (s.strip() for s in parts[0].partition("="))
    if key not in ("rate", "concurrency"):
        raise ConfigError(f"--stages: stage {item!r} must give rate=R or concurrency=N", hint=STAGE_HINT)
    try:
        number: float = float(value) if key == "rate" else int(value)
    except ValueError:
        raise ConfigError(f"--stages: {key} {value!r} in {item!r} is not a number", hint=STAGE_HINT) from None
    return {"name": name or f"stage {k}", key: number, "duration_s": _seconds(parts[1])}


def parse_ramp(text: str) -> tuple[list[dict[str, Any]], int]:
    """`rate=A..B:DURATION[:steps=N|:windows=N]` -> (stage dicts, windows reported per stage).

    Stepped: step j of N (0-based) runs at A + (B − A)·j/(N − 1) for DURATION/N (N = 1: A).
    Linear: one stage from A to B, reported in N windows (default 5), each named "ramp j/N".
    """
    m = _RAMP_RE.match(text)
    if not m:
        raise ConfigError(f"cannot read --ramp {text!r}", hint=RAMP_HINT)
    what, a, b, dur = m.group(1), float(m.group(2)), float(m.group(3)), _seconds(m.group(4))
    how, count = m.group(5), int(m.group(6)) if m.group(6) else DEFAULT_RAMP_WINDOWS
    if count < 1:
        raise ConfigError(f"--ramp {text!r}: {how} must be at least 1", hint=RAMP_HINT)
    if what == "concurrency":  # a closed loop can only step: one step per width unless steps= says
        steps = count if how == "steps" else min(int(abs(b - a)) + 1, MAX_CONCURRENCY_STEPS)
        widths = [round(a + (b - a) * j / (steps - 1)) if steps > 1 else round(a) for j in range(steps)]
        if min(widths) < 1:
            raise ConfigError(f"--ramp {text!r}: concurrency must be at least 1", hint=RAMP_HINT)
        return [{"name": f"step {j + 1}/{steps}", "concurrency": w, "duration_s": dur / steps} for j, w in enumerate(widths)], 1
    if how == "steps":
        rates = [a + (b - a) * j / (count - 1) if count > 1 else a for j in range(count)]
        return [{"name": f"step {j + 1}/{count}", "rate": r, "duration_s": dur / count} for j, r in enumerate(rates)], 1
    return [{"name": "ramp", "rate": a, "rate_end": b, "duration_s": dur}], count


def closed_loop(stages: list[StageConfig]) -> bool:
    """True for concurrency stages; ConfigError when rate and concurrency stages are mixed."""
    kinds = {s.concurrency is not None for s in stages}
    if len(kinds) > 1:
        raise ConfigError("stages mix rate and concurrency: use one kind for the whole run", hint=STAGE_HINT)
    return kinds == {True}


def _names(stages: list[StageConfig]) -> list[str]:
    names = [s.name or f"stage {k}" for k, s in enumerate(stages, 1)]
    if len(set(names)) != len(names):
        raise ConfigError(f"stage names must differ: {', '.join(names)}", hint=STAGE_HINT)
    return names


def segments(stages: list[StageConfig]) -> list[Segment]:
    """The rate segments of validated rate stages (unnamed ones become "stage K")."""
    if not any((s.rate or 0) > 0 or (s.rate_end or 0) > 0 for s in stages):
        raise ConfigError("every stage has rate 0: nothing would be sent", hint=STAGE_HINT)
    return [
        Segment(name, s.duration_s, s.rate or 0.0, (s.rate or 0.0) if s.rate_end is None else s.rate_end)
        for name, s in zip(_names(stages), stages)
    ]


def closed_windows(stages: list[StageConfig]) -> list[Window]:
    """The windows of concurrency stages, back to back from 0."""
    out, start = [], 0.0
    for name, s in zip(_names(stages), stages):
        out.append(Window(name, start, start + s.duration_s, 0.0, 0.0, s.concurrency))
        start += s.duration_s
    return out


