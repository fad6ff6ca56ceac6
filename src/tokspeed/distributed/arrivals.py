"""When a paced Locust run's requests are due: one run-wide arrival schedule, split over the workers.

With `--rate R` (or rate stages) the master and every worker draw the same schedule from the
same settings: the load plan of `tokspeed run` (`load.plan`: constant gaps 1/R, or Poisson gaps
rescaled to offer exactly R) or the rate stages' timeline (`load.timeline.segment_schedule`), as
offsets from one start instant that the master picks at the test start (Unix-epoch ns, sent to
the workers with its options). Worker w of W takes the arrivals n ≡ w (mod W), so the workers'
shares interleave and their union, which is what the server sees, is the schedule itself: gaps
1/R apart for a constant rate, exponential ones for Poisson, each stage at its own rate.

Inside a worker the users share that worker's arrivals: a free user claims the next one and
sends it when it is due, so the users are only the cap on requests in flight (like `tokspeed
run --rate R --max-concurrency U`); an arrival no user was free for is sent late, and its
lateness is measured. Two exceptions keep the start from bursting: arrivals due before the
worker's first claim (its users did not exist yet) are skipped, and so is a warm-up arrival
already past when claimed (the spawn ramp). The schedule's end ends the worker's sending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tokspeed.distributed.options import LocustOptions
from tokspeed.distributed.shaping import stage_configs
from tokspeed.errors import ConfigError
from tokspeed.load.plan import LoadPlan
from tokspeed.load.stages import StageConfig, closed_loop, segments
from tokspeed.load.timeline import Timeline, segment_schedule

ARRIVALS = ("constant", "poisson")
SCHEDULE_LEAD_S = 0.25  # the schedule starts this long after the master's test start: the spawn messages' trip
DEFAULT_HORIZON_S = 3600.0  # a schedule without a run time (plain Locust, no --run-time) is drawn this far


def rate_stage_items(stages: str | None, ramp: str | None) -> tuple[list[StageConfig], int] | None:
    """The rate stages of `--stages`/`--ramp` and the windows per stage (None: none, or concurrency stages)."""
    parsed = stage_configs(stages, ramp)
    return None if parsed is None or closed_loop(parsed[0]) else parsed


def check_arrival(arrival: str) -> str:
    name = arrival.strip().lower()
    if name not in ARRIVALS:
        raise ConfigError(f"unknown arrival process {arrival!r}", hint="use constant or poisson")
    return name


@dataclass(frozen=True)
class Schedule:
    """The run-wide arrivals: offsets from the start (ns, non-decreasing), each one's stage (or none)."""

    offsets_ns: np.ndarray
    timeline: Timeline | None = None  # rate stages: the windows and each arrival's window

    @classmethod
    def draw(cls, rate: float, arrival: str, seed: int, duration_s: float,
             stages: str | None = None, ramp: str | None = None) -> Schedule:
        """`rate` (arrivals/s) for `duration_s`, or the rate stages of `stages`/`ramp`, drawn from `seed`."""
        arrival = check_arrival(arrival)
        staged = rate_stage_items(stages, ramp)
        if staged is not None:
            configs, windows = staged
            offsets, wins, window_of = segment_schedule(segments(configs), arrival, 1.0, seed, windows)
            return cls(offsets, Timeline("stages", offsets, wins, window_of))
        plan = LoadPlan(kind="rate", rate=rate, arrival=arrival)
        return cls(plan.arrivals_ns(None, duration_s if duration_s > 0 else DEFAULT_HORIZON_S, seed))

    def stage_of(self, n: int) -> str | None:
        """The stage arrival `n` falls in (None without stages)."""
        tl = self.timeline
        if tl is None or tl.window_of is None:
            return None
        return tl.windows[int(tl.window_of[n])].name

    def share(self, worker: int, workers: int) -> np.ndarray:
        """The arrival numbers worker `worker` of `workers` sends: n ≡ worker (mod workers)."""
        workers = max(workers, 1)
        return np.arange(worker % workers, len(self.offsets_ns), workers, dtype=np.int64)


def schedule_for(options: LocustOptions) -> Schedule | None:
    """The run's arrival schedule: --rate or rate stages (None: a closed loop, or concurrency stages)."""
    if options.rate <= 0 and rate_stage_items(options.stages, options.ramp) is None:
        return None
    return Schedule.draw(options.rate, options.arrival, options.seed, options.duration_s, options.stages, options.ramp)


@dataclass(frozen=True)
class Slot:
    """One claimed arrival: its number in the schedule, when it is due (this worker's clock), its stage."""

    n: int
    due_ns: int
    stage: str | None


@dataclass
class WorkerArrivals:
    """A worker's share of the schedule, claimed one arrival at a time by its free users.

    `start_ns` is the schedule's start on this worker's monotonic clock; `warmup_until_ns` the
    end of the warm-up there (a warm-up arrival already past when claimed is skipped).
    """

    schedule: Schedule
    worker: int
    workers: int
    start_ns: int
    warmup_until_ns: int = 0
    _mine: np.ndarray = field(init=False, repr=False)
    _next: int = field(default=0, init=False)
    _claimed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._mine = self.schedule.share(self.worker, self.workers)

    def claim(self, now_ns: int) -> Slot | None:
        """The next arrival of this worker's share for a free user (None: the schedule has ended)."""
        offsets, mine = self.schedule.offsets_ns, self._mine
        if not self._claimed:  # nothing was sent before the first user asked: skip what is already due
            self._claimed = True
            self._next = int(np.searchsorted(offsets[mine], now_ns - self.start_ns, side="left"))
        while self._next < len(mine):
            n = int(mine[self._next])
            due = self.start_ns + int(offsets[n])
            self._next += 1
            if due < now_ns and due < self.warmup_until_ns:
                continue  # the spawn ramp: a warm-up arrival no user was there for is not sent late
            return Slot(n, due, self.schedule.stage_of(n))
        return None

    @property
    def left(self) -> int:
        return len(self._mine) - self._next
