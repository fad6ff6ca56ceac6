"""Summaries per stage and per workload class of a scheduled load point, and per model of a model mix.

A scheduled point (`tokspeed.load.timeline`) labels each measured record with
its stage (`RequestRecord.stage`: the window it was *scheduled* in) and its class
(`RequestRecord.workload_class`). Each group gets an ordinary `Summary` over its
own records, so every metric of a point exists per stage and per class:

* stage: the summary of (records of the stage, the run's SLOs, target rate) where the
  target rate is the window's mean rate, (r_start + r_end)/2 (none for a concurrency
  stage, a closed loop: no schedule metrics); its window_s and
  throughput are over the stage's own requests (first sent to last finished, which
  may run past the stage's end);
* class: the summary of (records of the class, the class's SLOs, the class's rate), so
  its goodput judges each request against its own class's thresholds;
* classes together (`classes_goodput`): good = Σ good of each class (a class
  without SLOs counts each completed request as good), requests_per_s = good /
  the point's window_s, fraction = good / Σ completed; None when no class has SLOs;
* model (a model mix, `RequestRecord.model`): the summary of (records that asked for the model, the
  run's SLOs), any load profile; its window_s and throughput are over the model's own requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tokspeed.metrics.schema import Goodput
from tokspeed.metrics.slo import parse_slo
from tokspeed.metrics.summary import SummaryBuilder
from tokspeed.records import RequestRecord
from tokspeed.results.run_json import Benchmark, GroupResult

if TYPE_CHECKING:
    from tokspeed.config import RunConfig
    from tokspeed.load.timeline import Timeline, Window


def add_groups(bench: Benchmark, timeline: Timeline, records: Iterable[RequestRecord], cfg: RunConfig) -> None:
    """Fill `bench.stages`, `bench.classes` and `bench.classes_goodput` from the labelled records (one pass)."""
    groups = GroupSummaries(timeline, cfg)
    for r in records:
        groups.add(r)
    groups.fill(bench)


class GroupSummaries:
    """A summary per stage and per class of a scheduled point, fed one record at a time (e.g. in the point's pass)."""

    def __init__(self, timeline: Timeline, cfg: RunConfig) -> None:
        self._timeline, self._cfg = timeline, cfg
        self._stages = {w.name: SummaryBuilder(cfg.slos, _target(w)) for w in timeline.windows}
        self._classes = (
            {c.name: SummaryBuilder([parse_slo(s) for s in c.slo], c.rate) for c in cfg.classes}
            if timeline.classes and cfg.classes
            else {}
        )

    def add(self, r: RequestRecord) -> None:
        if r.warmup:
            return
        if (stage := self._stages.get(r.stage or "")) is not None:
            stage.add(r)
        if (group := self._classes.get(r.workload_class or "")) is not None:
            group.add(r)

    def fill(self, bench: Benchmark) -> None:
        """Set `bench.stages`, `bench.classes` and `bench.classes_goodput` (after `bench.summary` exists)."""
        windows, classes = self._timeline.windows, self._classes
        if windows:
            bench.stages = {w.name: GroupResult(profile=w.describe(), summary=self._stages[w.name].summary()) for w in windows}
        if classes:
            bench.classes = {
                c.name: GroupResult(
                    profile={"rate": c.rate, "arrival": c.arrival, "slo": list(c.slo)}, summary=classes[c.name].summary()
                )
                for c in self._cfg.classes or ()
            }
            bench.classes_goodput = together(bench.classes, bench.summary.window_s)


def _target(w: Window) -> float | None:
    """A rate window's mean rate, (r_start + r_end)/2; None for a concurrency stage (closed loop)."""
    return None if w.concurrency is not None else (w.rate + w.rate_end) / 2


def together(classes: dict[str, GroupResult], window_s: float | None) -> Goodput | None:
    """Goodput of all classes at once, each judged on its own SLOs (see the module docstring)."""
    if not any(g.summary.goodput is not None for g in classes.values()):
        return None
    good = sum(
        g.summary.goodput.good if g.summary.goodput is not None else g.summary.requests.completed
        for g in classes.values()
    )
    completed = sum(g.summary.requests.completed for g in classes.values())
    slos = [f"{name}: {s}" for name, g in classes.items() if g.summary.goodput is not None for s in g.summary.goodput.slos]
    return Goodput(
        good=good,
        requests_per_s=good / window_s if window_s else None,
        fraction=good / completed if completed else None,
        slos=slos,
    )


class ModelSummaries:
    """A summary per model of a model mix (`--model a=3,b=1`), fed one record at a time."""

    def __init__(self, cfg: RunConfig) -> None:
        models = cfg.models or []
        total = sum(m.weight for m in models)
        self._profiles = {
            m.name: {"weight": m.weight, "share": m.weight / total, "policy": cfg.model_policy} for m in models
        }
        self._builders = {m.name: SummaryBuilder(cfg.slos) for m in models}

    def add(self, r: RequestRecord) -> None:
        if not r.warmup and (builder := self._builders.get(r.model or "")) is not None:
            builder.add(r)

    def fill(self, bench: Benchmark) -> None:
        """Set `bench.models`: each model's share asked for, and the summary of its requests."""
        bench.models = {
            name: GroupResult(profile=self._profiles[name], summary=b.summary()) for name, b in self._builders.items()
        }
