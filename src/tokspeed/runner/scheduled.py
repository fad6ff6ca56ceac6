"""From a RunConfig to a scheduled load: its timeline, its plan and its workload (trace, stages, ramp, classes).

`timeline_from_config` draws the timeline (the same for every iteration: the
seed is the run's), `--requests N` keeping its first N arrivals (for classes
`requests` is per class); `scheduled_plan` is the point's LoadPlan;
`scheduled_workload` builds what request i sends. The parts that need no
config (nominal rates, `ClassedWorkload`) are in `tokspeed.load.setup`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.load.classes import ClassConfig, merged_timeline
from tokspeed.load.plan import LoadPlan
from tokspeed.load.setup import ClassedWorkload, first_arrivals
from tokspeed.load.stages import StageConfig, closed_loop, closed_windows, parse_ramp, segments
from tokspeed.load.timeline import Timeline, segment_schedule
from tokspeed.load.trace import load_replay


def timeline_from_config(cfg: RunConfig) -> Timeline | None:
    """The run's timeline, or None for an ordinary profile."""
    kind = cfg.scheduled
    if kind is None:
        return None
    if kind == "classes":
        assert cfg.classes is not None
        return merged_timeline(cfg.classes, cfg.duration_s, cfg.seed, cfg.requests)  # --requests: per class
    if kind == "trace":
        assert cfg.trace is not None
        timeline = load_replay(cfg.trace, cfg.trace_format, cfg.trace_speed, cfg.trace_window).timeline()
    else:
        stages, windows = _stages(cfg)
        if closed_loop(stages):  # concurrency stages: windows with widths, no precomputed arrivals
            return Timeline(kind, np.zeros(0, dtype=np.int64), closed_windows(stages))
        offsets, wins, window_of = segment_schedule(
            segments(stages), cfg.arrival.value, cfg.burstiness, cfg.seed, windows
        )
        timeline = Timeline(kind, offsets, wins, window_of)
    return first_arrivals(timeline, cfg.requests)


def _stages(cfg: RunConfig) -> tuple[list[StageConfig], int]:
    if cfg.ramp is not None:
        items, windows = parse_ramp(cfg.ramp)
        return [StageConfig(**s) for s in items], windows
    assert cfg.stages is not None
    return list(cfg.stages), 1


def scheduled_workload(cfg: RunConfig, build: Any) -> Any:
    """The workload of a scheduled run, or None for an ordinary one.

    `build(cfg)` builds an ordinary workload from a config (the CLI's `build_workload`);
    each class's workload is built from the run's config with the class's settings over it.
    """
    if cfg.trace is not None:
        from tokspeed.workload.trace_source import trace_workload

        replay = load_replay(cfg.trace, cfg.trace_format, cfg.trace_speed, cfg.trace_window)
        return trace_workload(replay.rows, cfg.trace, cfg.api.value, cfg.tokenizer, cfg.seed)
    if cfg.classes is None:
        return None
    timeline = timeline_from_config(cfg)
    assert timeline is not None
    workloads = [build(class_config(cfg, c)) for c in cfg.classes]
    return ClassedWorkload(timeline, workloads, list(cfg.classes))


def class_config(cfg: RunConfig, c: ClassConfig) -> RunConfig:
    """The run's config as class `c` sees it: its dataset, lengths and SLOs; an ordinary rate profile."""
    update: dict[str, Any] = {"classes": None, "slo": list(c.slo), "rate": c.rate}
    for key in ("dataset", "input_tokens", "output_tokens"):
        if getattr(c, key) is not None:
            update[key] = getattr(c, key)
    if c.input_tokens is not None and c.dataset is None:
        update["dataset"] = "synthetic"
    try:
        return cfg.model_copy(update=update)
    except Exception as exc:
        raise ConfigError(f"class {c.name!r}: {exc}") from exc


def scheduled_plan(cfg: RunConfig) -> LoadPlan:
    """The LoadPlan of a scheduled run: open loop (capped by max_concurrency), or concurrency stages."""
    timeline = timeline_from_config(cfg)
    if timeline is not None and timeline.closed:
        return LoadPlan(kind="concurrency", workers=cfg.concurrency, timeline=timeline)
    return LoadPlan(kind="rate", workers=cfg.max_concurrency, rate=cfg.rate, timeline=timeline)
