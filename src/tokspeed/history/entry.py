"""What one results directory adds to the catalogue, read from its run.json alone.

`entry_from_dir(DIR)` is the only reader: the hook at the end of a run and `history import`
both call it, so a catalogue rebuilt by import holds exactly the rows the runs wrote. The
run's id is derived from the run itself (its start time and clock anchor), not from where the
directory lies, so a moved directory re-imported updates its row instead of adding a twin.

A point is one load point (`benchmarks[i]`); a capacity search adds one more, index -1, whose
figures are the search's result (`capacity_requests_per_s`). Points are comparable across runs
when their `comparable` keys match: same metric definitions, same workload (API, streaming,
dataset, lengths, images, conversations, prefixes, trace, sampling), same load profile.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from tokspeed.backends.credentials import redact_url
from tokspeed.results import Benchmark, RunResult, load_run

# the figures a run's row carries as columns (its headline point's), in the order `history` lists them
HEADLINE: tuple[str, ...] = (
    "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "e2e_p50_ms", "e2e_p99_ms",
    "output_tokens_per_s", "requests_per_s", "error_rate",
)
# config fields that make two load points measure the same workload (beside the profile and metric spec)
WORKLOAD_KEYS: tuple[str, ...] = (
    "api", "stream", "dataset", "input_tokens", "output_tokens", "images", "image_size", "multi_turn", "think_time",
    "conversation_rate", "shared_prefix_groups", "shared_prefix_tokens", "prefix_reuse", "trace", "trace_speed",
    "trace_window", "extra_body", "temperature", "top_p", "stop",
)
CAPACITY_POINT = -1  # the index of a capacity search's own point


class PointEntry(BaseModel):
    """One load point of a run: its profile, what makes it comparable, every figure it has."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    profile: str = Field(description="readable profile: concurrency=8, rate=4 poisson, capacity by rate")
    comparable: str = Field(description="hash of metric spec + workload + profile: equal keys measure the same thing")
    workload: str = Field("", description="readable workload: chat · builtin · max_tokens 256")
    target: str | None = None
    model: str | None = None
    profile_json: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict, description="every finite flat figure (Summary.flat())")


class RunEntry(BaseModel):
    """One run: who was measured, when, under which tags, its headline figures and its points."""

    model_config = ConfigDict(frozen=True)

    id: str
    directory: str
    status: str
    command: str = Field(description="run, sweep or capacity")
    started_at: str
    finished_at: str | None = None
    target: str | None = None
    model: str | None = None
    server_version: str | None = None
    deployment_commit: str | None = None
    tool_version: str | None = None
    metric_spec: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    headline: dict[str, float | None] = Field(default_factory=dict)
    capacity_requests_per_s: float | None = None
    point_count: int = Field(0, description="load points (benchmarks) in run.json")
    points: list[PointEntry] = Field(default_factory=list)

    def redacted(self, clean: Callable[[Any], Any]) -> RunEntry:
        """This entry with every string passed through `clean` (a `Redactor.tree`), targets' passwords masked."""
        data = clean(self.model_dump())
        data["target"] = redact_url(data["target"]) if data.get("target") else data.get("target")
        for p in data["points"]:
            p["target"] = redact_url(p["target"]) if p.get("target") else p.get("target")
        return RunEntry.model_validate(data)


def entry_from_dir(directory: Path) -> RunEntry:
    """The catalogue entry of a results directory (ResultsError when it holds no readable run)."""
    result, _ = load_run(directory, with_records=False)
    return entry_from_result(result, directory)


def entry_from_result(result: RunResult, directory: Path) -> RunEntry:
    config = result.config
    target = _text(result.target.get("url")) or _text(config.get("target"))
    model = _text(result.target.get("model")) or _text(config.get("model"))
    points = [_point(i, b, result, target, model) for i, b in enumerate(result.benchmarks)]
    if result.capacity is not None:
        points.append(_capacity_point(result, target, model))
    headline = _headline_point(result)
    found = result.environment.get("server")
    server: dict[str, Any] = found if isinstance(found, dict) else {}
    entry = RunEntry(
        id=run_id(result, directory),
        directory=str(directory.absolute()),
        status=result.status,
        command="capacity" if result.capacity is not None else "sweep" if result.sweep is not None else "run",
        started_at=result.started_at,
        finished_at=result.finished_at,
        target=redact_url(target) if target else None,
        model=model,
        server_version=_text(result.target.get("server_version")) or _text(server.get("version")),
        deployment_commit=_text(config.get("deployment_commit")),
        tool_version=_text(result.tool.get("version")),
        metric_spec=result.metric_spec,
        tags={str(k): str(v) for k, v in (config.get("tags") or {}).items()},
        headline={name: _finite(headline.get(name)) for name in HEADLINE} if headline is not None else {},
        capacity_requests_per_s=_finite(result.capacity.requests_per_s) if result.capacity is not None else None,
        point_count=len(result.benchmarks),
        points=points,
    )
    return entry


