"""What a rule looks at: one load point's digest of its records, or the whole saved result.

Two kinds of rule (see `tokspeed.diagnosis.rules`):

* a point rule reads one load point (`PointData`): the bounded digest of its records
  (`tokspeed.diagnosis.digest`, one pass, no record kept), its summary and the config;
  it runs as soon as the point ends, and again offline;
* a result rule reads only `run.json` (summaries, telemetry, the sweep), so it
  runs once the run is saved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass
from typing import Any

from tokspeed.diagnosis.digest import PointDigest, digest_point
from tokspeed.records import RequestRecord
from tokspeed.results import Benchmark


@dataclass(frozen=True, slots=True)
class PointData:
    """One load point: its position in `benchmarks`, its summary, its records' digest, the run's config.

    Pass `records` (any iterable, read once here, warm-up included) or `given`, a digest
    already built (e.g. by the runner, shared with its checks); `digest` is the one in use.
    """

    index: int
    bench: Benchmark
    records: InitVar[Iterable[RequestRecord] | None]
    config: Mapping[str, Any]
    given: PointDigest | None = None

    def __post_init__(self, records: Iterable[RequestRecord] | None) -> None:
        if self.given is None:
            object.__setattr__(self, "given", digest_point(records if records is not None else ()))

    @property
    def digest(self) -> PointDigest:
        assert self.given is not None  # set by __post_init__
        return self.given


def share(part: int, whole: int) -> float:
    """part / whole, 0.0 for an empty whole."""
    return part / whole if whole else 0.0


def pct(x: float) -> str:
    """0.123 -> '12.3%'."""
    return f"{x * 100:.1f}%"
