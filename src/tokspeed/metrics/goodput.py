"""Goodput and SLO verdicts: judging completed requests and a summary against SLOs.

Per-request values come as one array per metric, one entry per completed
request, in the SLO's unit (ms, or tokens/s for `decode`), NaN where the metric
does not apply. `itl` is the request's largest per-token ITL.

Formulas:

* a completed request is *good* when it meets every per-request threshold —
  those given (`ttft_ms<=500`) and those implied by stat SLOs
  (`ttft_p99_ms<=500` implies `ttft_ms<=500`; see `SLO.per_request_form`);
* a metric that does not apply to a request (NaN: e.g. TPOT of a one-token
  answer) does not fail that request, whatever the operator;
* goodput requests_per_s = good / window_s; fraction = good / completed.

SLO verdicts: `percentile` and `run` SLOs read the summary's flat value
(`Summary.flat()`); a `per_request` SLO observes the fraction of completed
requests meeting it and is met when that fraction is 1.0 (no completed
requests: observed None, not met).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from tokspeed.metrics.schema import Goodput, SLOResult
from tokspeed.metrics.slo import SLO


def implied_thresholds(slos: Sequence[SLO]) -> list[SLO]:
    """The distinct per-request thresholds `slos` give or imply, in first-seen order."""
    seen: dict[str, SLO] = {}
    for slo in slos:
        form = slo.per_request_form()
        if form is not None:
            seen.setdefault(str(form), form)
    return list(seen.values())


def meets(slo: SLO, values: np.ndarray) -> np.ndarray:
    """Per request: True where the value meets `slo` or the metric does not apply (NaN)."""
    with np.errstate(invalid="ignore"):
        passed: np.ndarray = np.isnan(values) | slo.compare(values, slo.value)
    return passed


def good_count(values: Mapping[str, np.ndarray], thresholds: Sequence[SLO], completed: int) -> int:
    """How many of the `completed` requests (one entry each in every array) meet every threshold."""
    good_mask = np.ones(completed, dtype=bool)
    for slo in thresholds:
        good_mask &= meets(slo, values[slo.metric])
    return int(good_mask.sum())


def goodput_of(good: int, thresholds: Sequence[SLO], completed: int, window_s: float | None) -> Goodput:
    """The Goodput of `good` requests out of `completed` over `window_s` seconds."""
    return Goodput(
        good=good,
        requests_per_s=good / window_s if window_s else None,
        fraction=good / completed if completed else None,
        slos=[str(s) for s in thresholds],
    )


def met_counts(slos: Sequence[SLO], values: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Per per-request SLO (by its text): how many requests meet it (NaN: the metric does not apply, met)."""
    return {str(s): int(meets(s, values[s.metric]).sum()) for s in slos if s.kind == "per_request"}


def judge_counts(
    slos: Sequence[SLO], flat: Mapping[str, float | None], met: Mapping[str, int], completed: int
) -> list[SLOResult]:
    """One verdict per SLO, in the order given, from the counts of requests meeting each per-request SLO (`met_counts`) out of `completed`."""
    return [_judge_one(slo, flat, met, completed) for slo in slos]


def _judge_one(slo: SLO, flat: Mapping[str, float | None], met: Mapping[str, int], completed: int) -> SLOResult:
    if slo.kind == "per_request":
        fraction = met[str(slo)] / completed if completed else None
        return SLOResult(slo=str(slo), kind="per_request", observed=fraction, met=fraction == 1.0)
    observed = flat.get(slo.name)
    kind: Literal["run", "percentile"] = "run" if slo.kind == "run" else "percentile"
    return SLOResult(slo=str(slo), kind=kind, observed=observed, met=slo.holds(observed))
