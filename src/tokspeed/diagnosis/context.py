"""What a rule looks at: one load point with its records, or the whole saved result.

Two kinds of rule (see `tokspeed.diagnosis.rules`):

* a point rule reads one load point's records (`PointData`): it runs as soon
  as the point ends, while its records are in memory, and again offline;
* a result rule reads only `run.json` (summaries, telemetry, the sweep), so it
  runs once the run is saved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokspeed.records import RequestRecord, Status
from tokspeed.results import Benchmark


@dataclass(frozen=True, slots=True)
class PointData:
    """One load point: its position in `benchmarks`, its summary, its records, the run's config."""

    index: int
    bench: Benchmark
    records: Sequence[RequestRecord]
    config: Mapping[str, Any]

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    @property
    def measured_ok(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup and r.status is Status.OK]

    @property
    def warmup_ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.warmup and r.status is Status.OK]


def share(part: int, whole: int) -> float:
    """part / whole, 0.0 for an empty whole."""
    return part / whole if whole else 0.0


def pct(x: float) -> str:
    """0.123 -> '12.3%'."""
    return f"{x * 100:.1f}%"
