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
"""

from __future__ import annotations

from statistics import median
from typing import Any

from tokspeed.records import RequestRecord

NS = 1e9


def _ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_ns is None else (r.first_token_ns - r.sent_ns) / NS


def _e2e(r: RequestRecord) -> float | None:
    return None if r.end_ns is None else (r.end_ns - r.sent_ns) / NS


def _p50(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(median(kept), 6) if kept else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def cold_start_figures(phases: dict[str, Any], records: list[RequestRecord], began_ns: int | None) -> dict[str, Any]:
    """The start phases, the first request's timings and the warm requests' medians (see the module docstring)."""
    out: dict[str, Any] = dict(phases)
    sent = [r for r in records if r.sent_ns]
    first = min(sent, key=lambda r: r.sent_ns) if sent else None
    warm = [r for r in sent if r is not first and not r.warmup and r.ok]
    out["first_request"] = None if first is None else {
        "index": first.index,
        "warmup": first.warmup,
        "ok": first.ok,
        "ttft_s": _round(_ttft(first)),
        "e2e_s": _round(_e2e(first)),
        "after_start_s": None if began_ns is None else _round((first.sent_ns - began_ns) / NS),
    }
    out["warm"] = {"requests": len(warm), "ttft_p50_s": _p50([_ttft(r) for r in warm]), "e2e_p50_s": _p50([_e2e(r) for r in warm])}
    first_token = None if first is None else first.first_token_ns
    out["first_token_after_s"] = None if first_token is None or began_ns is None else _round((first_token - began_ns) / NS)
    ttft, typical = (None if first is None else _ttft(first)), out["warm"]["ttft_p50_s"]
    out["first_ttft_excess_s"] = None if ttft is None or typical is None else _round(ttft - typical)
    return out


def add_cold_start(served: dict[str, Any], records: list[RequestRecord], began_ns: int | None) -> None:
    """Complete `served["extra"]["cold_start"]` (an in-process target's start phases) in place; else nothing."""
    extra = served.get("extra")
    phases = extra.get("cold_start") if isinstance(extra, dict) else None
    if isinstance(extra, dict) and isinstance(phases, dict):
        base = {k: phases[k] for k in ("load_s", "warmup_s", "other_s", "start_s") if k in phases}
        extra["cold_start"] = cold_start_figures(base, records, began_ns)
