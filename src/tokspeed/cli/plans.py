"""What a `run`, `sweep` or `capacity` command line asks for beyond one load point.

Any of `--concurrency`, `--rate`, `--input-tokens`, `--max-tokens` given as a
list (`1,2,4,8`) is a sweep over that dimension, and so is `--target` given
more than once; `tokspeed sweep --auto` adapts its points; `tokspeed capacity`
searches for the highest load that meets the SLOs. The plan turns that into
the runner's point source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.load.capacity import Search, capacity_search
from tokspeed.load.sweep import auto_sweep, is_list, list_sweep, parse_values
from tokspeed.results import SweepInfo
from tokspeed.runner.run import PointSource
from tokspeed.runner.sweep import Build, ProbeSettings, capacity_points, sweep_points

_FLAGS = {"concurrency": "--concurrency", "rate": "--rate", "input_tokens": "--input-tokens", "output_tokens": "--max-tokens"}


@dataclass(frozen=True)
class SweepRequest:
    """The swept dimension and its values (None when nothing is a list), or --auto."""

    dimension: str | None = None
    values: list[Any] = field(default_factory=list)
    auto: bool = False

    def first(self, dimension: str, raw: str | None) -> str | None:
        """The flag's value for the base config: the first of the list when this is the swept one."""
        return str(self.values[0]) if dimension == self.dimension else raw


def sweep_request(targets: list[str] | None, concurrency: str | None, rate: str | None,
                  input_tokens: str | None, output_tokens: str | None, auto: bool) -> SweepRequest:
    lists = {d: v for d, v in (("concurrency", concurrency), ("rate", rate), ("input_tokens", input_tokens),
                                 ("output_tokens", output_tokens)) if is_list(v)}
    if len(lists) > 1:
        raise ConfigError(f"sweep one dimension at a time, not {' and '.join(_FLAGS[d] for d in lists)}")
    if auto and lists:
        raise ConfigError("--auto chooses its own points: drop the list from " + _FLAGS[next(iter(lists))])
    if not lists:
        return SweepRequest(auto=auto)
    dimension, text = next(iter(lists.items()))
    return SweepRequest(dimension=dimension, values=parse_values(text or "", dimension))


def int_value(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r} is not a whole number (or a list like 1,2,4)") from exc
    if value < 1:
        raise ConfigError(f"{flag} must be at least 1, not {value}")
    return value


def float_value(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r} is not a number (or a list like 1,2,4)") from exc
    if value <= 0:
        raise ConfigError(f"{flag} must be positive, not {value:g}")
    return value


class Plan(Protocol):
    def points(self, cfg: RunConfig, build: Build) -> PointSource: ...


@dataclass(frozen=True)
class SweepPlan:
    request: SweepRequest
    targets: list[str | None]

    def points(self, cfg: RunConfig, build: Build) -> PointSource:
        req = self.request
        info = SweepInfo(dimension=req.dimension, values=[float(v) for v in req.values], auto=req.auto,
                         targets=[t or "embedded" for t in self.targets])
        if req.auto:
            return sweep_points(cfg, self.targets, auto_sweep, build, info)
        if req.dimension is None:  # several targets, one load point each
            return sweep_points(cfg, self.targets, lambda: _same_point(cfg), build, info)
        return sweep_points(cfg, self.targets, lambda: list_sweep(req.dimension or "", req.values), build, info)


def _same_point(cfg: RunConfig):  # type: ignore[no-untyped-def]
    from tokspeed.load.sweep import Point
    from tokspeed.runner.run import plan_from_config

    yield Point(plan_from_config(cfg).label(), {})


@dataclass(frozen=True)
class CapacityPlan:
    by: Literal["rate", "concurrency"]
    precision: float
    start: float | None
    max_probes: int
    settings: ProbeSettings = ProbeSettings()

    def points(self, cfg: RunConfig, build: Build) -> PointSource:
        def search(start: float, floor: float | None) -> Search:
            return capacity_search(start, self.precision, self.max_probes, integer=self.by == "concurrency",
                                   max_value=self.settings.max_value, floor=floor)

        return capacity_points(cfg, self.by, search, self.start, build, self.settings)


@dataclass(frozen=True)
class Mode:
    """Which command is running: plain run (lists still sweep), sweep, or capacity."""

    command: Literal["run", "sweep", "capacity"] = "run"
    auto: bool = False
    capacity: CapacityPlan | None = None

    def plan(self, sweep: SweepRequest, targets: list[str | None], cfg: RunConfig) -> Plan | None:
        """The plan for this command line; usage errors are raised here, before any file is written."""
        if self.command == "capacity":
            if sweep.dimension or len(targets) > 1:
                raise ConfigError("capacity searches one target over load: give single values, not lists")
            if not any(s.kind != "per_request" for s in cfg.slos):
                raise ConfigError(
                    "capacity search needs at least one percentile or run-level SLO",
                    hint="e.g. --slo 'ttft_p99_ms<=500' --slo 'itl_p99_ms<=50'",
                )
            return self.capacity
        if sweep.dimension or sweep.auto or len(targets) > 1:
            return SweepPlan(sweep, targets)
        if self.command == "sweep":
            raise ConfigError(
                "nothing to sweep",
                hint="give a list (--concurrency 1,2,4,8, --rate 1,2,4, --input-tokens 128,512,2048) or --auto",
            )
        return None
