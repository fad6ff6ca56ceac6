"""What one record says, for the digest and the rules alike: its error's cause and advice, an early stop.

A cause is (error_kind, http_status, the message normalised: numbers and hex
become N, whitespace collapsed, cut to 120 characters). The advice comes from the
message first (out of memory, context length, model not found), then the HTTP
status, then the kind. Imports no other diagnosis module, so the digest
(one pass over the records) and the rules (over the digest) both may import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tokspeed.records import ErrorKind, RequestRecord

_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")
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
STATUS_ADVICE = {
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
        if http_status in STATUS_ADVICE:
            return STATUS_ADVICE[http_status]
        return SERVER_ERROR_ADVICE if http_status >= 500 else CLIENT_ERROR_ADVICE
    try:
        return _BY_KIND.get(ErrorKind(kind), OTHER_ADVICE)
    except ValueError:
        return OTHER_ADVICE



def stopped_early(r: RequestRecord) -> bool:
    """Fewer output tokens than max_tokens, and the server did not say it hit the length (a chunk count
    under multi-token chunks falls short of max_tokens without the request stopping early)."""
    return r.output_tokens is not None and r.max_tokens is not None and r.output_tokens < r.max_tokens \
        and r.finish_reason != "length"
