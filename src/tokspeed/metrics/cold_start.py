"""Cold start apart from warm inference: the first request after an in-process model loads, against the warm ones.

    cold_start_figures(phases, records, began_ns) -> dict

`phases` is what the backend measured in start() (`backends.inprocess.start_phases`:
load_s, warmup_s, other_s, start_s). Added here, from the load point's records:

    first_request        the first request sent after start() (warm-up or not): its TTFT and E2E
    warm                 the measured, successful requests other than that one: how many, TTFT and E2E p50
    first_token_after_s  from the start of start() (loading the model) to the first request's first token:
                         what a user of a freshly started engine waits (start_s + the gap + that TTFT)
    first_ttft_excess_s  the first request's TTFT minus the warm p50 (what warm-up hides)

Figures in seconds; None where they do not apply (no successful request,
not streamed). Records are on the runner's monotonic clock, as is `began_ns`.

The records are read in one pass (`ColdStartTally.add`), keeping the earliest-sent request
apart and the warm ones' timings in bounded samples (`metrics.buffered`): the earliest is
known only at the end, so the one held apart joins the warm samples when an earlier one
turns up. Medians are `statistics.median` while the samples are exact (≤ 2^18 values).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tokspeed.metrics.buffered import BufferedSample
from tokspeed.records import RequestRecord
from tokspeed.stats.median import sample_median

NS = 1e9


def _ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_ns is None else (r.first_token_ns - r.sent_ns) / NS


def _e2e(r: RequestRecord) -> float | None:
    return None if r.end_ns is None else (r.end_ns - r.sent_ns) / NS


def _p50(sample: BufferedSample) -> float | None:
    value = sample_median(sample.read())
    return None if value is None else round(value, 6)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True, slots=True)
class _First:
    """What the figures need of the earliest-sent request."""

    index: int
    warmup: bool
    ok: bool
    sent_ns: int
    first_token_ns: int | None
    ttft: float | None
    e2e: float | None

    @property
    def warm(self) -> bool:
        return not self.warmup and self.ok


@dataclass(slots=True)
class ColdStartTally:
    """One pass over a load point's records: the earliest-sent request, and the warm ones' TTFT and E2E."""

    first: _First | None = None
    warm_requests: int = 0  # measured, ok and sent, the earliest-sent one left out
    warm_ttft: BufferedSample = field(default_factory=BufferedSample)
    warm_e2e: BufferedSample = field(default_factory=BufferedSample)

    def add(self, r: RequestRecord) -> None:
        if not r.sent_ns:
            return
        if self.first is not None and r.sent_ns >= self.first.sent_ns:  # ties: the first in file order stays
            if not r.warmup and r.ok:
                self._add_warm(_ttft(r), _e2e(r))
            return
        earlier = self.first
        self.first = _First(r.index, r.warmup, r.ok, r.sent_ns, r.first_token_ns, _ttft(r), _e2e(r))
        if earlier is not None and earlier.warm:  # no longer the first: a warm request like the others
            self._add_warm(earlier.ttft, earlier.e2e)

    def _add_warm(self, ttft: float | None, e2e: float | None) -> None:
        self.warm_requests += 1
        if ttft is not None:
            self.warm_ttft.append(ttft)
        if e2e is not None:
            self.warm_e2e.append(e2e)


def tally_cold_start(records: Iterable[RequestRecord]) -> ColdStartTally:
    """Read the records once."""
    tally = ColdStartTally()
    for r in records:
        tally.add(r)
    return tally


def cold_start_figures(
    phases: dict[str, Any], records: Iterable[RequestRecord] | ColdStartTally, began_ns: int | None
) -> dict[str, Any]:
    """The start phases, the first request's timings and the warm requests' medians (see the module docstring).

    `records`: the point's records (any iterable, read once) or a `ColdStartTally` already fed with them.
    """
    tally = records if isinstance(records, ColdStartTally) else tally_cold_start(records)
    out: dict[str, Any] = dict(phases)
    first = tally.first
    out["first_request"] = None if first is None else {
        "index": first.index,
        "warmup": first.warmup,
        "ok": first.ok,
        "ttft_s": _round(first.ttft),
        "e2e_s": _round(first.e2e),
        "after_start_s": None if began_ns is None else _round((first.sent_ns - began_ns) / NS),
    }
    out["warm"] = {"requests": tally.warm_requests, "ttft_p50_s": _p50(tally.warm_ttft), "e2e_p50_s": _p50(tally.warm_e2e)}
    first_token = None if first is None else first.first_token_ns
    out["first_token_after_s"] = None if first_token is None or began_ns is None else _round((first_token - began_ns) / NS)
    ttft, typical = (None if first is None else first.ttft), out["warm"]["ttft_p50_s"]
    out["first_ttft_excess_s"] = None if ttft is None or typical is None else _round(ttft - typical)
    return out


def add_cold_start(
    served: dict[str, Any], records: Iterable[RequestRecord] | ColdStartTally, began_ns: int | None
) -> None:
    """Complete `served["extra"]["cold_start"]` (an in-process target's start phases) in place; else nothing.

    `records` is read (once) only for an in-process target; a `ColdStartTally` (e.g. `PointDigest.cold`) is used as is.
    """
    extra = served.get("extra")
    phases = extra.get("cold_start") if isinstance(extra, dict) else None
    if isinstance(extra, dict) and isinstance(phases, dict):
        base = {k: phases[k] for k in ("load_s", "warmup_s", "other_s", "start_s") if k in phases}
        extra["cold_start"] = cold_start_figures(base, records, began_ns)
