"""The conformance scenarios as data: the exact bytes a scripted server writes, when, and what each metric must be.

Every scenario is one HTTP response. Times (`at_ms`) are milliseconds after the
server has read the whole request; the server never writes early, so a client's
latency from its own send is at least the scripted value. The expected values
follow tokspeed's metric specification (docs/metric-spec.md) and were worked out
by hand from the script, not by running tokspeed: a `None` means the metric must
not apply (not 0).

The scripts cover what real servers do that naive clients get wrong: role-only
first chunks, empty deltas, keep-alive comments, reasoning deltas, multi-token
chunks with and without per-chunk usage (`continuous_usage_stats`), usage
trailers and their absence, errors mid-stream, events split across reads and
events coalesced into one read, missing [DONE], a dropped connection, an HTTP
error and a non-streaming response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

MODEL = "conformance"
PROBE_MAX_TOKENS = 1  # a request with max_tokens 1 is answered as a readiness probe, not scripted
REQUEST_MAX_TOKENS = 16  # what the checker asks for (the scripts stop earlier or at it)

Framing = Literal["chunked", "length"]
Ending = Literal["terminator", "close"]


@dataclass(frozen=True, slots=True)
class Write:
    """Bytes the server writes `at_ms` after reading the request (one TCP write, TCP_NODELAY)."""

    at_ms: float
    data: bytes


@dataclass(frozen=True, slots=True)
class Expected:
    """The exact value of every per-request metric (ms; None: must not apply)."""

    status: str = "ok"
    error_kind: str | None = None
    http_status: int | None = None
    ttft_ms: float | None = None
    ttfa_ms: float | None = None
    itl_ms: tuple[float, ...] = ()
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None
    chunk_tokens: tuple[int, ...] | None = None
    reasoning_chunks: int = 0
    finish_reason: str | None = None
    anomalies: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scripted response and the values a correct client measures from it.

    `framing`: chunked transfer encoding (each write is one HTTP chunk) or a
    Content-Length body. `ending`: after the last write, the chunked terminator
    (sent with the last write) or an abrupt close (no terminator: the body is cut).
    `stream` and `api` say how the client must ask (stream=false for a whole body).
    """

    name: str
    description: str
    writes: tuple[Write, ...]
    expected: Expected
    status: int = 200
    content_type: str = "text/event-stream"
    framing: Framing = "chunked"
    ending: Ending = "terminator"
    stream: bool = True
    api: Literal["chat", "completions"] = "chat"
    headers: dict[str, str] = field(default_factory=dict)


# --- event builders -------------------------------------------------------------------------


def event(obj: dict[str, Any] | str) -> bytes:
    """One SSE event: `data: <json>` and a blank line (a str is sent as is, e.g. "[DONE]")."""
    payload = obj.encode() if isinstance(obj, str) else orjson.dumps(obj)
    return b"data: " + payload + b"\n\n"


