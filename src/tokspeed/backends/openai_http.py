"""OpenAI-compatible HTTP backend: /v1/completions and /v1/chat/completions over aiohttp.

The per-token path (`_read_stream` and `_on_event`) is the hottest code in
tokspeed: one `perf_counter_ns()` per network read, one orjson parse per
event, no per-token allocation beyond the timestamp.

`sent_ns` is taken when aiohttp hands the request's bytes to the transport
(its chunk-sent trace hook fires just before the write), i.e. after any wait
for a pooled connection and any TCP connect: the first byte of the request,
as DESIGN.md defines it. The headers-sent hook is not used for this: aiohttp
buffers headers to send them with the body, and before Python 3.12 writes the
body from a separate task, so under load that hook fires milliseconds early
(measured: +6 ms TTFT at 64 streams on 2 cores).

How a request ends (one record, never an exception): `connect` before a
response, `http` for a 4xx/5xx answer, `broken` when the connection drops or
the stream stops short (no finish_reason, no [DONE]) after the response began,
`protocol` for bad JSON, a malformed SSE line or an event of the wrong shape,
`stream` for an error object inside the stream, `ttft_timeout` and `timeout`
for the two deadlines. A stream that closes cleanly after its finish_reason
but without `data: [DONE]` is ok, with the `missing_done` anomaly. Error texts
are redacted (API key, secret headers) before they are truncated and kept.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.deadline import FirstTokenDeadline, TotalDeadline
from tokspeed.backends.http1 import (
    BadFraming,
    BadResponse,
    Connection,
    ConnectionLost,
    Endpoint,
    Pool,
    request_bytes,
    request_head,
)
from tokspeed.backends.redact import Redactor, redact_url
from tokspeed.backends.retry import reset_for_retry, retry_delay_s, retryable
from tokspeed.backends.sse import SSEDecoder
from tokspeed.errors import TargetError
from tokspeed.records import (
    Anomaly,
    ErrorKind,
    RequestRecord,
    RequestSpec,
    Status,
    TokenSource,
)
from tokspeed.workload.tokens import TokenCounter

_DONE = b"[DONE]"
_PATHS = {"chat": "chat/completions", "completions": "completions", "embeddings": "embeddings"}
_ERROR_SNIPPET = 300  # characters of an error message kept (after redaction)
_TARGET_MESSAGE = 500  # characters of a TargetError message kept (after redaction)
PREWARM_MAX = 4096  # connections opened at start, so the first wave of requests pays no connect
_RAW_KEEP = 4096  # bytes of an unparseable body quoted in a message before redaction
# a server's event or body of the wrong shape (a list where an object belongs, ...)
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


class OpenAIHTTPBackend:
    """Streams (or not) completions from an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "chat",
        stream: bool = True,
        model: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        sampling: dict[str, Any] | None = None,
        include_usage: bool = True,
        timeout_s: float = 600.0,
        ttft_timeout_s: float | None = None,
        retries: int = 0,
        pool_size: int = 64,
        prewarm: int | None = None,
        counter: TokenCounter | None = None,
        keep_text_for: int = 3,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.stream = stream
        self.model = model
        self.include_usage = include_usage and stream
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._extra = dict(extra_body or {})
        self._sampling = {k: v for k, v in (sampling or {}).items() if v not in (None, [], "")}
        self._timeout_s = timeout_s
        self._ttft_timeout_s = ttft_timeout_s
        self._retries = retries
        self._redact = Redactor.for_target(base_url, api_key, self._headers)
        self._pool_size = pool_size
        self._prewarm = prewarm  # connections opened at start (None: pool_size)
        self._counter = counter
        self._keep_text_for = keep_text_for
        self._session: aiohttp.ClientSession | None = None  # discovery and the probe
        self._pool: Pool | None = None  # the requests themselves
        self._url = f"{self.base_url}/{_PATHS.get(api, 'completions')}"
        self._endpoint = Endpoint(self._url)
        self._head = request_head("POST", urlsplit(self._url).path, self._endpoint, self._headers)

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        """Open the session and probe the target; a TargetError's text never holds a secret."""
        try:
            return await self._start()
        except TargetError as exc:
            raise TargetError(self._redact(str(exc))[:_TARGET_MESSAGE], hint=exc.hint) from None

    async def _start(self) -> TargetInfo:
        self._session = aiohttp.ClientSession(
            headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout_s)
        )
        self._pool = Pool(self._endpoint, self._pool_size)
        notes: list[str] = []
        if self.model is None:
            self.model = await self._discover_model()
        if not await self._probe():
            self.include_usage = False
            notes.append("server rejected stream_options.include_usage; output tokens counted another way")
        wanted = min(self._pool_size if self._prewarm is None else self._prewarm, self._pool_size, PREWARM_MAX)
        opened = await self._pool.prewarm(wanted)
        if opened < wanted:
            notes.append(f"opened {opened} of {wanted} connections ahead of the load")
        return TargetInfo(
            kind="openai-http",
            url=redact_url(self.base_url),
            model=self.model,
            api=self.api,
            stream=self.stream,
            include_usage=self.include_usage,
            server_version=await self._server_version(),
            notes=tuple(notes),
        )

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # discovery --------------------------------------------------------------
    async def _discover_model(self) -> str:
        body = await self._get_json(f"{self.base_url}/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not data:
            raise TargetError(
                f"{self.base_url}/models lists no model",
                hint="pass --model NAME",
            )
        return str(data[0].get("id"))

    async def _server_version(self) -> str | None:
        root = self.base_url.removesuffix("/v1")
        try:
            body = await self._get_json(f"{root}/version", quiet=True)
        except TargetError:
            return None
        return str(body.get("version")) if isinstance(body, dict) and body.get("version") else None

    async def _get_json(self, url: str, quiet: bool = False) -> Any:
        assert self._session is not None
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                if resp.status != 200:
                    text = await resp.text(errors="replace")
                    hint = (
                        _hint_for_status(resp.status)
                        if resp.status in (401, 403, 404)
                        else "check --target (it should end in /v1) and --api-key; or pass --model"
                    )
                    raise TargetError(f"GET {url} answered HTTP {resp.status}: {_error_message(text)}", hint=hint)
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            if quiet:
                raise TargetError(str(exc)) from exc
            raise TargetError(
                f"cannot reach {url}: {exc or type(exc).__name__}",
                hint="is the server running? check --target, e.g. http://127.0.0.1:8000/v1",
            ) from exc

    async def _probe(self) -> bool:
        """Send a 1-token request to check the target works; False if it refuses stream_options."""
        status, text = await self._post_probe()
        if status < 400:
            return True
        if self.include_usage and status in (400, 422) and "stream_options" in text:
            self.include_usage = False
            status, text = await self._post_probe()
            if status < 400:
                return False
        message = self._redact(f"probe request to {self._url} failed: HTTP {status}: {_error_message(text)}")
        raise TargetError(message[:_ERROR_SNIPPET], hint=_hint_for_status(status))

    def probe_body(self) -> dict[str, Any]:
        """The smallest request shaped like the real ones: 1 token, or `min_tokens` when the body sets it."""
        floor = self._extra.get("min_tokens")
        tokens = floor if isinstance(floor, int) and not isinstance(floor, bool) and floor > 1 else 1
        return self._body(RequestSpec(index=-1, prompt="Hi", max_tokens=tokens))

    async def _post_probe(self) -> tuple[int, str]:
        assert self._session is not None
        try:
            async with self._session.post(self._url, data=orjson.dumps(self.probe_body())) as resp:
                return resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TargetError(
                f"cannot reach {self._url}: {exc or type(exc).__name__}",
                hint="is the server running? check --target, e.g. http://127.0.0.1:8000/v1",
            ) from exc

    # requests ---------------------------------------------------------------
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
        if self.api == "embeddings":
            return {"model": self.model, "input": spec.prompt_text(), **self._extra}
        body: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            body["messages"] = spec.as_messages()
        else:
            body["prompt"] = spec.prompt_text()
        if spec.max_tokens is not None:
            body["max_tokens"] = spec.max_tokens
        body.update(self._sampling)
        body["stream"] = self.stream
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self._extra)
        return body

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send `spec` (retrying 429/503 up to `retries` times) and fill `record`; never raises for failures."""
        assert self._pool is not None, "start() first"
        data = request_bytes(self._head, orjson.dumps(self._body(spec)))
        record.max_tokens = spec.max_tokens if self.api != "embeddings" else None
        record.input_tokens = spec.input_tokens
        record.input_tokens_source = spec.input_tokens_source
        keep_text = record.index < self._keep_text_for or self._counter is not None or spec.keep_text
        try:
            for attempt in range(self._retries + 1):
                state = _StreamState(keep_text)
                await self._attempt(data, record, state)
                if attempt == self._retries or not retryable(record):
                    break
                await asyncio.sleep(retry_delay_s(state.retry_after, attempt))
                reset_for_retry(record)
            if spec.keep_text and record.output_text is None and record.status is Status.OK:
                record.output_text = _joined(state.text or [])
        finally:
            if record.error is not None:
                record.error = self._redact(record.error)[:_ERROR_SNIPPET]

    async def _attempt(self, data: bytes, record: RequestRecord, state: _StreamState) -> None:
        """One HTTP exchange: every outcome lands in `record` (a Ctrl-C cancellation is re-raised)."""
        assert self._pool is not None
        deadline = FirstTokenDeadline(self._ttft_timeout_s, record)
        overall = TotalDeadline(self._timeout_s)
        response = _Response(record, state, self.stream)
        conn: Connection | None = None
        record.sent_ns = perf_counter_ns()
        try:
            conn, connect_ns = await self._pool.acquire()
            record.connect_duration_ns = connect_ns
            response.conn = conn
            record.sent_ns = perf_counter_ns()
            response.end_ns = await conn.exchange(data, response)
        except asyncio.CancelledError:
            if deadline.absorb():
                _fail(record, Status.ERROR, ErrorKind.TTFT_TIMEOUT, f"no first token within {self._ttft_timeout_s:g} s")
                return
            if overall.absorb():
                _fail(record, Status.ERROR, ErrorKind.TIMEOUT, f"no complete response within {self._timeout_s:g} s")
                return
            _fail(record, Status.INCOMPLETE, None, "cancelled before completion")
            raise
        except ConnectionLost as exc:
            kind = ErrorKind.BROKEN if response.status is not None else ErrorKind.CONNECT
            _fail(record, Status.ERROR, kind, _describe(exc))
            return
        except BadFraming as exc:
            _fail(record, Status.ERROR, ErrorKind.BROKEN, _describe(exc))
            return
        except BadResponse as exc:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, _describe(exc))
            return
        except OSError as exc:  # connect refused, unreachable host, DNS, TLS
            _fail(record, Status.ERROR, ErrorKind.CONNECT, _describe(exc))
            return
        finally:
            deadline.disarm()
            overall.disarm()
            if conn is not None:
                if response.end_ns is None:
                    conn.abort()
                self._pool.release(conn)
            _clean_ids(record)
        response.conclude()
        self._finish(record, state)

    def _finish(self, record: RequestRecord, state: _StreamState) -> None:
        """Per request, once it ended well (ids already cleaned): token counts and their sources, sample text."""
        if record.status is not Status.OK:
            return
        _sanitise(state)
        text = _joined(state.text) if state.text is not None else None
        usage = state.usage_completion
        if usage is not None and usage < len(record.chunk_ns):  # each token chunk carries ≥ 1 token
            _note(record, Anomaly.USAGE_BELOW_CHUNKS)
            usage = None
        if usage is not None:
            record.output_tokens = usage
            record.output_tokens_source = TokenSource.USAGE
        elif self._counter is not None and text is not None:
            record.output_tokens = self._counter.count(text)
            record.output_tokens_source = TokenSource.TOKENIZER
        elif record.chunk_ns:
            record.output_tokens = len(record.chunk_ns)
            record.output_tokens_source = TokenSource.CHUNKS
        if state.usage_prompt is not None:
            record.input_tokens = state.usage_prompt
            record.input_tokens_source = TokenSource.USAGE
        if state.usage_cached is not None:
            record.cached_tokens = _cached_tokens(state.usage_cached)
        if text is not None and record.index < self._keep_text_for:
            record.output_text = text
        if usage is not None and state.chunk_usage and len(state.chunk_usage) == len(record.chunk_ns):
            record.chunk_tokens = _diffs(state.chunk_usage)


class _StreamState:
    """Per-request scratch space while a response streams in."""

    __slots__ = ("chunk_usage", "done", "retry_after", "text", "usage_cached", "usage_completion", "usage_prompt")

    def __init__(self, keep_text: bool) -> None:
        self.text: list[str] | None = [] if keep_text else None
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.usage_cached: Any = None  # usage.prompt_tokens_details, as sent (read once the request ended)
        self.chunk_usage: list[int] = []  # cumulative completion_tokens per token chunk, when sent
        self.done = False
        self.retry_after: str | None = None  # the Retry-After header of an HTTP error answer


def _sanitise(state: _StreamState) -> None:
    """Per request: drop counts of the wrong type a server sent, so records stay well-typed."""
    state.usage_completion = _count(state.usage_completion)
    state.usage_prompt = _count(state.usage_prompt)
    if state.chunk_usage and not all(_count(c) is not None for c in state.chunk_usage):
        state.chunk_usage = []


def _clean_ids(record: RequestRecord) -> None:
    """Per request: a response id or finish reason that is not a string is dropped or stringified."""
    if record.response_id is not None and not isinstance(record.response_id, str):
        record.response_id = None
    if record.finish_reason is not None and not isinstance(record.finish_reason, str):
        record.finish_reason = orjson.dumps(record.finish_reason).decode()


def _cached_tokens(details: object) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` (prefix-cache hits), when it is a token count."""
    return _count(details.get("cached_tokens")) if isinstance(details, dict) else None


