"""What every native protocol module provides, and the per-request scratch space they fill.

A native protocol (TGI, Triton, Ollama, llama.cpp, SGLang) differs from the OpenAI API in three
places only: the request body, the shape of each streamed event, and how the server reports its
own counts and timings. `NativeProtocol` captures those; `tokspeed.backends.native.backend` does
the rest (transport, deadlines, retries, record filling) once for all of them.

Server timings are kept as milliseconds (float) and counts under fixed keys (see `TIMING_KEYS`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

from tokspeed.backends.exchange import as_count
from tokspeed.records import RequestRecord, RequestSpec

Framing = Literal["sse", "ndjson"]

# keys of RequestRecord.server_timing: durations in ms, then counts
TIMING_KEYS = (
    "queue_ms",  # waiting for a slot before any work on the request (TGI x-queue-time)
    "load_ms",  # loading the model / waiting for a runner (Ollama load_duration)
    "prefill_ms",  # prompt processing up to the first token (llama.cpp prompt_ms, Ollama prompt_eval_duration)
    "decode_ms",  # generation after the first token (llama.cpp predicted_ms, Ollama eval_duration)
    "inference_ms",  # prefill + decode when only their sum is given (TGI x-inference-time)
    "total_ms",  # the whole request as the server timed it (Ollama total_duration, SGLang e2e_latency)
    "prompt_tokens",  # prompt tokens the server processed
    "output_tokens",  # tokens the server generated
)


@dataclass(slots=True)
class NativeState:
    """Per-request scratch space while a native response streams in."""

    text: list[str] | None  # the generated text, when kept (samples, tokenizer counts)
    seen: int = 0  # characters of cumulative text already taken (SGLang sends the whole text so far)
    output_tokens: int | None = None  # the server's generated-token count
    prompt_tokens: int | None = None  # the server's prompt-token count
    chunk_counts: list[int] = field(default_factory=list)  # cumulative output count per token chunk, when sent
    server: dict[str, float] = field(default_factory=dict)
    done: bool = False  # the stream's own end marker arrived


class NativeProtocol(ABC):
    """One server's native streaming API; subclasses fill in the protocol-specific parts."""

    name = ""
    framing: Framing = "sse"
    ends_on_close = False  # the stream has no end marker of its own: a clean close after tokens ends it
    verifies_model = False  # a named model is checked at its info_path (a failure there is fatal)

    @abstractmethod
    def path(self, model: str | None, stream: bool) -> str:
        """The generation route (absolute path) for `model`, streamed or not."""

    @abstractmethod
    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        """The JSON request body (the caller merges --extra-body over it)."""

    @abstractmethod
    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        """Handle one streamed JSON object; True when the stream is over. Runs on the per-token path."""

    @abstractmethod
    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        """Handle a non-streamed JSON answer (the whole response at once)."""

    def error_text(self, obj: dict[str, Any]) -> str | None:
        """The server's error message when `obj` is an error object, else None."""
        err = obj.get("error")
        if err is None:
            return None
        return str(err.get("message") or err) if isinstance(err, dict) else str(err)

    def on_headers(self, headers: dict[str, str], state: NativeState) -> None:
        """Server timings sent as response headers (TGI); most protocols send none."""
        return None

    # discovery -----------------------------------------------------------------------
    def info_path(self, model: str | None) -> str | None:
        """Where the server describes itself or its model (GET), or None."""
        return None

    def model_from(self, info: Any) -> str | None:
        """The served model's name from `info_path`'s answer, when it says."""
        return None

    def version_from(self, info: Any) -> str | None:
        return None


def token(record: RequestRecord, state: NativeState, now: int, text: str, content: bool = True) -> None:
    """Record one token-bearing event that arrived at `now`: content, or reasoning (`content=False`)."""
    if record.first_token_ns is None:
        record.first_token_ns = now
    if not content:
        record.reasoning_chunks += 1
    elif record.first_content_ns is None:
        record.first_content_ns = now
    record.chunk_ns.append(now)
    if state.text is not None:
        state.text.append(text)


def put_ms(state: NativeState, key: str, value: object, scale: float = 1.0) -> None:
    """Store a duration (converted to ms by `scale`) when the server sent a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        state.server[key] = float(value) * scale


def put_count(state: NativeState, key: str, value: object) -> int | None:
    """Store a token count under `key` (and return it) when the server sent one."""
    n = as_count(value)
    if n is not None:
        state.server[key] = n
    return n


def user_text(message: dict[str, Any]) -> str:
    """A chat message's text (content parts joined; image parts dropped)."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")
