"""The checker: run tokspeed's real HTTP backend against each scripted scenario and compare every metric.

Each scenario is one request through `OpenAIHTTPBackend` (the backend `tokspeed
run` uses, over real loopback HTTP) to the `ScriptedServer`; the record is then
measured with the same per-request formulas the summaries use
(`tokspeed.metrics.request`) and compared with the scenario's `Expected` values.

Tolerances, with T = `tolerance_ms` (default 15 ms: loopback transfer plus
event-loop jitter on a busy machine; every scripted difference a client can get
wrong is ≥ 2·T, so a misread shifts a value by more than its tolerance):

* latencies from the client's send (TTFT, TTFA, E2E): measured ∈ [expected, expected + T];
  never below, since the server writes no earlier than the script says and the
  client sent before the server read the request;
* each ITL value of a chunk carrying k tokens: |measured − expected| ≤ T / k
  (both ends of a gap can be late by up to T; k from the expected chunk tokens,
  else output_tokens / chunks);
* TPOT: |measured − expected| ≤ T / (output_tokens − 1);
* everything else (status, error kind, HTTP status, token counts and their source,
  chunk tokens, reasoning chunks, finish reason, anomalies, the number of ITL values)
  exactly; a metric expected to be None must be None.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokspeed.conformance.scenarios import (
    MODEL,
    REQUEST_MAX_TOKENS,
    SCENARIOS,
    Expected,
    Scenario,
)
from tokspeed.conformance.server import ScriptedServer
from tokspeed.metrics import request as rq
from tokspeed.records import RequestRecord, RequestSpec

DEFAULT_TOLERANCE_MS = 15.0
NS_PER_MS = 1_000_000
_EPS_MS = 1e-6  # float rounding of ns → ms


@dataclass(frozen=True, slots=True)
class Check:
    """One metric of one scenario: expected, measured, and whether it is within tolerance."""

    metric: str
    expected: Any
    measured: Any
    ok: bool
    tolerance: str = "exact"


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: str
    checks: tuple[Check, ...]
    server_lateness_ms: float | None = None  # how late the server's own worst write was
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


def measured_values(r: RequestRecord) -> dict[str, Any]:
    """The per-request metrics of `r` in the units of `Expected` (ms, counts, names)."""

    def ms(v: float | None) -> float | None:
        return None if v is None else v / NS_PER_MS

    return {
        "status": r.status.value,
        "error_kind": None if r.error_kind is None else r.error_kind.value,
        "http_status": r.http_status,
        "ttft_ms": ms(rq.ttft_ns(r)),
        "ttfa_ms": ms(rq.ttfa_ns(r)),
        "itl_ms": tuple(float(v) / NS_PER_MS for v in rq.itl_values_ns(r)),
        "tpot_ms": ms(rq.tpot_ns(r)),
        "e2e_ms": ms(rq.e2e_ns(r)),
        "output_tokens": r.output_tokens,
        "output_tokens_source": None if r.output_tokens_source is None else r.output_tokens_source.value,
        "chunk_tokens": None if r.chunk_tokens is None else tuple(r.chunk_tokens),
        "reasoning_chunks": r.reasoning_chunks,
        "finish_reason": r.finish_reason,
        "anomalies": tuple(r.anomalies or ()),
    }


def compare(expected: Expected, measured: dict[str, Any], tolerance_ms: float = DEFAULT_TOLERANCE_MS) -> list[Check]:
    """Every metric of `expected` against `measured` (see the module docstring for the tolerances)."""
    checks: list[Check] = []
    for name in ("status", "error_kind", "http_status", "output_tokens", "output_tokens_source",
                 "chunk_tokens", "reasoning_chunks", "finish_reason", "anomalies"):
        want, got = getattr(expected, name), measured[name]
        checks.append(Check(name, want, got, want == got))
    for name in ("ttft_ms", "ttfa_ms", "e2e_ms"):
        want, got = getattr(expected, name), measured[name]
        checks.append(_latency(name, want, got, tolerance_ms))
    checks.append(_tpot(expected, measured["tpot_ms"], tolerance_ms))
    checks.extend(_itl(expected, measured["itl_ms"], tolerance_ms))
    return checks


def _latency(name: str, want: float | None, got: float | None, t: float) -> Check:
    if want is None or got is None:
        return Check(name, want, got, want is None and got is None)
    ok = want - _EPS_MS <= got <= want + t
    return Check(name, want, round(got, 3), ok, f"[0, +{t:g}] ms")


def _tpot(expected: Expected, got: float | None, t: float) -> Check:
    want = expected.tpot_ms
    if want is None or got is None:
        return Check("tpot_ms", want, got, want is None and got is None)
    tol = t / max(1, (expected.output_tokens or 2) - 1)
    return Check("tpot_ms", round(want, 3), round(got, 3), abs(got - want) <= tol + _EPS_MS, f"±{tol:.3g} ms")


def _itl(expected: Expected, got: Sequence[float], t: float) -> list[Check]:
    want = expected.itl_ms
    if len(want) != len(got):
        return [Check("itl_ms.count", len(want), len(got), False)]
    checks = [Check("itl_ms.count", len(want), len(got), True)]
    for i, (w, g, k) in enumerate(zip(want, got, _tokens_per_value(expected))):
        tol = t / k
        checks.append(Check(f"itl_ms[{i}]", round(w, 3), round(g, 3), abs(g - w) <= tol + _EPS_MS, f"±{tol:.3g} ms"))
    return checks


def _tokens_per_value(expected: Expected) -> list[float]:
    """The tokens each expected ITL value's gap is divided by (its chunk's, or the even share)."""
    if expected.chunk_tokens is not None:
        return [float(k) for k in expected.chunk_tokens[1:] for _ in range(k)]
    chunks = len(expected.itl_ms) + 1
    share = (expected.output_tokens or chunks) / chunks if expected.output_tokens else 1.0
    return [max(share, 1.0)] * len(expected.itl_ms)


async def run_scenario(server: ScriptedServer, scenario: Scenario, tolerance_ms: float) -> ScenarioResult:
    """One request for `scenario` through the real backend; its checks and the server's own lateness."""
    from tokspeed.backends.openai_http import OpenAIHTTPBackend

    backend = OpenAIHTTPBackend(
        server.url(scenario.name), api=scenario.api, stream=scenario.stream, model=MODEL,
        timeout_s=10.0, pool_size=1, prewarm=1, keep_text_for=1,
    )
    await backend.start()
    try:
        spec = RequestSpec(index=0, prompt="conformance", max_tokens=REQUEST_MAX_TOKENS)
        record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)
        plays_before = len(server.plays)
        await backend.send(spec, record)
        await asyncio.sleep(0)
    finally:
        await backend.close()
    return result_for(scenario, record, tolerance_ms, server.plays[plays_before:])


