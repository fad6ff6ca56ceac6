"""One HTTP exchange with a target, and how each way it can end lands in a `RequestRecord`.

Shared by the OpenAI backend (`openai_http`), the native-protocol backend (`native.backend`)
and the blocking Locust client (`distributed.sync_http`), so the three cannot drift apart:

- `exchange()`: one attempt on the asyncio transport: pool acquire, `sent_ns`, the exchange,
  the two deadlines, and the mapping of every failure to a status and error kind
  (`transport_failure()` for the transport's own exceptions, shared with the blocking client);
- `retrying()`: the 429/503 retry loop around attempts;
- `redact_error()` / `redacted()`: error texts are redacted before they are cut and kept;
- `Response`: what every response sink has in common (status, headers, the connection, the
  time it ended, the HTTP-error and whole-body outcomes); subclasses parse the body;
- `settle_tokens()`: output/input token counts and their sources once a request ended well;
- the small helpers that write failures and anomalies into a record (`fail`, `note`, ...).

Nothing here runs per token: the per-event parsing stays in each backend's sink, inline.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Any, Protocol, TypeVar

import orjson

from tokspeed.backends.deadline import ClientCancel, FirstTokenDeadline, TotalDeadline
from tokspeed.backends.http1 import (
    BadFraming,
    BadResponse,
    Connection,
    ConnectionLost,
    Pool,
)
from tokspeed.backends.http_policy import is_redirect, redirect_text
from tokspeed.backends.redact import Redactor
from tokspeed.backends.retry import reset_for_retry, retry_delay_s, retryable
from tokspeed.errors import TargetError, TargetGone, UnreachableTarget
from tokspeed.records import (
    Anomaly,
    ErrorKind,
    RequestRecord,
    RequestSpec,
    Status,
    TokenSource,
)
from tokspeed.workload.tokens import TokenCounter

DONE = b"[DONE]"  # the OpenAI stream's end marker (also sent by SGLang's native stream)
ERROR_SNIPPET = 300  # characters of an error message kept (after redaction)
TARGET_MESSAGE = 500  # characters of a TargetError message kept (after redaction)
RAW_KEEP = 4096  # bytes of an unparseable body quoted in a message before redaction
PREWARM_MAX = 4096  # connections opened at start, so the first wave of requests pays no connect
# a server's event or body of the wrong shape (a list where an object belongs, ...)
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
GONE_HINT = "is the server still running? check its logs; the requests it answered are in the results"
# what the transports raise for a failed exchange (OSError: connect refused, reset, DNS, TLS)
TRANSPORT_ERRORS = (ConnectionLost, BadFraming, BadResponse, OSError)


class Detachable(Protocol):
    """A connection a sink can let go of once its stream is over (asyncio or blocking)."""

    def detach(self, now: int) -> None: ...


class Response(ABC):
    """The sink of one HTTP exchange, as far as every backend's sink is alike.

    Subclasses add `on_head`, `on_body` (the per-token path: keep it inline there) and
    `conclude`; the connection calls them, the attempt reads `status` and `end_ns`.
    """

    __slots__ = ("conn", "end_ns", "headers", "over", "parts", "record", "status", "stream")

    def __init__(self, record: RequestRecord, stream: bool) -> None:
        self.record = record
        self.stream = stream
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.conn: Detachable | None = None
        self.parts: list[bytes] = []  # a body that is not an event stream
        self.end_ns: int | None = None  # when the exchange ended (or the stream was over)
        self.over = False

    @abstractmethod
    def on_head(self, status: int, headers: dict[str, str]) -> None:
        ...

    @abstractmethod
    def on_body(self, data: bytes, now: int) -> None:
        ...

    @abstractmethod
    def conclude(self) -> None:
        """After the exchange: judge the stream's ending, or the whole body, or the error answer."""

    @abstractmethod
    def kept_text(self) -> list[Any] | None:
        """The answer's text pieces, when kept (samples, tokenizer counts, a multi-turn caller)."""

    def end_at(self, now: int) -> None:
        """The stream is over at `now` (its end marker, an error, bad JSON): let the connection go."""
        self.over = True
        self.end_ns = now
        if self.conn is not None:
            self.conn.detach(now)

    def fail_http(self) -> None:
        """A 3xx/4xx/5xx answer: its status, and its error message (the JSON error's, on one line; a
        redirect's Location, which is never followed)."""
        record, status = self.record, self.status
        assert status is not None
        record.http_status = status
        if is_redirect(status):
            fail(record, Status.ERROR, ErrorKind.HTTP, redirect_text(status, self.headers.get("location")))
            return
        text = b"".join(self.parts).decode("utf-8", errors="replace")
        fail(record, Status.ERROR, ErrorKind.HTTP, f"HTTP {status}: {error_message(text)}")


