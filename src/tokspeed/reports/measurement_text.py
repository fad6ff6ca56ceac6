"""Plain-text sections on the measurement itself: token audit, percentile intervals, steady state, schedule view.

Pure renderers of a saved run (`tokspeed report DIR --token-audit`, `--stats`):
the run's summaries and records in, lines of text out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokspeed.metrics.samples import request_samples
from tokspeed.metrics.schema import Summary
from tokspeed.metrics.table import BY_FIELD, WITH_INTERVALS
from tokspeed.metrics.token_audit import TokenAudit
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_percentile_cis,
    samples_for_precision,
)
from tokspeed.stats.distribution import CI_QUANTILES, QuantileCI, required_samples

_QS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
_METRICS = {m.field: m.short for m in WITH_INTERVALS}


def _f(v: float | None, unit: str = "") -> str:
    return "—" if v is None else f"{v:.2f}{unit}"


def token_audit_lines(name: str, audit: TokenAudit) -> list[str]:
    """The token audit of one load point as text."""
    lines = [f"Token audit — {name}", f"  completed requests: {audit.requests}; output tokens counted by "
             + ", ".join(f"{k} {v}" for k, v in audit.sources.items())]
    d = audit.discrepancy
    if d is not None:
        rel = "—" if d.relative is None else f"{100 * d.relative:.2f}%"
        lines.append(f"  tokenizer − usage over {d.compared} requests: exact {d.exact}, mean {d.mean:+.2f}, "
                     f"mean |d| {d.mean_abs:.2f}, max |d| {d.max_abs} tokens, relative {rel}")
        if d.worst:
            lines.append(f"    largest differences: requests {', '.join(map(str, d.worst))}")
    elif not audit.tokenizer:
        lines.append("  usage vs tokenizer: no tokenizer (pass --tokenizer PATH)")
    else:
        lines.append(f"  usage vs tokenizer: nothing to compare ({audit.texts} texts kept; run with --token-audit "
                     "and a server that reports usage)")
    if audit.chunk_tokens_histogram:
        hist = ", ".join(f"{k}: {v}" for k, v in audit.chunk_tokens_histogram.items())
        lines.append(f"  tokens per chunk (server-reported, {audit.chunks_with_known_tokens} chunks): {hist}")
    t = audit.tokens_per_chunk
    if t.count:
        lines.append(f"  tokens per chunk, per request (output tokens / chunks): mean {_f(t.mean)}, "
                     f"p50 {_f(t.p50)}, max {_f(t.max)}")
    e = audit.early_stops
    if e.asked:
        reasons = ", ".join(f"{k} {v}" for k, v in e.short_by_finish_reason.items()) or "—"
        frac = "—" if e.short_fraction is None else f"{100 * e.short_fraction:.1f}%"
        lines.append(f"  stopped before max_tokens: {e.short} of {e.asked} ({frac}; finish_reason: {reasons})")
        if e.examples:
            lines.append(f"    e.g. requests {', '.join(map(str, e.examples))}")
        if e.over:
            lines.append(f"  more tokens than max_tokens: {e.over} (the server ignored max_tokens)")
        if e.undercounted:
            lines.append(f"  stopped at max_tokens but counted lower: {e.undercounted} (several tokens per chunk, "
                         "no usage: the token count is low)")
    return lines


def _values_ms(name: str, ok: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of one metric and, for per-token ITL, each value's request (None: one per request)."""
    metric = BY_FIELD[name]
    if metric.value is None:  # pooled per token: ITL
        samples = request_samples(list(ok))
        return samples.itl_ms, samples.itl_owner
    vals = [metric.value(r) for r in ok]
    return np.array([v for v in vals if v is not None], dtype=np.float64) / metric.divisor, None


