"""What a Locust run measures, and when: warm-up, a request count, concurrency stages.

Pure rules, no Locust here (the locustfiles apply them):

- Warm-up. Users start at Locust's spawn rate, so the first users/spawn_rate seconds run
  below the asked concurrency. By default that ramp is warm-up: a request *started* before
  the worker's test start + `warmup_s` is recorded with `warmup=True` (iteration 0) and left
  out of every statistic, as `tokspeed run`'s warm-up requests are. `--warmup-s 0` measures
  the ramp. With stages the default is 0 (like `tokspeed run --stages`): each stage's own
  ramp is part of what a staged run measures.
- Request count. `--requests N` is exact and simple: worker w of W (Locust's worker index,
  0-based, W counted at the test start) sends N // W measured requests, one more when
  w < N % W, so the measured requests add up to N; a user whose worker's share is used up
  idles. The master stops the run when N measured records have arrived (all of them
  finished, none cut), or at `--duration`, which still caps the run.
- Stages. `--stages 'warm:concurrency=4:10s,peak:concurrency=16:20s'` (or a stepped
  `--ramp concurrency=1..16:40s:steps=4`) becomes a Locust LoadTestShape: stage k holds its
  width in users for its duration, users changing at the master's spawn rate. Rate stages
  (`--stages 'warm:rate=5:30s,peak:rate=10:30s'`, `--ramp rate=1..20:60s`) need no shape: they
  are an arrival schedule (`distributed.arrivals`) that the users, a fixed cap on requests in
  flight, follow.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokspeed.errors import ConfigError
from tokspeed.load.stages import (
    STAGE_HINT,
    StageConfig,
    closed_loop,
    closed_windows,
    parse_ramp,
    stages_value,
)
from tokspeed.load.timeline import Window

LOCUST_STAGE_HINT = ("use e.g. --stages 'warm:rate=5:30s,peak:rate=10:30s' (the users cap the requests in flight), "
                     "--stages 'warm:concurrency=4:10s,peak:concurrency=16:20s' or --ramp concurrency=1..16:40s:steps=4")


def default_warmup_s(users: int, spawn_rate: float | None, staged: bool) -> float:
    """The spawn ramp, users / spawn_rate seconds (0 with stages, or without users or a spawn rate)."""
    if staged or users <= 0 or not spawn_rate or spawn_rate <= 0:
        return 0.0
    return users / spawn_rate


def worker_quota(total: int, workers: int, index: int) -> int:
    """Worker `index`'s share of `total` measured requests over `workers` workers (the shares add up to total)."""
    if total <= 0 or workers <= 0 or not 0 <= index < workers:
        return 0
    return total // workers + (1 if index < total % workers else 0)


@dataclass
class Quota:
    """How many measured requests a worker may still start (None: no limit)."""

    left: int | None = None

    def claim(self) -> bool:
        """Take one request from the share; False once it is used up."""
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


@dataclass(frozen=True)
class WarmupClock:
    """A worker's warm-up: requests scheduled before `until_ns` (its monotonic clock) are warm-up."""

    until_ns: int

    @classmethod
    def starting(cls, start_ns: int, warmup_s: float) -> WarmupClock:
        return cls(until_ns=start_ns + round(max(warmup_s, 0.0) * 1e9))

    def warm(self, scheduled_ns: int) -> bool:
        return scheduled_ns < self.until_ns


def stage_configs(stages: str | None, ramp: str | None) -> tuple[list[StageConfig], int] | None:
    """The stages of `--stages` or `--ramp` and the report windows per stage (None without; ConfigError when bad)."""
    if stages and ramp:
        raise ConfigError("--stages and --ramp cannot be combined: pick one", hint=LOCUST_STAGE_HINT)
    if ramp:
        items, windows = parse_ramp(ramp)
    elif stages:
        items, windows = stages_value(stages), 1
    else:
        return None
    try:
        return [StageConfig(**item) for item in items], windows
    except ValueError as exc:
        raise ConfigError(f"stages: {exc}", hint=STAGE_HINT) from None


def locust_stages(stages: str | None, ramp: str | None) -> list[Window]:
    """The concurrency windows of `--stages` or `--ramp` ([] without, or for rate stages; ConfigError when bad)."""
    parsed = stage_configs(stages, ramp)
    if parsed is None or not closed_loop(parsed[0]):  # closed_loop refuses a mix of rate and concurrency
        return []
    return closed_windows(parsed[0])


@dataclass(frozen=True)
class StagePlan:
    """Concurrency windows back to back from the shape's start: which one holds at t seconds."""

    windows: tuple[Window, ...]

    def at(self, t_s: float) -> int | None:
        """The index of the stage holding at `t_s` seconds (None once the last has ended)."""
        for k, w in enumerate(self.windows):
            if t_s < w.end_s:
                return k
        return None

    @property
    def duration_s(self) -> float:
        return self.windows[-1].end_s if self.windows else 0.0

    @property
    def max_users(self) -> int:
        return max((w.concurrency or 0 for w in self.windows), default=0)