R = TypeVar("R", bound=Response)


async def exchange(pool: Pool, data: bytes, response: Response, ttft_timeout_s: float | None,
                   timeout_s: float | None, cancel_after_ns: int | None = None) -> bool:
    """One attempt: send `data` and feed the answer to `response`.

    True when the exchange ended (the caller judges the response); False when a failure was
    recorded instead, or the client's own abort (`cancel_after_ns` after sending: status
    `cancelled`, the token chunks received until then kept). A cancellation that is none of
    the timers' (Ctrl-C) is recorded as incomplete and re-raised.
    """
    record = response.record
    deadline = FirstTokenDeadline(ttft_timeout_s, record)
    overall = TotalDeadline(timeout_s)
    abort: ClientCancel | None = None
    conn: Connection | None = None
    record.sent_ns = perf_counter_ns()
    try:
        conn, connect_ns = await pool.acquire()
        record.connect_duration_ns = connect_ns
        response.conn = conn
        record.sent_ns = perf_counter_ns()
        if cancel_after_ns is not None:
            abort = ClientCancel(cancel_after_ns)
        response.end_ns = await conn.exchange(data, response)
    except asyncio.CancelledError:
        if abort is not None and abort.absorb():
            cancelled(record, cancel_after_ns)
            return False
        if deadline.absorb():
            fail(record, Status.ERROR, ErrorKind.TTFT_TIMEOUT, f"no first token within {ttft_timeout_s:g} s")
            return False
        if overall.absorb():
            fail(record, Status.ERROR, ErrorKind.TIMEOUT, f"no complete response within {timeout_s:g} s")
            return False
        fail(record, Status.INCOMPLETE, None, "cancelled before completion")
        raise
    except TRANSPORT_ERRORS as exc:
        transport_failure(record, exc, began=response.status is not None)
        if isinstance(exc, ConnectionLost) and response.status is None and record.connect_duration_ns is None:
            pool.peer_closes = True  # a kept-alive connection the server had closed as the request went out
        if isinstance(exc, ConnectionRefusedError) and (gone := pool.refusals.gone(perf_counter_ns())) is not None:
            raise TargetGone(gone, hint=GONE_HINT) from None
        return False
    finally:
        deadline.disarm()
        overall.disarm()
        if abort is not None:
            abort.disarm()
        if conn is not None:
            if response.end_ns is None:
                conn.abort()
            pool.release(conn)
    return True


def cancelled(record: RequestRecord, after_ns: int | None) -> None:
    """The client aborted the request on purpose (`--cancel-after`): not an error; what arrived is kept.

    Output tokens are the token chunks received before the abort (no usage comes after it).
    """
    fail(record, Status.CANCELLED, None, f"cancelled by the client {(after_ns or 0) / 1e6:g} ms after sending")
    if record.chunk_ns:
        record.output_tokens, record.output_tokens_source = len(record.chunk_ns), TokenSource.CHUNKS


def transport_failure(record: RequestRecord, exc: Exception, began: bool) -> None:
    """Record a transport failure; `began`: the response's head had arrived.

    A connection lost (or an OS error) before the response is `connect`, after it `broken`;
    broken body framing is `broken`; bytes that are not HTTP are `protocol`.
    """
    if isinstance(exc, BadFraming):
        kind = ErrorKind.BROKEN
    elif isinstance(exc, BadResponse):
        kind = ErrorKind.PROTOCOL
    else:  # ConnectionLost, OSError
        kind = ErrorKind.BROKEN if began else ErrorKind.CONNECT
    fail(record, Status.ERROR, kind, describe(exc))


async def retrying(attempt: Callable[[], Awaitable[R]], record: RequestRecord, retries: int) -> R:
    """Run `attempt` again while it ends in HTTP 429/503, up to `retries` more times; the last response.

    Between attempts: the server's Retry-After (else a backoff), and the record is reset.
    """
    tries = 0
    while True:
        response = await attempt()
        if tries >= retries or not retryable(record):
            return response
        await asyncio.sleep(retry_delay_s(response.headers.get("retry-after"), tries))
        reset_for_retry(record)
        tries += 1


