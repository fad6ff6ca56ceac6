"""Hot-path types: what a request asks for and what happened to it.

A `RequestSpec` is one unit of work from the workload. A `RequestRecord` is
everything observed about one attempt to serve it, as raw integer-nanosecond
timestamps from one monotonic clock (`time.perf_counter_ns()`). Derived
metrics (TTFT, ITL, ...) are never stored here; `tokspeed.metrics` computes
them from records, so any analysis can be re-run offline.

In memory, timestamps are monotonic-clock nanoseconds. In `requests.jsonl`
they are Unix-epoch nanoseconds (the run's single wall-clock anchor is added),
and chunk times are stored as offsets from `sent_ns`. `to_json_dict` and
`from_json_dict` do that conversion and nothing else.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """How a request ended."""

    OK = "ok"  # completed normally
    ERROR = "error"  # the server or the transport failed it
    INCOMPLETE = "incomplete"  # cancelled by the client (Ctrl-C, duration end)
    CANCELLED = "cancelled"  # aborted on purpose by the client after --cancel-after (--cancel-share): not an error


class ErrorKind(str, Enum):
    """Classification of a failed request, for counting and diagnosis."""

    CONNECT = "connect"  # could not connect / connection reset before a response
    TIMEOUT = "timeout"  # --timeout exceeded (no complete response in time)
    HTTP = "http"  # non-2xx status (see http_status)
    STREAM = "stream"  # the server sent an error object inside the stream
    PROTOCOL = "protocol"  # parse error: bad JSON, a malformed SSE line, an event of the wrong shape
    OTHER = "other"
    BROKEN = "broken"  # the connection dropped (or the stream stopped short) after the response began
    TTFT_TIMEOUT = "ttft_timeout"  # --ttft-timeout exceeded (no first token in time)


class Anomaly(str, Enum):
    """A non-fatal oddity in a response that completed; listed in `RequestRecord.anomalies`."""

    MISSING_DONE = "missing_done"  # the stream closed cleanly after finish_reason, without data: [DONE]
    USAGE_BELOW_CHUNKS = "usage_below_chunks"  # usage.completion_tokens < token-bearing chunks: usage ignored
    MISSING_FINISH_REASON = "missing_finish_reason"  # data: [DONE] after tokens but no finish_reason: cut short?
    NOT_STREAMED = "not_streamed"  # stream: true was asked, one whole JSON body came back: no TTFT, no ITL


class TokenSource(str, Enum):
    """Where a token count came from (most to least trustworthy)."""

    USAGE = "usage"  # the server's `usage` object
    TOKENIZER = "tokenizer"  # counted with the model's tokenizer
    CHUNKS = "chunks"  # one token per token-bearing chunk (output only)
    APPROX = "approx"  # documented character heuristic (input only)
    ENGINE = "engine"  # counted by an in-process engine


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request the workload wants sent.

    Exactly one of `prompt` (completions API) or `messages` (chat API) is the
    natural form; the backend converts between them when the API differs.
    """

    index: int
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_tokens: int | None = None
    input_tokens: int | None = None  # known prompt length, if the workload measured it
    input_tokens_source: TokenSource | None = None
    images: tuple[str, ...] | None = None  # image URLs (data: URLs) for the last user message (chat only)
    keep_text: bool = False  # the caller needs the answer's full text in `RequestRecord.output_text` (multi-turn)
    prefix_group: int | None = None  # shared-prefix workloads: the prefix's group (-1: a unique prefix)
    model: str | None = None  # a model mix (--model a=3,b=1): the model this request asks for (None: the backend's)
    cancel_after_ns: int | None = None  # --cancel-share: the client aborts the request this long after sending it

    def prompt_text(self) -> str:
        """The prompt as plain text (chat messages joined), for counting and samples."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.get("content", "") for m in (self.messages or ()))

    def as_messages(self) -> list[dict[str, Any]]:
        """Chat messages; with `images`, the last user message becomes text + `image_url` parts."""
        messages: list[dict[str, Any]] = (
            list(self.messages) if self.messages is not None else [{"role": "user", "content": self.prompt or ""}]
        )
        if self.images:
            messages[-1] = _with_images(messages[-1], self.images)
        return messages


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Mutable while in flight, then frozen by convention.

    `chunk_ns[i]` is when the i-th token-bearing chunk (content or reasoning)
    arrived; `chunk_tokens[i]` is how many tokens it carried when that is known
    (None: unknown, the metrics then spread the output token count evenly).
    """

    index: int  # RequestSpec.index
    iteration: int  # 0 = warm-up phase, 1..K = measured iterations
    warmup: bool
    scheduled_ns: int
    sent_ns: int = 0
    first_token_ns: int | None = None  # first content-or-reasoning token
    first_content_ns: int | None = None  # first *content* token (time to first answer)
    end_ns: int | None = None  # last byte received (or failure time)
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    reasoning_chunks: int = 0  # how many of chunk_ns carried reasoning rather than content
    input_tokens: int | None = None
    input_tokens_source: TokenSource | None = None
    output_tokens: int | None = None
    output_tokens_source: TokenSource | None = None
    max_tokens: int | None = None  # what was asked for (to detect ignored max_tokens)
    status: Status = Status.OK
    error_kind: ErrorKind | None = None
    error: str | None = None
    http_status: int | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    output_text: str | None = None  # kept only for the first requests (samples)
    benchmark: int = 0  # which load point of the run (0-based position in run.json's benchmarks)
    retries: int = 0  # attempts repeated after 429/503 (--retries); times are the final attempt's
    anomalies: list[str] | None = None  # non-fatal protocol oddities, e.g. "missing_done"
    connect_duration_ns: int | None = None  # TCP (+TLS) connect, when this request opened a new connection
    # what the server itself reported about this request (native protocols): ms durations and token counts,
    # keys among queue_ms, load_ms, prefill_ms, decode_ms, inference_ms, total_ms, prompt_tokens, output_tokens
    server_timing: dict[str, float] | None = None
    conversation: int | None = None  # multi-turn: which conversation of the phase (0-based)
    turn: int | None = None  # multi-turn: the turn's position in its conversation (1-based)
    prefix_group: int | None = None  # shared-prefix: the group whose prefix the prompt starts with (-1: unique)
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when the server reports it
    stage: str | None = None  # scheduled load: the stage (or ramp window) the request was scheduled in
    workload_class: str | None = None  # mixed classes: the workload class the request belongs to
    model: str | None = None  # a model mix (--model a=3,b=1): the model the request asked for

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json_dict(self, epoch_offset_ns: int) -> dict[str, Any]:
        """Serialise with absolute times shifted to the Unix epoch."""

        def wall(t: int | None) -> int | None:
            return None if t is None else t + epoch_offset_ns

        sent = self.sent_ns
        return {
            "index": self.index,
            "iteration": self.iteration,
            "warmup": self.warmup,
            "status": self.status.value,
            "scheduled_ns": wall(self.scheduled_ns),
            "sent_ns": wall(sent),
            "first_token_ns": wall(self.first_token_ns),
            "first_content_ns": wall(self.first_content_ns),
            "end_ns": wall(self.end_ns),
            "chunk_offsets_ns": [t - sent for t in self.chunk_ns],
            "chunk_tokens": self.chunk_tokens,
            "reasoning_chunks": self.reasoning_chunks,
            "input_tokens": self.input_tokens,
            "input_tokens_source": _enum_value(self.input_tokens_source),
            "output_tokens": self.output_tokens,
            "output_tokens_source": _enum_value(self.output_tokens_source),
            "max_tokens": self.max_tokens,
            "error_kind": _enum_value(self.error_kind),
            "error": self.error,
            "http_status": self.http_status,
            "response_id": self.response_id,
            "finish_reason": self.finish_reason,
            "output_text": self.output_text,
            "benchmark": self.benchmark,
            "retries": self.retries,
            "anomalies": self.anomalies,
            "connect_duration_ns": self.connect_duration_ns,
            "server_timing": self.server_timing,
            "conversation": self.conversation,
            "turn": self.turn,
            "prefix_group": self.prefix_group,
            "cached_tokens": self.cached_tokens,
            "stage": self.stage,
            "workload_class": self.workload_class,
            "model": self.model,
        }

    @classmethod
    def from_json_dict(cls, d: dict[str, Any], epoch_offset_ns: int = 0, compact: bool = False) -> RequestRecord:
        """Inverse of `to_json_dict`. Times stay on the epoch scale (differences are unchanged),
        or, given the run's `epoch_offset_ns`, return to the monotonic clock they were taken on.

        `compact` keeps `chunk_ns` as an `array('q')` (8 bytes a chunk instead of a Python int
        each) for read-only uses such as summaries; it then compares unequal to a list.
        """

        def mono(t: int | None) -> int | None:
            return None if t is None else t - epoch_offset_ns

        sent = int(d["sent_ns"]) - epoch_offset_ns
        src_in = d.get("input_tokens_source")
        src_out = d.get("output_tokens_source")
        kind = d.get("error_kind")
        return cls(
            index=int(d["index"]),
            iteration=int(d.get("iteration", 1)),
            warmup=bool(d.get("warmup", False)),
            scheduled_ns=int(d["scheduled_ns"]) - epoch_offset_ns,
            sent_ns=sent,
            first_token_ns=mono(d.get("first_token_ns")),
            first_content_ns=mono(d.get("first_content_ns")),
            end_ns=mono(d.get("end_ns")),
            chunk_ns=(_compact_times if compact else _chunk_times)(sent, d.get("chunk_offsets_ns") or []),
            chunk_tokens=d.get("chunk_tokens"),
            reasoning_chunks=int(d.get("reasoning_chunks") or 0),
            input_tokens=d.get("input_tokens"),
            input_tokens_source=TokenSource(src_in) if src_in else None,
            output_tokens=d.get("output_tokens"),
            output_tokens_source=TokenSource(src_out) if src_out else None,
            max_tokens=d.get("max_tokens"),
            status=Status(d.get("status", "ok")),
            error_kind=ErrorKind(kind) if kind else None,
            error=d.get("error"),
            http_status=d.get("http_status"),
            response_id=d.get("response_id"),
            finish_reason=d.get("finish_reason"),
            output_text=d.get("output_text"),
            benchmark=int(d.get("benchmark") or 0),
            retries=int(d.get("retries") or 0),
            anomalies=d.get("anomalies"),
            connect_duration_ns=d.get("connect_duration_ns"),
            server_timing=d.get("server_timing"),
            conversation=d.get("conversation"),
            turn=d.get("turn"),
            prefix_group=d.get("prefix_group"),
            cached_tokens=d.get("cached_tokens"),
            stage=d.get("stage"),
            workload_class=d.get("workload_class"),
            model=d.get("model"),
        )


def _with_images(message: dict[str, Any], urls: tuple[str, ...]) -> dict[str, Any]:
    """`message` with its text as the first content part and one `image_url` part per URL."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.get("content") or ""}]
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in urls)
    return {**message, "content": parts}


def _enum_value(e: Enum | None) -> Any:
    return None if e is None else e.value


def _compact_times(sent: int, offsets: list[int]) -> list[int]:
    """Chunk times from offsets as an int64 array (typed as the list it stands in for, read-only).

    Converted and shifted in C (a third of the time of a Python-level add per chunk: summaries
    read every record of a point this way, several times).
    """
    import numpy as np  # only readers of saved records need it, not the request path

    times = array("q", offsets)
    if times:
        view = np.frombuffer(times, dtype=np.int64)
        np.add(view, sent, out=view)
    return times  # type: ignore[return-value]


def _chunk_times(sent: int, offsets: list[int]) -> list[int]:
    """Chunk times from offsets; chunks read at the same instant share one int, as they did in memory."""
    times: list[int] = []
    last_offset, last = None, 0
    for o in offsets:
        if o != last_offset:
            last_offset, last = o, sent + int(o)
        times.append(last)
    return times
