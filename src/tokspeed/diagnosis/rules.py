"""Run every rule over a result and its records; a rule that crashes becomes a finding, never an exception.

Entry points:

* `diagnose(result, records)` — offline (`tokspeed diagnose DIR`): every rule;
* `diagnose_point(...)` — the point rules over one load point's records (an iterable,
  read once) or their `PointDigest`, called by the runner as each point ends;
* `diagnose_result(result)` — the result rules (summaries, telemetry, the sweep),
  called by the runner once the run is saved.

`diagnose(result, records)` equals `ordered(diagnose_point(...) for each point +
diagnose_result(result))`, so a run's stored diagnosis and a later
`tokspeed diagnose` agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from tokspeed.diagnosis.client import client_bound
from tokspeed.diagnosis.connections import reconnects
from tokspeed.diagnosis.context import PointData
from tokspeed.diagnosis.digest import PointDigest, digest_point
from tokspeed.diagnosis.errors import errors
from tokspeed.diagnosis.gpu import gpu_underutilised
from tokspeed.diagnosis.load import (
    itl_load_growth,
    kv_cache_pressure,
    server_bound,
    throughput_knee,
    ttft_client_gap,
)
from tokspeed.diagnosis.stability import cold_start, too_few_samples, unstable
from tokspeed.diagnosis.tail import ttft_tail
from tokspeed.diagnosis.thresholds import DEFAULT, Thresholds
from tokspeed.diagnosis.tokens import output_length, token_count
from tokspeed.diagnosis.ttft import ttft_prefill, ttft_prefill_sweep, ttft_queueing
from tokspeed.records import RequestRecord
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding

PointRule = Callable[[PointData, Thresholds], list[Finding]]
ResultRule = Callable[[RunResult, Thresholds], list[Finding]]

POINT_RULES: tuple[tuple[str, PointRule], ...] = (
    ("errors", errors),
    ("output_length", output_length),
    ("token_count", token_count),
    ("cold_start", cold_start),
    ("ttft_prefill", ttft_prefill),
    ("reconnects", reconnects),
    ("ttft_tail", ttft_tail),
)
RESULT_RULES: tuple[tuple[str, ResultRule], ...] = (
    ("too_few_samples", too_few_samples),
    ("client_bound", client_bound),
    ("gpu_underutilised", gpu_underutilised),
    ("unstable", unstable),
    ("ttft_queueing", ttft_queueing),  # also says ttft_growth: TTFT grew with load, the server's queue empty
    ("ttft_prefill", ttft_prefill_sweep),
    ("ttft_client_gap", ttft_client_gap),
    ("itl_load_growth", itl_load_growth),
    ("throughput_knee", throughput_knee),
    ("kv_cache_pressure", kv_cache_pressure),
    ("server_bound", server_bound),
)
EXTRA_IDS = ("ttft_growth",)  # emitted by a rule listed under another name
RULE_IDS: tuple[str, ...] = tuple(dict.fromkeys([*(name for name, _ in (*POINT_RULES, *RESULT_RULES)), *EXTRA_IDS]))
FAILED_RULE = "diagnosis_error"
_RANK = {"critical": 0, "warning": 1, "info": 2}


def diagnose(result: RunResult, records: Iterable[RequestRecord], t: Thresholds = DEFAULT) -> list[Finding]:
    """Every finding for a saved run: point rules over each point's records, then the result rules.

    `records` (every point's, in any order) is read once, each record folded into its point's digest.
    """
    by_point: dict[int, PointDigest] = defaultdict(PointDigest)
    for r in records:
        by_point[r.benchmark].add(r)
    found: list[Finding] = []
    for i, bench in enumerate(result.benchmarks):
        found += diagnose_point(i, bench, by_point.get(i) or PointDigest(), result.config, t)
    return ordered([*found, *diagnose_result(result, t)])


def diagnose_point(
    index: int,
    bench: Benchmark,
    records: Iterable[RequestRecord] | PointDigest,
    config: Mapping[str, Any],
    t: Thresholds = DEFAULT,
) -> list[Finding]:
    """The point rules over one load point: its records (any iterable, read once, warm-up included),
    or their `digest_point` already built."""
    digest = records if isinstance(records, PointDigest) else _digest(records, index)
    if isinstance(digest, Finding):
        return [digest]
    data = PointData(index=index, bench=bench, records=None, config=config, given=digest)
    return [f for name, rule in POINT_RULES for f in _guarded(name, partial(rule, data, t), index)]


def diagnose_result(result: RunResult, t: Thresholds = DEFAULT) -> list[Finding]:
    """The result rules: summaries, telemetry and the sweep of run.json."""
    return [f for name, rule in RESULT_RULES for f in _guarded(name, partial(rule, result, t), None)]


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Critical first, then warnings, then info; within one severity, the run before its points, in point order."""
    return sorted(findings, key=lambda f: (_RANK.get(f.severity, 3), -1 if f.benchmark is None else f.benchmark))


def _digest(records: Iterable[RequestRecord], index: int) -> PointDigest | Finding:
    """The point's digest, or the finding that says reading its records failed (guarded like a rule)."""
    try:
        return digest_point(records)
    except Exception as exc:  # noqa: BLE001 - a bug in the digest must never cost the run its results
        return _failure("point", exc, index)


def _guarded(name: str, call: Callable[[], list[Finding]], index: int | None) -> list[Finding]:
    try:
        return list(call())
    except Exception as exc:  # noqa: BLE001 - a rule's bug must never cost the run its results
        return [_failure(name, exc, index)]


def _failure(name: str, exc: Exception, index: int | None) -> Finding:
    return Finding(
        rule=FAILED_RULE,
        severity="info",
        title=f"the {name} rule could not run: {type(exc).__name__}: {exc}"[:300],
        evidence={"failed_rule": name},
        advice="a bug in tokspeed's diagnosis, not in the measurement: please report it",
        benchmark=index,
    )
