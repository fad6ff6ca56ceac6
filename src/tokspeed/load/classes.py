"""Mixed workload classes: several arrival processes, each with its own workload and SLOs, in one run.

Scenario YAML:

    duration: 60s
    classes:
      - name: chat
        rate: 5                  # req/s, open loop
        arrival: poisson         # constant | poisson | gamma (burstiness: B)
        input_tokens: 256        # the class's workload (dataset, input_tokens, output_tokens;
        output_tokens: 128       #   unset ones are the run's)
        slo: ["ttft_ms<=300"]
      - name: summarise
        rate: 1
        input_tokens: 4000
        output_tokens: 400
        slo: ["e2e_ms<=30000"]

Class k draws its own schedule exactly as `--rate` would (`arrival_offsets_ns`),
with seed = run seed + 7919·(k + 1), for the run's duration or the class's own
`requests` count. The schedules are merged into one open-loop timeline (ties keep
class order); arrival i of the merged timeline is request index i and carries its
class's name. Each class is summarised on its own records against its own SLOs
(goodput per class); the run's summary covers all of them together.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokspeed.errors import ConfigError
from tokspeed.load.plan import arrival_offsets_ns
from tokspeed.load.timeline import Timeline
from tokspeed.metrics.slo import parse_slo

CLASS_SEED_STEP = 7919


class ClassConfig(BaseModel):
    """One workload class of a mixed run."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    rate: float = Field(gt=0, description="requests per second of this class (open loop)")
    arrival: str = Field("poisson", description="constant, poisson or gamma")
    burstiness: float = Field(1.0, gt=0)
    requests: int | None = Field(None, ge=1, description="this class's request count (else the run's duration)")
    dataset: str | None = None
    input_tokens: str | None = None
    output_tokens: str | None = None
    slo: list[str] = Field(default_factory=list, description="this class's SLOs (its goodput is judged on them)")

    @field_validator("arrival")
    @classmethod
    def _arrival(cls, v: str) -> str:
        if v not in ("constant", "poisson", "gamma"):
            raise ValueError(f"arrival must be constant, poisson or gamma, not {v!r}")
        return v

    @field_validator("input_tokens", "output_tokens", mode="before")
    @classmethod
    def _length_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v

    @field_validator("slo", mode="before")
    @classmethod
    def _slos(cls, v: Any) -> Any:
        items = [v] if isinstance(v, str) else v
        for s in items or []:
            parse_slo(s)
        return items


def check_classes(classes: list[ClassConfig]) -> None:
    names = [c.name for c in classes]
    if len(set(names)) != len(names):
        raise ConfigError(f"class names must differ: {', '.join(names)}")


def merged_timeline(
    classes: list[ClassConfig], duration_s: float | None, seed: int, requests: int | None = None
) -> Timeline:
    """Each class's schedule, merged by time (stable: ties keep class order).

    A class draws its own `requests`, else the run's `requests` (per class), else arrivals until `duration_s`.
    """
    check_classes(classes)
    parts, owners = [], []
    for k, c in enumerate(classes):
        n = c.requests if c.requests is not None else requests
        if n is None and duration_s is None:
            raise ConfigError(
                f"class {c.name!r} needs requests: N, or the run a duration",
                hint="set duration: 60s in the scenario (or --duration), or requests: in each class",
            )
        offsets = arrival_offsets_ns(c.rate, c.arrival, c.burstiness, n, duration_s, seed + CLASS_SEED_STEP * (k + 1))
        parts.append(offsets)
        owners.append(np.full(offsets.size, k, dtype=np.int64))
    offsets = np.concatenate(parts)
    owner = np.concatenate(owners)
    if duration_s is not None:  # a float sum can land a hair under the end: keep what the executor keeps
        keep = offsets < round(duration_s * 1_000_000_000)
        offsets, owner = offsets[keep], owner[keep]
    order = np.argsort(offsets, kind="stable")
    details = {"class_rates": {c.name: c.rate for c in classes}}
    return Timeline("classes", offsets[order], classes=[c.name for c in classes], class_of=owner[order], details=details)


def local_indices(class_of: np.ndarray, classes: int) -> np.ndarray:
    """Position of each arrival among its own class's arrivals (0, 1, 2, … per class)."""
    local = np.zeros(class_of.size, dtype=np.int64)
    for k in range(classes):
        mask = class_of == k
        local[mask] = np.arange(int(mask.sum()))
    return local
