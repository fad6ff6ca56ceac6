"""A scheduled load's defaults and parts: the nominal rate, a mixed workload, the profile flags it refuses.

A scheduled run is an open-loop run (`profile: rate`) whose arrival times come
from a `Timeline` instead of one rate. `scheduled_defaults` (run while the config
is validated) sets `profile: rate` and, unless given, a nominal `rate` that sizes
the connection pool and the pre-opened connections: the highest stage or ramp
rate, the sum of the classes' rates, or a trace's mean replayed rate.
`ClassedWorkload` is what request i of a mixed run sends. What needs the whole
RunConfig (the timeline, the plan, the workload) is in `tokspeed.runner.scheduled`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tokspeed.errors import ConfigError
from tokspeed.load.classes import ClassConfig, local_indices
from tokspeed.load.stages import (
    parse_ramp,
    stages_value,
)
from tokspeed.load.timeline import Timeline
from tokspeed.load.trace import load_replay
from tokspeed.records import RequestSpec

KINDS = ("trace", "stages", "ramp", "classes")


def scheduled_defaults(data: Any) -> Any:
    """The raw config with profile "rate" and a nominal rate set, when it asks for a scheduled load."""
    if not isinstance(data, dict):
        return data
    given = [k for k in KINDS if data.get(k) is not None]
    if not given:
        return data
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} cannot be combined: pick one scheduled load")
    width = closed_width(given[0], data)
    # already resolved (a config rebuilt from its own dump, as --workers client processes do)
    resolved = width is not None and data.get("profile") == "concurrency" and data.get("concurrency") == width
    if not resolved and (data.get("concurrency") is not None or data.get("profile") in ("synchronous", "concurrency")):
        raise ValueError(f"{given[0]} sets its own load: drop concurrency / synchronous (stages may give concurrency=N)")
    other = [k for k in ("multi_turn", "conversation_rate", "shared_prefix_groups", "images") if data.get(k)]
    if other:
        raise ValueError(f"{given[0]} cannot be combined with {other[0]}: run them separately")
    out = dict(data)
    if width is not None:  # concurrency stages: a closed loop as wide as the widest stage
        out["profile"], out["concurrency"] = "concurrency", width
        return out
    out["profile"] = "rate"
    if out.get("rate") is None:
        out["rate"] = max(nominal_rate(given[0], out), 0.001)
    return out


def closed_width(kind: str, data: dict[str, Any]) -> int | None:
    """The widest concurrency stage, or None for rate stages (and traces, classes)."""
    if kind == "stages":
        items = stages_value(data["stages"])
    elif kind == "ramp":
        items, _ = parse_ramp(str(data["ramp"]))
    else:
        return None
    widths = [_get(s, "concurrency") for s in items]
    return max(int(w) for w in widths if w is not None) if any(w is not None for w in widths) else None


def nominal_rate(kind: str, data: dict[str, Any]) -> float:
    """Peak stage/ramp rate, total class rate, or a trace's mean replayed rate (req/s)."""
    if kind == "stages":
        items = stages_value(data["stages"])
        return max(max(_get(s, "rate") or 0.0, _get(s, "rate_end") or 0.0) for s in items)
    if kind == "ramp":
        items, _ = parse_ramp(str(data["ramp"]))
        return max(max(s.get("rate") or 0.0, s.get("rate_end") or 0.0) for s in items)
    if kind == "classes":
        return float(sum(_get(c, "rate") or 0.0 for c in data["classes"]))
    replay = load_replay(
        str(data["trace"]), str(data.get("trace_format") or "auto"), float(data.get("trace_speed") or 1.0),
        data.get("trace_window"),
    )
    return replay.timeline().mean_rate() or 1.0


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)




def first_arrivals(timeline: Timeline, n: int | None) -> Timeline:
    """The timeline's first `n` arrivals (`--requests N`); all of it when `n` is None."""
    if n is None or n >= len(timeline):
        return timeline
    cut = timeline.window_of[:n] if timeline.window_of is not None else None
    return Timeline(timeline.kind, timeline.offsets_ns[:n], timeline.windows, cut, details=timeline.details)


class ClassedWorkload:
    """Request i of a mixed run: its class's workload, at that class's own next position."""

    def __init__(self, timeline: Timeline, workloads: list[Any], classes: list[ClassConfig]) -> None:
        assert timeline.class_of is not None
        self._class_of = timeline.class_of
        self._local = local_indices(timeline.class_of, len(workloads))
        self._workloads = workloads
        self._classes = classes

    def request(self, index: int) -> RequestSpec:
        n = int(self._class_of.size)
        pos, wrap = index % n, index // n  # past the timeline (warm-up indices): wrap around
        k, local = int(self._class_of[pos]), int(self._local[pos]) + wrap * n
        spec: RequestSpec = self._workloads[k].request(local)
        return dataclasses.replace(spec, index=index)

    def describe(self) -> dict[str, object]:
        return {
            "name": "classes",
            "kind": "classes",
            "classes": {c.name: w.describe() for c, w in zip(self._classes, self._workloads)},
            "requests_per_class": {c.name: int(np.sum(self._class_of == k)) for k, c in enumerate(self._classes)},
        }





def refuse_profile_flags(rate: float | None, concurrency: int | None, synchronous: bool, **scheduled: str | None) -> None:
    """ConfigError when --rate, --concurrency or --synchronous comes with --trace, --stages or --ramp."""
    given = [f"--{k}" for k, v in scheduled.items() if v is not None]
    profile = [f for f, on in (("--rate", rate), ("--concurrency", concurrency), ("--synchronous", synchronous)) if on]
    if given and profile:
        raise ConfigError(
            f"{given[0]} sets its own arrival times: it cannot be combined with {profile[0]}",
            hint="drop the load profile flag (a trace, stages or a ramp is already an open-loop schedule)",
        )
