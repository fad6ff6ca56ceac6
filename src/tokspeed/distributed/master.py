"""What a Locust master's run.json says: the profile, config, target and workload of a distributed run.

How Locust's load maps onto tokspeed's profiles (docs/scaling.md, "Distributed load with Locust"):
- U users, no rate: profile `concurrency` U, a closed loop: each user sends its next request
  as soon as the previous one ended, exactly like `tokspeed run --concurrency U`.
- U users and `--rate R`: profile `rate` R with constant (or `--arrival poisson`) arrivals and at
  most U in flight: one run-wide schedule, split over the workers (`distributed.arrivals`); when
  all of a worker's users are busy its next arrival waits (lateness grows) instead of being
  skipped, so add users when lateness does.
- rate stages (`--stages 'warm:rate=5:30s,peak:rate=10:30s'`, `--ramp rate=1..20:60s`): profile
  `stages` (open loop) as `tokspeed run --stages` draws it, at most U in flight, each request
  labelled with the stage it was scheduled in and each stage summarised on its own.
- concurrency stages (`--stages`, a stepped `--ramp`): profile `stages` (closed loop) with each
  stage's width, and a summary per stage (`benchmarks[0].stages`) as `tokspeed run` writes.
Users ramp up at Locust's spawn rate; requests started during the first `warmup_s` seconds
(default: the ramp, users/spawn rate) are warm-up and left out, and the measurement window runs
from the first measured request sent to the last end (`distributed.shaping`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokspeed.backends.credentials import redact_url
from tokspeed.distributed.merge import RecordMerger
from tokspeed.distributed.options import LocustOptions
from tokspeed.load.plan import LoadPlan
from tokspeed.results import RunResult, RunStatus, now_iso

if TYPE_CHECKING:
    from tokspeed.load.timeline import Timeline, Window

CLOCKS = ("per worker: each worker times its requests on its own monotonic clock and converts them to Unix-epoch "
          "ns with its own wall anchor (profile.distributed.workers[].wall_anchor_ns); durations never mix clocks, "
          "absolute times across workers are as aligned as the workers' wall clocks (use NTP)")


def stage_timeline(windows: Sequence[Window]) -> Timeline:
    """The concurrency windows as the Timeline that `tokspeed run`'s stages describe and group by."""
    import numpy as np

    from tokspeed.load.timeline import Timeline

    return Timeline("stages", np.zeros(0, dtype=np.int64), windows)


def profile_for(options: LocustOptions, users: int, windows: Sequence[Window] | None = None,
                timeline: Timeline | None = None) -> tuple[str, dict[str, Any]]:
    """The benchmark's name and profile for `users` Locust users under `options`: concurrency
    `windows`, a rate-stage `timeline` (its arrivals), a rate, or a closed loop of `users`."""
    if windows:
        closed = stage_timeline(windows)
        return f"{closed.label_text()} (locust)", closed.describe()
    if timeline is not None:
        profile = {**timeline.describe(), "arrival": options.arrival, "max_concurrency": users}
        return f"{timeline.label_text()} {options.arrival}, max {users} in flight (locust)", profile
    if options.rate > 0:
        plan = LoadPlan(kind="rate", workers=users, rate=options.rate, arrival=options.arrival)
        return f"{plan.label()} (locust)", plan.describe()
    return f"concurrency {users} (locust)", {"kind": "concurrency", "concurrency": users}


def open_merger(options: LocustOptions, host: str | None, facts: dict[str, Any]) -> RecordMerger | None:
    """The master's results directory (None without --tokspeed-out), run.json saying "running"."""
    if not options.out:
        return None
    skeleton = RunResult.model_validate({
        "started_at": now_iso(),
        "config": _config(options, host, facts),
        "environment": _environment(facts),
        "target": _target(options, host, options.model),
        "workload": _workload(options),
    })
    return RecordMerger(Path(options.out), skeleton, overwrite=options.overwrite, facts=facts)


def finish_run(
    merger: RecordMerger,
    options: LocustOptions,
    ran_s: float | None = None,
    failures: Sequence[str] = (),
    windows: Sequence[Window] | None = None,
    timeline: Timeline | None = None,
) -> RunResult:
    """Summarise what arrived and write run.json (again, if late batches came in).

    `ran_s`, how long the test ran: a run that ended more than a second before its run time
    (a signal, the last worker gone) is "interrupted", else "complete" — and complete when the
    `--requests` count arrived. `failures`: workers that could not start, and why (with no
    measured record the run failed, for those reasons). `windows`: concurrency stages, and
    `timeline`: rate stages' arrivals, each stage summarised on its own.
    """
    facts = merger.facts
    users = int(facts.get("users") or options.users or 0)
    name, profile = profile_for(options, users, windows, timeline)
    profile["distributed"] = {"engine": "locust", "locust_version": facts.get("locust_version"), "clocks": CLOCKS}
    if facts.get("warmup_s") is not None:
        profile["warmup_s"] = float(facts["warmup_s"])
    if options.requests > 0:
        profile["requests"] = options.requests
    if merger.model is not None and merger.result.target.get("model") is None:
        merger.result = merger.result.model_copy(
            update={"target": {**merger.result.target, "model": merger.model}})
    run_time = float(facts.get("run_time") or 0)
    reached = options.requests > 0 and merger.measured >= options.requests
    cut = run_time and ran_s is not None and ran_s < run_time - 1.0
    status: RunStatus = "interrupted" if cut and not reached else "complete"
    return merger.finish(name, profile, status, failures, stage_timeline(windows) if windows else timeline)


def _config(options: LocustOptions, host: str | None, facts: dict[str, Any]) -> dict[str, Any]:
    from tokspeed.distributed.arrivals import rate_stage_items

    users = int(facts.get("users") or options.users or 0)
    paced = options.rate > 0 or rate_stage_items(options.stages, options.ramp) is not None
    return {
        "target": redact_url(host) if host else None,
        "profile": "rate" if paced else "concurrency",
        "concurrency": users,
        "rate": options.rate or None,
        "arrival": options.arrival if paced else None,
        "api": options.api,
        "model": options.model,
        "dataset": options.dataset,
        "input_tokens": options.input_tokens,
        "output_tokens": options.output_tokens,
        "seed": options.seed,
        "timeout_s": options.timeout_s,
        "include_usage": options.include_usage,
        "warmup_s": facts.get("warmup_s"),
        "requests": options.requests or None,
        "stages": options.stages,
        "ramp": options.ramp,
        "engine": "locust",
        "locust": {k: v for k, v in facts.items() if k != "locust_version"},
    }


def _target(options: LocustOptions, host: str | None, model: str | None) -> dict[str, Any]:
    return {"kind": "openai-http", "url": redact_url(host) if host else None, "model": model, "api": options.api,
            "stream": True, "include_usage": options.include_usage}


def _environment(facts: dict[str, Any]) -> dict[str, Any]:
    from tokspeed.telemetry.environment import capture_environment

    env = capture_environment()
    env["role"] = "locust master (load generated by the workers listed in the profile)"
    env["locust_version"] = facts.get("locust_version")
    return env


def _workload(options: LocustOptions) -> dict[str, Any]:
    from tokspeed.errors import TokspeedError

    try:
        workload = options.workload()
    except TokspeedError as exc:  # e.g. a prompt file present on the workers only
        return {"name": options.dataset, "note": f"not readable on the master: {exc}"}
    return workload.describe()