def _count(value: object) -> int | None:
    """`value` when it is a token count (an int ≥ 0, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _joined(parts: list[Any]) -> str:
    try:
        return "".join(parts)
    except TypeError:  # a server sent non-string content
        return "".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in parts)


def _note(record: RequestRecord, anomaly: Anomaly) -> None:
    if record.anomalies is None:
        record.anomalies = []
    record.anomalies.append(anomaly.value)


class _Response:
    """The sink of one HTTP exchange: parses SSE events (or collects a body) as reads arrive.

    Called from the connection's `data_received`, so it runs on the per-token path:
    it timestamps nothing itself (`now` is the read's time) and detaches the
    connection as soon as the stream is over (`[DONE]`, an error event, bad JSON).
    """

    __slots__ = ("conn", "decoder", "end_ns", "headers", "over", "parts", "record", "state", "status", "stream")

    def __init__(self, record: RequestRecord, state: _StreamState, stream: bool) -> None:
        self.record = record
        self.state = state
        self.stream = stream
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.conn: Connection | None = None
        self.decoder: SSEDecoder | None = None  # set when the body is an event stream
        self.parts: list[bytes] = []  # a body that is not an event stream
        self.end_ns: int | None = None  # when the exchange ended (or the stream was over)
        self.over = False

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if status < 400 and self.stream and headers.get("content-type", "").startswith("text/event-stream"):
            self.decoder = SSEDecoder()

    def on_body(self, data: bytes, now: int) -> None:
        decoder = self.decoder
        if decoder is None:
            self.parts.append(data)
            return
        record, state = self.record, self.state
        try:
            for event in decoder.feed(data):
                if _on_event(event, now, record, state):
                    self._over(now)
                    return
        except _SHAPE_ERRORS as exc:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected stream event ({_describe(exc)})")
            record.end_ns = now
            self._over(now)

    def _over(self, now: int) -> None:
        self.over = True
        self.end_ns = now
        if self.conn is not None:
            self.conn.detach(now)

    def conclude(self) -> None:
        """After the exchange: judge the stream's ending, or parse the whole body or the error answer."""
        record = self.record
        assert self.status is not None and self.end_ns is not None
        if self.status >= 400:
            _fail_http(self.status, self.headers, b"".join(self.parts), record, self.state)
        elif self.decoder is not None:
            if self.over:
                _end_of_stream(record, self.state, self.decoder, self.end_ns)
            else:
                _stream_ended(record, self.state, self.decoder, self.end_ns)
        else:
            record.end_ns = self.end_ns
            _take_body(b"".join(self.parts), record, self.state)


def _fail_http(status: int, headers: dict[str, str], body: bytes, record: RequestRecord, state: _StreamState) -> None:
    record.http_status = status
    state.retry_after = headers.get("retry-after")
    text = body.decode("utf-8", errors="replace")
    _fail(record, Status.ERROR, ErrorKind.HTTP, f"HTTP {status}: {_error_message(text)}")


def _stream_ended(record: RequestRecord, state: _StreamState, decoder: SSEDecoder, now: int) -> None:
    """The body ended before the stream said it was over: flush the decoder, then judge the ending."""
    if not record.chunk_ns:
        now = perf_counter_ns()
    try:
        for data in decoder.close():
            if _on_event(data, now, record, state):
                break
    except _SHAPE_ERRORS as exc:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected stream event ({_describe(exc)})")
        return
    _end_of_stream(record, state, decoder, now)


def _end_of_stream(record: RequestRecord, state: _StreamState, decoder: SSEDecoder, now: int) -> None:
    """Per request, once the body ended: judge how the stream ended."""
    if record.status is not Status.OK:  # failed by an event (bad JSON, error object)
        return
    _end(record, now)
    if decoder.malformed is not None:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"malformed SSE line: {decoder.malformed!r}")
    elif state.done:
        if record.finish_reason is None and record.chunk_ns:  # e.g. llama-cpp-python interrupting a stream
            _note(record, Anomaly.MISSING_FINISH_REASON)
        return
    elif not record.chunk_ns:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, "stream ended without data: [DONE] and without tokens")
    elif record.finish_reason is None:
        _fail(record, Status.ERROR, ErrorKind.BROKEN,
              f"stream ended after {len(record.chunk_ns)} token chunks without finish_reason or data: [DONE]")
    else:
        _note(record, Anomaly.MISSING_DONE)