def redact_error(record: RequestRecord, redact: Redactor) -> None:
    """Keep the record's error text redacted, then cut (in that order: a cut can split a key); and
    what else the server wrote into it (output text, response id, finish reason), which can echo a key."""
    if record.error is not None:
        record.error = redact(record.error)[:ERROR_SNIPPET]
    if not redact:
        return
    if record.output_text is not None:
        record.output_text = redact(record.output_text)
    if record.response_id is not None:
        record.response_id = redact(record.response_id)
    if record.finish_reason is not None:
        record.finish_reason = redact(record.finish_reason)


def redacted(exc: TargetError, redact: Redactor) -> TargetError:
    """`exc` (of its own class) with its text redacted and cut, for raising in its place (`from None`)."""
    return type(exc)(redact(str(exc))[:TARGET_MESSAGE], hint=exc.hint)


def cannot_reach(url: str, exc: BaseException, hint: str) -> TargetError:
    """The error of a discovery or probe request that got no answer; no connection at all (refused, no
    such host, TLS) is an `UnreachableTarget` (exit 2: the --target names no server)."""
    import aiohttp

    kind = UnreachableTarget if isinstance(exc, aiohttp.ClientConnectorError) else TargetError
    if url.startswith("https://") and isinstance(exc, aiohttp.ServerDisconnectedError):
        # TLS 1.3: a server that requires a client certificate closes the connection after the handshake
        hint = ("the server closed the connection after the TLS handshake: if it requires a client certificate "
                "(mutual TLS), pass --client-cert FILE (and --client-key FILE)")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # it answered: the trust is what is missing
        hint = ("the server's TLS certificate is not trusted: pass --ca-cert FILE (or point SSL_CERT_FILE at) the CA "
                "that signed it, or --insecure to skip the check")
    return kind(f"cannot reach {url}: {exc or type(exc).__name__}", hint=hint)


async def prewarm(pool: Pool, pool_size: int, wanted: int | None) -> list[str]:
    """Open connections ahead of the load (`wanted`; None: the pool's size); a note when fewer opened."""
    count = min(pool_size if wanted is None else wanted, pool_size, PREWARM_MAX)
    opened = await pool.prewarm(count)
    return [f"opened {opened} of {count} connections ahead of the load"] if opened < count else []


def take_spec(record: RequestRecord, spec: RequestSpec, max_tokens: int | None) -> None:
    """The request-side fields of a record: what was asked for and the prompt's token count."""
    record.max_tokens = max_tokens
    record.input_tokens = spec.input_tokens
    record.input_tokens_source = spec.input_tokens_source


def settle_tokens(record: RequestRecord, *, used: int | None, prompt: int | None, chunk_counts: list[int],
                  text: str | None, counter: TokenCounter | None, keep_text_for: int) -> None:
    """Once a request ended well: output tokens and their source, input tokens, per-chunk tokens, sample text.

    `used`/`prompt`: the server's counts (already checked with `as_count`); `chunk_counts`: its
    cumulative output count per token chunk, when it sent one. Output tokens are the server's
    count (unless below the number of token chunks: each carries ≥ 1), else the tokenizer's
    count of `text`, else one per token chunk.
    """
    chunks = len(record.chunk_ns)
    if used is not None and used < chunks:
        note(record, Anomaly.USAGE_BELOW_CHUNKS)
        used = None
    if used is not None:
        record.output_tokens, record.output_tokens_source = used, TokenSource.USAGE
    elif counter is not None and text is not None:
        record.output_tokens, record.output_tokens_source = counter.count(text), TokenSource.TOKENIZER
    elif chunks:
        record.output_tokens, record.output_tokens_source = chunks, TokenSource.CHUNKS
    if prompt is not None:
        record.input_tokens, record.input_tokens_source = prompt, TokenSource.USAGE
    if used is not None and chunk_counts and len(chunk_counts) == chunks:
        record.chunk_tokens = diffs(chunk_counts)
    if text is not None and record.index < keep_text_for:
        record.output_text = text


