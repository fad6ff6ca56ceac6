"""errors: failed requests grouped by cause, each with what to change.

A cause is (error_kind, http_status, the message normalised: numbers and hex
become N, whitespace collapsed, cut to 120 characters). One finding per cause,
largest first, at most `max_error_groups` per load point (the rest are summed in
one more). Severity: critical when the cause failed ≥ `error_critical_share` of
the measured requests that finished, else warning. The advice comes from the
message first (out of memory, context length, model not found), then the kind
and HTTP status (timeouts, 429/503, connect, broken streams, 4xx, 5xx, ...).
When failures spread over several causes, each may stay under the threshold while
together they do not: then a total finding (critical: all causes together failed ≥
`error_critical_share` of the finished requests) comes first, so severity follows
the whole point's error rate (a run's total over several points cannot pass the
threshold unless one point does: it is their weighted mean).
Requests that succeeded only after `--retries` get one more finding (warning):
the server was shedding load.
"""

from __future__ import annotations

import re

from tokspeed.diagnosis.causes import OTHER_ADVICE, STATUS_ADVICE, Cause
from tokspeed.diagnosis.context import PointData, pct, share
from tokspeed.diagnosis.digest import CauseTally, PointDigest
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results.findings import Finding, Severity

_HTTP_PREFIX = re.compile(r"^HTTP \d+: ")


def label(cause: Cause) -> str:
    if cause.http_status is not None:
        return f"HTTP {cause.http_status}"
    return {"connect": "connection failed", "broken": "stream broken", "ttft_timeout": "TTFT timeout"}.get(
        cause.kind, cause.kind
    )


def errors(p: PointData, t: Thresholds) -> list[Finding]:
    d = p.digest
    retried = _retried(p.index, d)
    if not d.failed:
        return [retried] if retried else []
    finished = d.finished
    ranked = d.ranked_causes()
    shown, rest = ranked[: t.max_error_groups], ranked[t.max_error_groups :]
    findings = [_finding(p.index, cause, tally, finished, t) for cause, tally in shown]
    if share(d.failed, finished) >= t.error_critical_share and all(f.severity != "critical" for f in findings):
        findings.insert(0, _total(p.index, d, finished, t))  # no cause alone reached it: together they do
    if rest or d.untallied_failed:
        findings.append(_rest(p.index, d, rest, finished, t))
    return [*findings, retried] if retried else findings


def _total(index: int, d: PointDigest, finished: int, t: Thresholds) -> Finding:
    """All causes together: the error rate that decides severity when no one cause reaches the threshold."""
    part = share(d.failed, finished)
    largest = d.ranked_causes()[0][1].count if d.causes else 0
    return Finding(
        rule="errors",
        severity="critical",
        title=f"{d.failed} of {finished} requests ({pct(part)}) failed, over {d.cause_count} causes "
        f"(the largest {pct(share(largest, finished))}): the run's error rate is above {pct(t.error_critical_share)}",
        evidence={"count": d.failed, "finished": finished, "share": part, "causes": d.cause_count,
                  "largest_cause_share": share(largest, finished), "threshold_critical_share": t.error_critical_share},
        advice="fix the causes listed below, largest first; a run failing this often measures the failures, "
        "not the server's speed",
        benchmark=index,
    )


def _retried(index: int, d: PointDigest) -> Finding | None:
    """Requests that succeeded only after --retries: the errors the server returned are hidden in them."""
    if not d.retried:
        return None
    return Finding(
        rule="errors",
        severity="warning",
        title=f"{d.retried} requests were retried after HTTP 429/503 ({d.retries} retries): "
        "the server was shedding load, and their send lateness includes the waits",
        evidence={"retried": d.retried, "retries": d.retries, "requests": d.measured},
        advice=STATUS_ADVICE[429],
        benchmark=index,
    )


def _severity(count: int, finished: int, t: Thresholds) -> Severity:
    return "critical" if share(count, finished) >= t.error_critical_share else "warning"


def _finding(index: int, cause: Cause, tally: CauseTally, finished: int, t: Thresholds) -> Finding:
    example = tally.example
    part = share(tally.count, finished)
    return Finding(
        rule="errors",
        severity=_severity(tally.count, finished, t),
        title=f"{tally.count} of {finished} requests ({pct(part)}) failed: {label(cause)}"
        + (f" — {detail[:100]}" if (detail := _HTTP_PREFIX.sub("", example)) else ""),
        evidence={"count": tally.count, "finished": finished, "share": part, "error_kind": cause.kind,
                  "http_status": cause.http_status, "message": example[:300],
                  "threshold_critical_share": t.error_critical_share},
        advice=tally.advice,
        benchmark=index,
    )


def _rest(index: int, d: PointDigest, rest: list[tuple[Cause, CauseTally]], finished: int, t: Thresholds) -> Finding:
    """The causes beyond max_error_groups; failures of causes beyond the digest's MAX_CAUSES count as one more."""
    count = sum(tally.count for _, tally in rest) + d.untallied_failed
    causes = len(rest) + (d.untallied_failed > 0)
    return Finding(
        rule="errors",
        severity=_severity(count, finished, t),
        title=f"{count} more requests failed from {causes} other causes",
        evidence={"count": count, "finished": finished, "causes": causes, "share": share(count, finished)},
        advice=OTHER_ADVICE + " (`tokspeed report DIR --csv -` lists each request with its error)",
        benchmark=index,
    )