def stats_lines(name: str, summary: Summary, records: Sequence[RequestRecord], precision: float = 0.10) -> list[str]:
    """Percentile intervals (order-statistic and bootstrap), required samples, steady state, schedule view."""
    ok = [r for r in records if not r.warmup and r.status is Status.OK]
    intervals = (f"  95% intervals: order-statistic (exact, distribution-free; per-request values only) | "
                 f"bootstrap resampling requests (B={DEFAULT_RESAMPLES}, seed {DEFAULT_SEED})")
    lines = [f"Measurement statistics — {name}", intervals]
    for field, label in _METRICS.items():
        values, owner = _values_ms(field, ok)
        if values.size == 0:
            continue
        boot = bootstrap_percentile_cis(values, tuple(_QS.values()), owner=owner)
        dist = getattr(summary, field)
        cis = summary.percentile_ci.get(field, {})
        for stat, q in _QS.items():
            os_ci, b = cis.get(stat), boot[q]
            if owner is not None:
                os_ci = None  # per-token values are not independent: no order-statistic interval
            os_text = "—" if os_ci is None else f"[{os_ci.low:.2f}, {os_ci.high:.2f}]"
            b_text = "—" if b is None else f"[{b.low:.2f}, {b.high:.2f}]{'' if b.reliable else ' (too few values beyond it)'}"
            lines.append(f"  {label} {stat} {_f(getattr(dist, stat), ' ms'):>12}  {os_text:>20} | {b_text}")
        if owner is not None:  # the interval narrows as 1/√requests: scale the request count
            b99 = boot[_QS["p99"]]
            units = b99.units if b99 is not None else 0
            ci = QuantileCI(low=b99.low, high=b99.high, coverage=0.95) if b99 is not None else None
            need = required_samples(ci, dist.p99, units, CI_QUANTILES["p99"], precision) if ci is not None else None
            have = units
        else:
            need, have = _needed(cis.get("p99"), dist.p99, int(values.size), values, precision), int(values.size)
        if need is not None:
            lines.append(f"    p99 {label} within ±{100 * precision:g}% needs ~{need} requests (have {have})")
    lines += steady_lines(summary) + schedule_lines(summary)
    return lines


def _needed(ci: object, estimate: float | None, n: int, values: np.ndarray, precision: float) -> int | None:
    """Required samples: from the order-statistic interval when it exists, else from the density estimate."""
    if isinstance(ci, QuantileCI):
        return required_samples(ci, estimate, n, CI_QUANTILES["p99"], precision)
    return samples_for_precision(values, 99.0, precision)


def steady_lines(summary: Summary) -> list[str]:
    s = summary.steady_state
    if s is None:
        return ["  steady state: not detected (needs one measured iteration and ≥ 20 token chunks)"]
    head = (f"  steady state ({s.method}, {s.bins} bins of {s.bin_s:.3g} s): trimmed {s.trimmed_start_s:.2f} s "
            f"ramp-up and {s.trimmed_end_s:.2f} s drain: {s.window_s:.2f} s of {s.full_window_s:.2f} s, "
            f"{s.requests} requests")
    lines = [head]
    if s.summary is not None:
        full, steady = summary, s.summary
        lines.append(f"    {'':<22}{'full window':>14}{'steady':>14}")
        for label, a, b in (
            ("output tokens/s", full.throughput.output_tokens_per_s, steady.throughput.output_tokens_per_s),
            ("requests/s", full.throughput.requests_per_s, steady.throughput.requests_per_s),
            ("TTFT p50 ms", full.ttft_ms.p50, steady.ttft_ms.p50),
            ("TTFT p99 ms", full.ttft_ms.p99, steady.ttft_ms.p99),
            ("TPOT p50 ms", full.tpot_ms.p50, steady.tpot_ms.p50),
            ("E2E p99 ms", full.e2e_ms.p99, steady.e2e_ms.p99),
        ):
            lines.append(f"    {label:<22}{_f(a):>14}{_f(b):>14}")
    return lines


def schedule_lines(summary: Summary) -> list[str]:
    """Service latency (from the send) beside latency from the scheduled start (coordinated omission)."""
    if not summary.ttft_from_scheduled_ms.count:
        return ["  latency from the scheduled start: closed loop (a request is scheduled when a stream picks it)"]
    lines = ["  latency from the send (service) vs from the scheduled start (coordinated-omission corrected):"]
    for label, sent, sched in (("TTFT", summary.ttft_ms, summary.ttft_from_scheduled_ms),
                               ("E2E", summary.e2e_ms, summary.e2e_from_scheduled_ms)):
        lines.append(f"    {label} p50 {_f(sent.p50)} vs {_f(sched.p50)} ms; p99 {_f(sent.p99)} vs {_f(sched.p99)} ms")
    return lines