def _end(record: RequestRecord, now: int) -> None:
    if record.end_ns is None:
        record.end_ns = now


def _on_event(data: bytes, now: int, record: RequestRecord, state: _StreamState) -> bool:
    """Handle one SSE event; True when the stream is finished (done or failed). The per-token path."""
    if data == _DONE:
        state.done = True
        return True
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"bad JSON in stream: {data[:_RAW_KEEP]!r}")
        record.end_ns = now
        return True
    if type(obj) is not dict:
        return False
    choices = obj.get("choices")
    tokens = False
    if choices:
        choice = choices[0]
        delta = choice.get("delta")
        content = delta.get("content") if delta is not None else choice.get("text")
        finish = choice.get("finish_reason")
        if finish:
            record.finish_reason = finish
        if content:
            tokens = True
            if record.first_content_ns is None:
                record.first_content_ns = now
            if state.text is not None:
                state.text.append(content)
        elif delta is not None and (delta.get("reasoning_content") or delta.get("reasoning")):
            tokens = True
            record.reasoning_chunks += 1
        if tokens:
            if record.first_token_ns is None:
                record.first_token_ns = now
            record.chunk_ns.append(now)
    if record.response_id is None:
        record.response_id = obj.get("id")
    usage = obj.get("usage")
    if usage:
        state.usage_completion = usage.get("completion_tokens", state.usage_completion)
        state.usage_prompt = usage.get("prompt_tokens", state.usage_prompt)
        state.usage_cached = usage.get("prompt_tokens_details", state.usage_cached)
        if tokens and state.usage_completion is not None:
            state.chunk_usage.append(state.usage_completion)
    elif not choices and ("error" in obj or obj.get("object") == "error"):
        _fail(record, Status.ERROR, ErrorKind.STREAM, _stream_error_text(obj))
        record.end_ns = now
        return True
    return False