def run_id(result: RunResult, directory: Path) -> str:
    """16 hex digits from the run itself (start time and clock anchor); from the path when run.json was lost."""
    if result.started_at != "unknown" and result.epoch_offset_ns:
        seed = f"{result.started_at}|{result.epoch_offset_ns}"
    else:
        seed = f"path|{directory.absolute()}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def _point(index: int, bench: Benchmark, result: RunResult, target: str | None, model: str | None) -> PointEntry:
    point_target = _text((bench.target or {}).get("url")) or target
    point_model = _text((bench.target or {}).get("model")) or model
    return PointEntry(
        index=index,
        name=bench.name,
        profile=profile_label(bench.profile),
        comparable=comparable_key(result, bench.profile),
        workload=workload_label(result.config),
        target=redact_url(point_target) if point_target else None,
        model=point_model,
        profile_json=bench.profile,
        metrics={k: f for k, v in bench.summary.flat().items() if (f := _finite(v)) is not None},
    )


def _capacity_point(result: RunResult, target: str | None, model: str | None) -> PointEntry:
    cap = result.capacity
    assert cap is not None
    profile = {"kind": "capacity", "by": cap.by, "slos": sorted(cap.slos), "precision": cap.precision}
    metrics = {
        "capacity_requests_per_s": _finite(cap.requests_per_s),
        "capacity_value": _finite(cap.value),
        "goodput_requests_per_s": _finite(cap.goodput_requests_per_s),
    }
    return PointEntry(
        index=CAPACITY_POINT, name="capacity", profile=profile_label(profile), comparable=comparable_key(result, profile),
        workload=workload_label(result.config),
        target=redact_url(target) if target else None, model=model, profile_json=profile,
        metrics={k: v for k, v in metrics.items() if v is not None},
    )


def _headline_point(result: RunResult) -> dict[str, float | None] | None:
    """The figures a run is listed with: its only point's, or a capacity search's best passing probe's."""
    if result.capacity is not None:
        passing = [p for p in result.capacity.probes if p.passed and p.value == result.capacity.value]
        if passing and 0 <= passing[-1].benchmark < len(result.benchmarks):
            return result.benchmarks[passing[-1].benchmark].summary.flat()
        return None
    if len(result.benchmarks) == 1:
        return result.benchmarks[0].summary.flat()
    return None


def comparable_key(result: RunResult, profile: Mapping[str, Any]) -> str:
    """12 hex digits of (metric spec, workload fields of the config, the point's profile)."""
    workload = {k: result.config.get(k) for k in WORKLOAD_KEYS}
    blob = orjson.dumps({"spec": result.metric_spec, "workload": workload, "profile": dict(profile)},
                        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(blob).hexdigest()[:12]


def profile_label(profile: Mapping[str, Any]) -> str:
    """`{"kind": "concurrency", "concurrency": 8}` -> `concurrency=8`; rate, capacity and the rest alike."""
    kind = str(profile.get("kind", "unknown"))
    if kind == "concurrency":
        return f"concurrency={profile.get('concurrency')}"
    if kind == "rate":
        if profile.get("all_at_once"):
            return "all at once"
        arrival = f" {profile['arrival']}" if profile.get("arrival") else ""
        return f"rate={_num(profile.get('rate'))}{arrival}"
    if kind == "capacity":
        return f"capacity by {profile.get('by')}"
    return kind


def workload_label(config: Mapping[str, Any]) -> str:
    """The workload in a few words: `chat · builtin · max_tokens 256`, `completions · synthetic · input 512 · max_tokens 64`."""
    parts = [str(config.get("api") or "?"), Path(str(config.get("dataset") or "?")).name]
    if config.get("input_tokens"):
        parts.append(f"input {config['input_tokens']}")
    parts.append(f"max_tokens {config.get('output_tokens') or '?'}")
    if not config.get("stream", True):
        parts.append("no stream")
    if config.get("multi_turn"):
        parts.append(f"{config['multi_turn']} turns")
    return " · ".join(parts)


def trended_points(run: RunEntry) -> list[PointEntry]:
    """The points a trend or a check follows: a capacity search's result, not its probes (whose rates vary by run)."""
    if run.command == "capacity":
        return [p for p in run.points if p.index == CAPACITY_POINT]
    return list(run.points)


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