def stream_to_judge(record: RequestRecord, malformed: bytes | None, now: int) -> bool:
    """Once an event stream's body ended: True when its ending is still to judge.

    False when an event already failed the record, or when the stream held a malformed line.
    """
    if record.status is not Status.OK:
        return False
    if record.end_ns is None:
        record.end_ns = now
    if malformed is not None:
        fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"malformed SSE line: {malformed!r}")
        return False
    return True


def json_object(body: bytes, record: RequestRecord) -> dict[str, Any] | None:
    """A whole (non-streamed) body as a JSON object; None (and the record failed) when it is not one."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not JSON: {body[:RAW_KEEP]!r}")
        return None
    if not isinstance(obj, dict):
        fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not a JSON object: {body[:RAW_KEEP]!r}")
        return None
    return obj


def clean_ids(record: RequestRecord) -> None:
    """A response id or finish reason that is not a string is dropped or stringified."""
    if record.response_id is not None and not isinstance(record.response_id, str):
        record.response_id = None
    if record.finish_reason is not None and not isinstance(record.finish_reason, str):
        record.finish_reason = orjson.dumps(record.finish_reason).decode()


# record helpers ---------------------------------------------------------------------


def fail(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    """Mark the record failed (or incomplete) with `message`; it ends now unless it already ended."""
    record.status = status
    record.error_kind = kind
    record.error = message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()


def body_encoding(headers: dict[str, str]) -> str | None:
    """An answer's Content-Encoding when it is not plain (gzip, br, ...); None for none or identity."""
    encoding = headers.get("content-encoding", "").strip().lower()
    return encoding if encoding and encoding != "identity" else None


def fail_encoded(record: RequestRecord, encoding: str, now: int) -> None:
    """A 2xx answer whose body is compressed although the request asked for none."""
    fail(record, Status.ERROR, ErrorKind.PROTOCOL,
         f"the server sent a {encoding}-compressed body although the request asked for none (Accept-Encoding: "
         "identity); tokspeed reads uncompressed bodies only: turn compression off for this route (a proxy's gzip "
         "setting, say)")
    record.end_ns = now


def unparsed_event(data: bytes, record: RequestRecord, now: int) -> bool | None:
    """A streamed event that orjson refused. None: an empty `data:` (the SSE standard dispatches it;
    nothing to read, skip it). True: `[DONE]` with white space around it, the stream's end. False:
    bad JSON, and the request failed at `now`. Off the per-token path: only a refused payload gets here."""
    stripped = data.strip()
    if not stripped:
        return None
    if stripped == DONE:
        return True
    bad_json(record, data, now)
    return False


def bad_json(record: RequestRecord, data: bytes, now: int) -> None:
    """A streamed event that is not JSON: the request failed at `now`."""
    fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"bad JSON in stream: {data[:RAW_KEEP]!r}")
    record.end_ns = now


def bad_event(record: RequestRecord, exc: Exception) -> None:
    """A streamed event of the wrong shape."""
    fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected stream event ({describe(exc)})")


def bad_shape(record: RequestRecord, exc: Exception) -> None:
    """A whole (non-streamed) answer of the wrong shape."""
    fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected response shape ({describe(exc)})")


def note(record: RequestRecord, anomaly: Anomaly) -> None:
    if record.anomalies is None:
        record.anomalies = []
    record.anomalies.append(anomaly.value)


def as_count(value: object) -> int | None:
    """`value` when it is a token count (an int ≥ 0, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def diffs(cumulative: list[int]) -> list[int]:
    """Per-chunk counts from cumulative ones."""
    prev, out = 0, []
    for c in cumulative:
        out.append(c - prev)
        prev = c
    return out


def joined(parts: list[Any]) -> str:
    """Streamed text pieces as one string (a server may send non-string content: it is kept as JSON)."""
    try:
        return "".join(parts)
    except TypeError:
        return "".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in parts)


# messages ---------------------------------------------------------------------------


def error_object_text(obj: dict[str, Any]) -> str:
    """The message of an OpenAI-style error object, on one line (not truncated: redact first)."""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return one_line(str(err.get("message") or err))
    return one_line(str(err))


def error_message(text: str) -> str:
    """An HTTP error body as one line: the error object's message when it is JSON."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return one_line(text)
    if isinstance(obj, dict):
        return error_object_text(obj)
    return one_line(text)


def one_line(text: str) -> str:
    return " ".join(text.split())


def describe(exc: BaseException) -> str:
    return one_line(f"{type(exc).__name__}: {exc}")
