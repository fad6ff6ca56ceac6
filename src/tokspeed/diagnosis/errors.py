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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokspeed.diagnosis.context import PointData, pct, share
from tokspeed.results.findings import Finding, Severity
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.records import ErrorKind, RequestRecord

if TYPE_CHECKING:
    from tokspeed.diagnosis.digest import CauseTally, PointDigest

_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")
_HTTP_PREFIX = re.compile(r"^HTTP \d+: ")
_OOM = re.compile(
    r"out of memory|\boom\b|cuda error|memoryerror|cannot allocate|insufficient memory|"
    r"kv.?cache|no available (memory|blocks)|not enough (gpu )?memory",
    re.IGNORECASE,
)
_CONTEXT = re.compile(
    r"context length|context window|maximum context|max_model_len|too long|exceeds? the max|"
    r"longer than the maximum|max_tokens.{0,40}(too large|exceed)",
    re.IGNORECASE,
)
_MODEL = re.compile(r"model.{0,60}(not found|does not exist|not served)|no such model|failed to load", re.IGNORECASE)

OOM_ADVICE = (
    "the server ran out of memory: lower its concurrent sequences (vLLM --max-num-seqs) and context length "
    "(--max-model-len), quantise the weights (AWQ/GPTQ, FP8), use an FP8 KV cache (--kv-cache-dtype fp8), "
    "leave headroom with --gpu-memory-utilization, or spread the model over more GPUs (--tensor-parallel-size); "
    "watch nvidia-smi while it runs"
)
CONTEXT_ADVICE = (
    "prompt + max_tokens exceed the model's context window: lower --max-tokens or --input-tokens (or use shorter "
    "prompts), or raise the server's max_model_len if memory allows"
)
MODEL_ADVICE = (
    "the server does not serve that model or failed to load it: check --model against GET /v1/models and the "
    "server's start-up log (a wrong path, missing files, --trust-remote-code, an unsupported architecture, "
    "not enough memory to load)"
)
_BY_KIND = {
    ErrorKind.TIMEOUT: (
        "no complete answer within --timeout: the server is saturated or stalled — lower the load, check its log "
        "and nvidia-smi; raise --timeout only if answers that slow are acceptable"
    ),
    ErrorKind.TTFT_TIMEOUT: (
        "no first token within --ttft-timeout: requests queue too long before prefill — lower the load or raise the "
        "server's batch limits; raise --ttft-timeout only if that wait is acceptable"
    ),
    ErrorKind.CONNECT: (
        "no connection: the server is down, restarting or refusing connections — check that it is up and its log "
        "(crashed? OOM-killed: see dmesg), its listen backlog, and open-file limits (ulimit -n) on both sides"
    ),
    ErrorKind.BROKEN: (
        "the connection dropped mid-response: the server crashed or restarted (check its log for out-of-memory "
        "errors) or a proxy or load balancer cut long streams (raise its idle or read timeout)"
    ),
    ErrorKind.PROTOCOL: (
        "the response could not be parsed (bad JSON or SSE): a server bug or an incompatible API — try --no-stream "
        "or --api completions, and report it to the server's maintainers"
    ),
    ErrorKind.STREAM: (
        "the server reported an error inside the stream, after the response began: read the message — often an "
        "engine error (memory, context length) or an aborted request"
    ),
}
_BY_STATUS = {
    429: (
        "the server shed load (429 Too Many Requests): lower --rate or --concurrency, find the sustainable load with "
        "`tokspeed capacity`, raise the server's rate limit, or pass --retries N to wait Retry-After "
        "(a retry hides what the server did)"
    ),
    503: (
        "the server was overloaded or not ready (503): wait until it has loaded the model, lower --rate or "
        "--concurrency, find the sustainable load with `tokspeed capacity`, or pass --retries N to wait Retry-After"
    ),
    401: "authentication failed: pass --api-key or set OPENAI_API_KEY",
    403: "authentication failed: pass --api-key or set OPENAI_API_KEY",
    404: MODEL_ADVICE,
}
CLIENT_ERROR_ADVICE = (
    "the server rejected the request: check --model, --api, --extra-body and the sampling flags against what it accepts"
)
SERVER_ERROR_ADVICE = (
    "the server failed internally: read its log at the time of the failures; if errors grow with load, lower it"
)
OTHER_ADVICE = "see the error field in requests.jsonl"


@dataclass(frozen=True, slots=True)
class Cause:
    kind: str
    http_status: int | None
    message: str  # normalised


def normalise(message: str | None) -> str:
    """A message with its variable parts (numbers, hex) replaced, so equal causes group together."""
    text = " ".join(_NUMBER.sub("N", message or "").split())
    return text[:120]


def cause_of(r: RequestRecord) -> Cause:
    kind = r.error_kind.value if r.error_kind is not None else ErrorKind.OTHER.value
    return Cause(kind, r.http_status, normalise(r.error))


def advice_for(kind: str, http_status: int | None, message: str | None) -> str:
    """What to change for one cause: the message first, then the HTTP status, then the kind."""
    text = message or ""
    for pattern, advice in ((_OOM, OOM_ADVICE), (_CONTEXT, CONTEXT_ADVICE), (_MODEL, MODEL_ADVICE)):
        if pattern.search(text):
            return advice
    if http_status is not None:
        if http_status in _BY_STATUS:
            return _BY_STATUS[http_status]
        return SERVER_ERROR_ADVICE if http_status >= 500 else CLIENT_ERROR_ADVICE
    try:
        return _BY_KIND.get(ErrorKind(kind), OTHER_ADVICE)
    except ValueError:
        return OTHER_ADVICE


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
        advice=_BY_STATUS[429],
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
