"""A metric's series across catalogued runs, one per comparable point (same target, model, workload, profile)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokspeed.history.entry import RunEntry, trended_points


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One run's value of the metric at one comparable point."""

    run_id: str
    started_at: str
    value: float
    status: str
    directory: str
    deployment_commit: str | None
    server_version: str | None
    tags: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Series:
    """The metric over time at one comparable point, oldest first."""

    metric: str
    target: str | None
    model: str | None
    profile: str
    comparable: str
    points: tuple[SeriesPoint, ...]
    workload: str = ""

    @property
    def label(self) -> str:
        return " · ".join(x for x in (self.target or "?", self.model or "?", self.profile, self.workload) if x)


def series(runs: Sequence[RunEntry], metric: str) -> list[Series]:
    """Every comparable point's series of `metric` (runs as `Catalogue.runs(with_points=True)` gives them)."""
    groups: dict[tuple[str | None, str | None, str], list[SeriesPoint]] = {}
    profiles: dict[tuple[str | None, str | None, str], tuple[str, str]] = {}
    for run in sorted(runs, key=lambda r: (r.started_at, r.id)):
        for p in trended_points(run):
            value = p.metrics.get(metric)
            if value is None:
                continue
            key = (p.target, p.model, p.comparable)
            profiles.setdefault(key, (p.profile, p.workload))
            groups.setdefault(key, []).append(SeriesPoint(
                run_id=run.id, started_at=run.started_at, value=value, status=run.status, directory=run.directory,
                deployment_commit=run.deployment_commit, server_version=run.server_version,
                tags=tuple(sorted(run.tags.items())),
            ))
    out = [Series(metric, t, m, profiles[(t, m, c)][0], c, tuple(pts), profiles[(t, m, c)][1])
           for (t, m, c), pts in groups.items()]
    return sorted(out, key=lambda s: (-len(s.points), s.label))