def result_for(
    scenario: Scenario, record: RequestRecord, tolerance_ms: float = DEFAULT_TOLERANCE_MS, plays: Iterable[Any] = ()
) -> ScenarioResult:
    """Compare one record (from the backend, or read back from a `tokspeed run`'s requests.jsonl)."""
    checks = compare(scenario.expected, measured_values(record), tolerance_ms)
    played = list(plays)
    lateness = played[-1].lateness_ms(scenario) if played else None
    notes: list[str] = []
    if lateness is not None and lateness > tolerance_ms / 2:
        notes.append(f"the server itself wrote {lateness:.1f} ms late (busy machine?): rerun before trusting a failure")
    if record.error and scenario.expected.status != record.status.value:
        notes.append(f"error: {record.error}")
    return ScenarioResult(scenario.name, tuple(checks), lateness, tuple(notes))


async def run_all(
    scenarios: Sequence[Scenario] = SCENARIOS, tolerance_ms: float = DEFAULT_TOLERANCE_MS
) -> list[ScenarioResult]:
    """Start the scripted server, run every scenario in turn, stop it."""
    server = ScriptedServer(tuple(scenarios))
    await server.start()
    try:
        return [await run_scenario(server, s, tolerance_ms) for s in scenarios]
    finally:
        await server.close()
