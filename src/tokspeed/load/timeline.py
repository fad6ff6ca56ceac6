"""A precomputed open-loop schedule with labels: trace replay, stages and ramps, mixed classes.

A `Timeline` is the whole schedule of one iteration, drawn before the run: the
offset of every arrival from the phase start (ns, non-decreasing) and, per
arrival, the stage (time window) and the workload class it belongs to. The
open-loop executor sends arrival i at its offset, exactly as for `--rate`; the
runner stamps each finished record with its labels (`RequestRecord.stage`,
`RequestRecord.workload_class`), and the summaries are then grouped by them.

Rate segments (stages and ramps). A segment of duration D has a rate going
linearly from r0 to r1, so its cumulative rate is Λ(u) = r0·u + (r1 − r0)·u²/(2D)
for u in [0, D]. Arrivals are a unit-rate process in Λ-space mapped back to time
(time rescaling): constant arrivals at Λ = 0, 1, 2, …; Poisson arrivals at Λ = 0
then cumulative Exp(1) gaps; gamma arrivals the same with Gamma(B, 1/B) gaps.
Inverting Λ inside a segment: u = 2x / (r0 + √(r0² + 2(r1 − r0)x/D)) for Λ-mass x
into the segment. A constant-rate stage is a segment with r0 = r1; with constant
arrivals it holds exactly ⌈r·D⌉ arrivals (r·D when that is whole and the stage
starts on a whole Λ). The process runs on across segment boundaries (no restart
at a stage's start), so a stage boundary never bunches arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokspeed.records import RequestRecord

NS = 1_000_000_000
MAX_ARRIVALS = 10_000_000


@dataclass(frozen=True, slots=True)
class Segment:
    """A span of a rate schedule: `duration_s` long, the rate going linearly from `rate` to `rate_end`."""

    name: str
    duration_s: float
    rate: float
    rate_end: float

    @property
    def mass(self) -> float:
        """Expected arrivals in the segment: (r0 + r1)/2 · D."""
        return (self.rate + self.rate_end) / 2 * self.duration_s

    def time_at(self, x: np.ndarray) -> np.ndarray:
        """Seconds into the segment at which Λ reaches `x` (0 ≤ x ≤ mass); see the module docstring."""
        r0, d = self.rate, self.duration_s
        slope = (self.rate_end - r0) / d
        root = np.sqrt(np.maximum(r0 * r0 + 2 * slope * x, 0.0))
        denom = r0 + root
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(denom > 0, 2 * x / np.where(denom > 0, denom, 1.0), 0.0)
        return np.minimum(t, d)


@dataclass(frozen=True, slots=True)
class Window:
    """A labelled time window of the schedule (a stage, or one step of a ramp)."""

    name: str
    start_s: float
    end_s: float
    rate: float
    rate_end: float
    concurrency: int | None = None  # a closed-loop stage: this many requests in flight (rate unused)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "start_s": self.start_s, "end_s": self.end_s}
        if self.concurrency is not None:
            d["concurrency"] = self.concurrency
            return d
        d["rate"] = self.rate
        if self.rate_end != self.rate:
            d["rate_end"] = self.rate_end
        return d


class Timeline:
    """A drawn schedule: offsets (ns) and, per arrival, its window and class (indices, -1 = none)."""

    def __init__(
        self,
        kind: str,
        offsets_ns: np.ndarray,
        windows: Sequence[Window] = (),
        window_of: np.ndarray | None = None,
        classes: Sequence[str] = (),
        class_of: np.ndarray | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.offsets_ns = np.asarray(offsets_ns, dtype=np.int64)
        self.windows = tuple(windows)
        self.window_of = window_of
        self.classes = tuple(classes)
        self.class_of = class_of
        self.details = dict(details or {})

    def __len__(self) -> int:
        return int(self.offsets_ns.size)

    def offsets(self, n: int | None, duration_s: float | None) -> np.ndarray:
        """The first `n` offsets (all when None), cut to those before `duration_s` when given."""
        out = self.offsets_ns if n is None else self.offsets_ns[:n]
        if duration_s is not None:
            out = out[out < round(duration_s * NS)]
        return out

    def label(self, record: RequestRecord) -> None:
        """Stamp a measured record with its window (stage) and class names; warm-up records stay unlabelled."""
        i = record.index
        if record.warmup or not 0 <= i < len(self):
            return
        if self.window_of is not None and (w := int(self.window_of[i])) >= 0:
            record.stage = self.windows[w].name
        if self.class_of is not None and (c := int(self.class_of[i])) >= 0:
            record.workload_class = self.classes[c]

    def mean_rate(self) -> float | None:
        """Offered requests per second: (n − 1) / (last − first offset); None below two arrivals."""
        if len(self) < 2:
            return None
        span = int(self.offsets_ns[-1] - self.offsets_ns[0])
        return (len(self) - 1) * NS / span if span > 0 else None

    @property
    def closed(self) -> bool:
        """Concurrency stages: a closed loop of changing width (`tokspeed.runner.staged`), no offsets."""
        return any(w.concurrency is not None for w in self.windows)

    def describe(self) -> dict[str, Any]:
        """The profile as saved in run.json (open loop: the summary gets schedule metrics)."""
        if self.closed:
            return {
                "kind": self.kind,
                "open_loop": False,
                "concurrency": max(w.concurrency or 0 for w in self.windows),
                "duration_s": self.windows[-1].end_s,
                "stages": [w.describe() for w in self.windows],
            }
        d: dict[str, Any] = {
            "kind": self.kind,
            "open_loop": True,
            "rate": self.mean_rate(),
            "requests": len(self),
            "duration_s": self.windows[-1].end_s if self.windows else float(self.offsets_ns[-1]) / NS if len(self) else 0.0,
        }
        if self.windows:
            d["stages"] = [w.describe() for w in self.windows]
        if self.classes:
            d["classes"] = list(self.classes)
        d.update(self.details)
        return d

    def label_text(self) -> str:
        if self.kind == "trace":
            return f"trace {self.details.get('trace', '')} ({len(self)} requests)".replace("  ", " ")
        if self.kind == "classes":
            return f"classes {', '.join(self.classes)}"
        return f"{self.kind} {', '.join(w.name for w in self.windows)}"


def unit_arrivals(total: float, arrival: str, burstiness: float, seed: int) -> np.ndarray:
    """A unit-rate arrival process on [0, total): constant 0, 1, 2, …; Poisson/gamma from 0 with unit-mean gaps."""
    if total <= 0:
        return np.zeros(0)
    if arrival == "constant":
        return np.arange(0, math.ceil(total), dtype=np.float64)
    rng = np.random.default_rng(seed)
    chunks, last, count = [np.zeros(1)], 0.0, 1
    while last < total and count < MAX_ARRIVALS:
        n = int(total - last) + 64
        if arrival == "poisson":
            gaps = rng.exponential(1.0, n)
        elif arrival == "gamma":
            gaps = rng.gamma(burstiness, 1.0 / burstiness, n)
        else:
            raise ValueError(f"unknown arrival process {arrival!r}")
        part = last + np.cumsum(gaps)
        chunks.append(part)
        last, count = float(part[-1]), count + n
    x = np.concatenate(chunks)
    return x[x < total]


def segment_schedule(
    segments: Sequence[Segment], arrival: str, burstiness: float, seed: int, windows_per_segment: int = 1
) -> tuple[np.ndarray, list[Window], np.ndarray]:
    """(offsets in ns, the windows, each arrival's window index) for `segments` run back to back.

    With `windows_per_segment` k > 1, each segment is reported as k equal windows
    (a linear ramp's steps), named "NAME k/K".
    """
    masses = np.asarray([s.mass for s in segments], dtype=np.float64)
    bounds = np.concatenate(([0.0], np.cumsum(masses)))
    x = unit_arrivals(float(bounds[-1]), arrival, burstiness, seed)
    starts = np.concatenate(([0.0], np.cumsum([s.duration_s for s in segments])))
    seg = np.clip(np.searchsorted(bounds, x, side="right") - 1, 0, len(segments) - 1)
    times = np.empty_like(x)
    for k, s in enumerate(segments):
        mask = seg == k
        times[mask] = starts[k] + s.time_at(x[mask] - bounds[k])
    windows: list[Window] = []
    for k, s in enumerate(segments):
        parts = max(1, windows_per_segment)
        for j in range(parts):
            a, b = s.duration_s * j / parts, s.duration_s * (j + 1) / parts
            r_a = s.rate + (s.rate_end - s.rate) * a / s.duration_s
            r_b = s.rate + (s.rate_end - s.rate) * b / s.duration_s
            name = s.name if parts == 1 else f"{s.name} {j + 1}/{parts}"
            windows.append(Window(name, float(starts[k] + a), float(starts[k] + b), r_a, r_b))
    edges = np.asarray([w.start_s for w in windows[1:]], dtype=np.float64)
    window_of = np.searchsorted(edges, times, side="right").astype(np.int64)
    offsets = np.round(times * NS).astype(np.int64)
    return np.maximum.accumulate(offsets) if offsets.size else offsets, windows, window_of