def chat(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, Any] = {
        "id": "chatcmpl-conformance",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return event(obj)


def tok(text: str, usage: dict[str, int] | None = None) -> bytes:
    return chat({"content": text}, usage=usage)


def usage_trailer(completion: int, prompt: int = 7) -> bytes:
    return event({
        "id": "chatcmpl-conformance",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })


def usage(completion: int, prompt: int = 7) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def finish(reason: str = "stop") -> bytes:
    return chat({}, finish=reason)


DONE = event("[DONE]")
KEEPALIVE = b": keep-alive\n\n"


def _split(data: bytes, at: int) -> tuple[bytes, bytes]:
    return data[:at], data[at:]


# --- the scenarios ---------------------------------------------------------------------------

_SPLIT_A, _SPLIT_B = _split(tok("Hello"), 30)  # cut inside the JSON of the first token event
_CRLF = tok(" world").replace(b"\n\n", b"\r\n\r\n")
_CR_A, _CR_B = _split(_CRLF, len(_CRLF) - 1)  # CRLF line ends, cut between the final CR and LF
_WHOLE = orjson.dumps({
    "id": "chatcmpl-conformance", "object": "chat.completion", "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "abcdefg"}, "finish_reason": "stop"}],
    "usage": usage(7),
})

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="basic",
        description="4 one-token content chunks 50 ms apart, finish_reason length, usage trailer, [DONE]",
        writes=(
            Write(100, tok("a")), Write(150, tok("b")), Write(200, tok("c")), Write(250, tok("d")),
            Write(260, chat({}, finish="length") + usage_trailer(4) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(50, 50, 50), tpot_ms=160 / 3, e2e_ms=260,
                          output_tokens=4, output_tokens_source="usage", finish_reason="length"),
    ),
    Scenario(
        name="role_first",
        description="a role-only chunk at 20 ms and an empty-content chunk at 60 ms are not tokens; "
        "the first token arrives at 120 ms",
        writes=(
            Write(20, chat({"role": "assistant"})), Write(60, chat({"content": ""})),
            Write(120, tok("a")), Write(170, tok("b")), Write(220, tok("c")),
            Write(240, finish() + usage_trailer(3) + DONE),
        ),
        expected=Expected(ttft_ms=120, ttfa_ms=120, itl_ms=(50, 50), tpot_ms=60, e2e_ms=240,
                          output_tokens=3, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="keepalive",
        description="`: keep-alive` comments at 30, 60, 90 and 230 ms are not tokens",
        writes=(
            Write(30, KEEPALIVE), Write(60, KEEPALIVE), Write(90, KEEPALIVE),
            Write(150, tok("a")), Write(200, tok("b")), Write(230, KEEPALIVE), Write(300, tok("c")),
            Write(310, finish() + usage_trailer(3) + DONE),
        ),
        expected=Expected(ttft_ms=150, ttfa_ms=150, itl_ms=(50, 100), tpot_ms=80, e2e_ms=310,
                          output_tokens=3, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="reasoning",
        description="3 reasoning_content deltas (80, 120, 160 ms) then 2 content deltas (260, 300 ms): "
        "TTFT counts reasoning, time to first answer does not",
        writes=(
            Write(80, chat({"reasoning_content": "think"})), Write(120, chat({"reasoning_content": "more"})),
            Write(160, chat({"reasoning_content": "done"})),
            Write(260, tok("a")), Write(300, tok("b")),
            Write(320, finish() + usage_trailer(5) + DONE),
        ),
        expected=Expected(ttft_ms=80, ttfa_ms=260, itl_ms=(40, 40, 100, 40), tpot_ms=60, e2e_ms=320,
                          output_tokens=5, output_tokens_source="usage", reasoning_chunks=3, finish_reason="stop"),
    ),
    Scenario(
        name="multi_token_counted",
        description="chunks of 1, 3 and 2 tokens with cumulative usage on every chunk (vLLM continuous_usage_stats): "
        "each gap is spread over its chunk's tokens",
        writes=(
            Write(100, tok("a", usage(1))), Write(200, tok("bcd", usage(4))), Write(260, tok("ef", usage(6))),
            Write(270, chat({}, finish="stop", usage=usage(6)) + usage_trailer(6) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(100 / 3, 100 / 3, 100 / 3, 30, 30), tpot_ms=34,
                          e2e_ms=270, output_tokens=6, output_tokens_source="usage", chunk_tokens=(1, 3, 2),
                          finish_reason="stop"),
    ),
    Scenario(
        name="multi_token_trailer",
        description="3 chunks carrying 6 tokens, counted only by the usage trailer: "
        "2 tokens a chunk on average, one ITL value per gap (gap / 2)",
        writes=(
            Write(100, tok("ab")), Write(200, tok("cd")), Write(260, tok("ef")),
            Write(280, finish() + usage_trailer(6) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(50, 30), tpot_ms=36, e2e_ms=280,
                          output_tokens=6, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="no_usage",
        description="no usage object at all: output tokens fall back to counting token-bearing chunks",
        writes=(
            Write(100, tok("a")), Write(140, tok("b")), Write(180, tok("c")), Write(220, tok("d")),
            Write(230, finish() + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(40, 40, 40), tpot_ms=130 / 3, e2e_ms=230,
                          output_tokens=4, output_tokens_source="chunks", finish_reason="stop"),
    ),
    Scenario(
        name="split_events",
        description="the first event is cut inside its JSON (first part at 100 ms, rest at 160 ms); the second "
        "ends in CRLF CRLF, cut before the last LF (210 ms, LF at 240 ms): an event counts once it is complete, "
        "and a lone CR ends a line",
        writes=(
            Write(100, _SPLIT_A), Write(160, _SPLIT_B), Write(210, _CR_A), Write(240, _CR_B),
            Write(250, finish() + usage_trailer(2) + DONE),
        ),
        expected=Expected(ttft_ms=160, ttfa_ms=160, itl_ms=(50,), tpot_ms=90, e2e_ms=250,
                          output_tokens=2, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="coalesced",
        description="three token events arrive in one read at 100 ms, a fourth at 200 ms: "
        "the three share one arrival time (two 0 ms gaps)",
        writes=(
            Write(100, tok("a") + tok("b") + tok("c")), Write(200, tok("d")),
            Write(210, finish() + usage_trailer(4) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(0, 0, 100), tpot_ms=110 / 3, e2e_ms=210,
                          output_tokens=4, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="usage_below_chunks",
        description="usage claims 2 tokens for 3 token-bearing chunks: usage is ignored (anomaly), chunks counted",
        writes=(
            Write(100, tok("a")), Write(150, tok("b")), Write(200, tok("c")),
            Write(210, finish() + usage_trailer(2) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(50, 50), tpot_ms=55, e2e_ms=210,
                          output_tokens=3, output_tokens_source="chunks", finish_reason="stop",
                          anomalies=("usage_below_chunks",)),
    ),
    Scenario(
        name="missing_done",
        description="finish_reason and usage, then the body ends at 300 ms without data: [DONE]: "
        "ok, with the missing_done anomaly; E2E is the end of the body",
        writes=(
            Write(100, tok("a")), Write(150, tok("b")), Write(160, finish() + usage_trailer(2)),
            Write(300, b""),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(50,), tpot_ms=200, e2e_ms=300,
                          output_tokens=2, output_tokens_source="usage", finish_reason="stop",
                          anomalies=("missing_done",)),
    ),
    Scenario(
        name="error_midstream",
        description="two tokens, then an error object inside the stream at 200 ms: the request failed (stream)",
        writes=(
            Write(100, tok("a")), Write(150, tok("b")),
            Write(200, event({"error": {"message": "scripted failure", "type": "server_error", "code": 500}})),
        ),
        expected=Expected(status="error", error_kind="stream", ttft_ms=100, ttfa_ms=100, itl_ms=(50,)),
    ),
    Scenario(
        name="connection_dropped",
        description="two tokens, then the connection closes at 200 ms without finish_reason, [DONE] or "
        "chunked terminator: the request failed (broken)",
        writes=(Write(100, tok("a")), Write(150, tok("b")), Write(200, b"")),
        ending="close",
        expected=Expected(status="error", error_kind="broken", ttft_ms=100, ttfa_ms=100, itl_ms=(50,)),
    ),
    Scenario(
        name="http_error",
        description="HTTP 500 with a JSON error body at 50 ms: the request failed (http), no latency",
        writes=(Write(50, orjson.dumps({"error": {"message": "scripted 500", "type": "server_error"}})),),
        status=500,
        content_type="application/json",
        framing="length",
        expected=Expected(status="error", error_kind="http", http_status=500),
    ),
    Scenario(
        name="non_streaming",
        description="stream=false: one JSON body (head and first half at 150 ms, the rest at 300 ms); E2E only",
        writes=(Write(150, _WHOLE[:40]), Write(300, _WHOLE[40:])),
        content_type="application/json",
        framing="length",
        stream=False,
        expected=Expected(e2e_ms=300, output_tokens=7, output_tokens_source="usage", finish_reason="stop"),
    ),
    Scenario(
        name="completions_api",
        description="/v1/completions: choices[0].text deltas at 100, 160, 220 ms, usage trailer, [DONE]",
        api="completions",
        writes=(
            Write(100, event({"id": "cmpl-c", "object": "text_completion", "choices": [{"index": 0, "text": "a"}]})),
            Write(160, event({"id": "cmpl-c", "object": "text_completion", "choices": [{"index": 0, "text": "b"}]})),
            Write(220, event({"id": "cmpl-c", "object": "text_completion",
                              "choices": [{"index": 0, "text": "c", "finish_reason": "length"}]})),
            Write(230, usage_trailer(3) + DONE),
        ),
        expected=Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(60, 60), tpot_ms=65, e2e_ms=230,
                          output_tokens=3, output_tokens_source="usage", finish_reason="length"),
    ),
)


def by_name(name: str) -> Scenario:
    """The scenario called `name`; KeyError when there is none."""
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(name)