def _take_body(body: bytes, record: RequestRecord, state: _StreamState) -> None:
    """A non-streaming response (or a server that ignored stream=true)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not JSON: {body[:_RAW_KEEP]!r}")
        return
    if not isinstance(obj, dict):
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not a JSON object: {body[:_RAW_KEEP]!r}")
    elif "error" in obj or obj.get("object") == "error":
        _fail(record, Status.ERROR, ErrorKind.STREAM, _stream_error_text(obj))
    else:
        try:
            _take_whole(obj, record, state)
        except _SHAPE_ERRORS as exc:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected response shape ({_describe(exc)})")


def _take_whole(obj: dict[str, Any], record: RequestRecord, state: _StreamState) -> None:
    if obj.get("object") == "list":  # /v1/embeddings: vectors, and usage.prompt_tokens
        _take_embeddings(obj, record, state)
        return
    record.response_id = obj.get("id")
    choices = obj.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content") if message else choice.get("text")
    record.finish_reason = choice.get("finish_reason")
    if state.text is not None and text:
        state.text.append(text)
    usage = obj.get("usage") or {}
    state.usage_completion = usage.get("completion_tokens")
    state.usage_prompt = usage.get("prompt_tokens")
    state.usage_cached = usage.get("prompt_tokens_details")
    state.done = True


def _take_embeddings(obj: dict[str, Any], record: RequestRecord, state: _StreamState) -> None:
    """An embeddings answer: ok when it holds at least one vector; no output tokens."""
    data = obj.get("data")
    if not data or not isinstance(data[0].get("embedding"), (list, str)):
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, "embeddings response without data[0].embedding")
        return
    record.response_id = obj.get("id")  # vLLM names its answers; OpenAI's do not
    usage = obj.get("usage") or {}
    state.usage_prompt = usage.get("prompt_tokens")
    state.usage_completion = 0
    state.done = True


def _fail(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    record.status = status
    record.error_kind = kind
    record.error = message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()


def _diffs(cumulative: list[int]) -> list[int]:
    prev = 0
    out = []
    for c in cumulative:
        out.append(c - prev)
        prev = c
    return out


def _stream_error_text(obj: dict[str, Any]) -> str:
    """The message of an OpenAI-style error object, on one line (not truncated: redact first)."""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return _one_line(str(err.get("message") or err))
    return _one_line(str(err))


def _error_message(text: str) -> str:
    """An HTTP error body as one line: the error object's message when it is JSON."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _one_line(text)
    if isinstance(obj, dict):
        return _stream_error_text(obj)
    return _one_line(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _describe(exc: BaseException) -> str:
    return _one_line(f"{type(exc).__name__}: {exc}")


def _hint_for_status(status: int) -> str:
    if status in (401, 403):
        return "pass --api-key or set OPENAI_API_KEY"
    if status == 404:
        return "check --target (it should end in /v1), --api and --model"
    if status in (400, 422):
        return "the server rejected the request body: check --model, --extra-body and sampling flags"
    return "the server failed a 1-token probe request; check its logs"
