"""The backend for servers' native streaming APIs (TGI, Triton, Ollama, llama.cpp, SGLang).

It shares the lean HTTP/1.1 transport (`backends/http1.py`), the SSE decoder, the deadlines,
retries and error classification of the OpenAI backend, and fills the same `RequestRecord`
fields the same way: one `perf_counter_ns()` per network read, TTFT at the first token-bearing
event, one chunk time per token-bearing event. What differs per server (request body, event
shape, end marker, reported counts and timings) lives in one small `NativeProtocol` module each.

Output tokens come from the server's own count when it sends one (TokenSource.USAGE), else the
tokenizer, else one per token-bearing event. The server's timings and counts are kept in
`record.server_timing` (ms; see `protocol.TIMING_KEYS`).
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
from tokspeed.backends.native.ndjson import NDJSONDecoder
from tokspeed.backends.native.protocol import NativeProtocol, NativeState, as_count
from tokspeed.backends.openai_http import (
    PREWARM_MAX,
    _describe,
    _error_message,
    _fail,
    _joined,
    _note,
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
_ERROR_SNIPPET = 300
_RAW_KEEP = 4096
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


class NativeHTTPBackend:
    """Streams (or not) generations from a server's native API, described by `protocol`."""

    def __init__(
        self,
        base_url: str,
        protocol: NativeProtocol,
        *,
        stream: bool = True,
        model: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        sampling: dict[str, Any] | None = None,
        timeout_s: float = 600.0,
        ttft_timeout_s: float | None = None,
        retries: int = 0,
        pool_size: int = 64,
        prewarm: int | None = None,
        counter: TokenCounter | None = None,
        keep_text_for: int = 3,
    ) -> None:
        self.base_url = server_root(base_url)
        self.protocol = protocol
        self.stream = stream
        self.model = model
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
        self._prewarm = prewarm
        self._counter = counter
        self._keep_text_for = keep_text_for
        self._session: aiohttp.ClientSession | None = None
        self._pool: Pool | None = None
        self._url = ""
        self._head = b""

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        """Discover the model (when needed), probe with a 1-token request, open connections."""
        try:
            return await self._start()
        except TargetError as exc:
            raise TargetError(self._redact(str(exc))[:500], hint=exc.hint) from None

    async def _start(self) -> TargetInfo:
        self._session = aiohttp.ClientSession(
            headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout_s)
        )
        info = await self._info()
        if self.model is None:
            self.model = self.protocol.model_from(info)
            if self.model is None:
                path = self.protocol.info_path(None)
                raise TargetError(
                    f"cannot tell which model {self.base_url} serves ({path or 'no discovery endpoint'} did not say)",
                    hint="pass --model NAME",
                )
        self._url = f"{self.base_url}{self.protocol.path(self.model, self.stream)}"
        endpoint = Endpoint(self._url)
        self._head = request_head("POST", urlsplit(self._url).path, endpoint, self._headers)
        self._pool = Pool(endpoint, self._pool_size)
        await self._probe()
        notes: list[str] = []
        wanted = min(self._pool_size if self._prewarm is None else self._prewarm, self._pool_size, PREWARM_MAX)
        opened = await self._pool.prewarm(wanted)
        if opened < wanted:
            notes.append(f"opened {opened} of {wanted} connections ahead of the load")
        return TargetInfo(
            kind=f"{self.protocol.name}-http",
            url=redact_url(self.base_url),
            model=self.model,
            api=self.protocol.name,
            stream=self.stream,
            include_usage=False,
            server_version=self.protocol.version_from(info),
            notes=tuple(notes),
        )

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _info(self) -> Any:
        """The protocol's discovery answer (None when it has none, or when the model is known and it failed)."""
        path = self.protocol.info_path(self.model)
        if path is None:
            return None
        assert self._session is not None
        url = f"{self.base_url}{path}"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                if resp.status == 200:
                    return await resp.json(content_type=None)
                text = await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise TargetError(
                f"cannot reach {url}: {exc or type(exc).__name__}",
                hint=f"is the server running? check --target (the server's root URL) and --api {self.protocol.name}",
            ) from exc
        if self.model is not None and not self.protocol.verifies_model:
            return None  # discovery is optional when the model is named (Triton checks it)
        raise TargetError(
            f"GET {url} answered HTTP {resp.status}: {_error_message(text)}",
            hint=f"check --target, --api {self.protocol.name} and --model",
        )

    def probe_body(self) -> dict[str, Any]:
        return self._body(RequestSpec(index=-1, prompt="Hi", max_tokens=1))

    async def _probe(self) -> None:
        assert self._session is not None
        try:
            async with self._session.post(self._url, data=orjson.dumps(self.probe_body())) as resp:
                status, text = resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TargetError(
                f"cannot reach {self._url}: {exc or type(exc).__name__}",
                hint="is the server running? check --target",
            ) from exc
        if status >= 400:
            message = self._redact(f"probe request to {self._url} failed: HTTP {status}: {_error_message(text)}")
            raise TargetError(message[:_ERROR_SNIPPET], hint=f"check --target, --api {self.protocol.name} and --model")

    # requests ---------------------------------------------------------------
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
        body = self.protocol.body(spec, self.model, self.stream, self._sampling)
        body.update(self._extra)
        return body

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send `spec` (retrying 429/503 up to `retries` times) and fill `record`; never raises for failures."""
        assert self._pool is not None, "start() first"
        data = request_bytes(self._head, orjson.dumps(self._body(spec)))
        record.max_tokens = spec.max_tokens
        record.input_tokens = spec.input_tokens
        record.input_tokens_source = spec.input_tokens_source
        keep_text = record.index < self._keep_text_for or self._counter is not None
        try:
            for attempt in range(self._retries + 1):
                state = NativeState([] if keep_text else None)
                await self._attempt(data, record, state)
                if attempt == self._retries or not retryable(record):
                    break
                await asyncio.sleep(retry_delay_s(state.retry_after, attempt))
                reset_for_retry(record)
        finally:
            if record.error is not None:
                record.error = self._redact(record.error)[:_ERROR_SNIPPET]

    async def _attempt(self, data: bytes, record: RequestRecord, state: NativeState) -> None:
        """One HTTP exchange: every outcome lands in `record` (a Ctrl-C cancellation is re-raised)."""
        assert self._pool is not None
        deadline = FirstTokenDeadline(self._ttft_timeout_s, record)
        overall = TotalDeadline(self._timeout_s)
        response = _NativeResponse(record, state, self.protocol, self.stream)
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
        except (BadResponse, OSError) as exc:
            kind = ErrorKind.PROTOCOL if isinstance(exc, BadResponse) else ErrorKind.CONNECT
            _fail(record, Status.ERROR, kind, _describe(exc))
            return
        finally:
            deadline.disarm()
            overall.disarm()
            if conn is not None:
                if response.end_ns is None:
                    conn.abort()
                self._pool.release(conn)
        response.conclude()
        self._finish(record, state)

    def _finish(self, record: RequestRecord, state: NativeState) -> None:
        """Per request, once it ended well: token counts and their sources, server timings, sample text."""
        if record.status is not Status.OK:
            return
        if record.finish_reason is not None and not isinstance(record.finish_reason, str):
            record.finish_reason = orjson.dumps(record.finish_reason).decode()
        text = _joined(state.text) if state.text is not None else None
        used = as_count(state.output_tokens)
        if used is not None and used < len(record.chunk_ns):  # each token event carries ≥ 1 token
            _note(record, Anomaly.USAGE_BELOW_CHUNKS)
            used = None
        if used is not None:
            record.output_tokens, record.output_tokens_source = used, TokenSource.USAGE
        elif self._counter is not None and text is not None:
            record.output_tokens, record.output_tokens_source = self._counter.count(text), TokenSource.TOKENIZER
        elif record.chunk_ns:
            record.output_tokens, record.output_tokens_source = len(record.chunk_ns), TokenSource.CHUNKS
        if as_count(state.prompt_tokens) is not None:
            record.input_tokens, record.input_tokens_source = state.prompt_tokens, TokenSource.USAGE
        if used is not None and state.chunk_counts and len(state.chunk_counts) == len(record.chunk_ns):
            record.chunk_tokens = _diffs(state.chunk_counts)
        if state.server:
            record.server_timing = dict(state.server)
        if text is not None and record.index < self._keep_text_for:
            record.output_text = text


def server_root(url: str) -> str:
    """The server's root URL: a trailing `/` or `/v1` (the OpenAI prefix, often pasted by habit) is dropped."""
    return url.rstrip("/").removesuffix("/v1")


class _NativeResponse:
    """The sink of one HTTP exchange: splits the stream into JSON events and hands them to the protocol."""

    __slots__ = ("conn", "decoder", "end_ns", "headers", "over", "parts", "protocol", "record", "state", "status",
                 "stream")

    def __init__(self, record: RequestRecord, state: NativeState, protocol: NativeProtocol, stream: bool) -> None:
        self.record = record
        self.state = state
        self.protocol = protocol
        self.stream = stream
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.conn: Connection | None = None
        self.decoder: SSEDecoder | NDJSONDecoder | None = None
        self.parts: list[bytes] = []
        self.end_ns: int | None = None
        self.over = False

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if self.record.response_id is None:  # native bodies carry no id; proxies and the simulator send this
            self.record.response_id = headers.get("x-request-id")
        if status >= 400:
            return
        self.protocol.on_headers(headers, self.state)
        if not self.stream:
            return
        if self.protocol.framing == "ndjson":
            self.decoder = NDJSONDecoder()
        elif headers.get("content-type", "").startswith("text/event-stream"):
            self.decoder = SSEDecoder()

    def on_body(self, data: bytes, now: int) -> None:
        decoder = self.decoder
        if decoder is None:
            self.parts.append(data)
            return
        try:
            for event in decoder.feed(data):
                if self._event(event, now):
                    self._over(now)
                    return
        except _SHAPE_ERRORS as exc:
            _fail(self.record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected stream event ({_describe(exc)})")
            self.record.end_ns = now
            self._over(now)

    def _event(self, data: bytes, now: int) -> bool:
        """One event's payload; True when the stream is over (its end marker, an error, bad JSON)."""
        record = self.record
        if data == _DONE:
            self.state.done = True
            return True
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"bad JSON in stream: {data[:_RAW_KEEP]!r}")
            record.end_ns = now
            return True
        if type(obj) is not dict:
            return False
        if "error" in obj:
            message = self.protocol.error_text(obj)
            if message is not None:
                _fail(record, Status.ERROR, ErrorKind.STREAM, " ".join(message.split()))
                record.end_ns = now
                return True
        return self.protocol.on_event(obj, now, record, self.state)

    def _over(self, now: int) -> None:
        self.over = True
        self.end_ns = now
        if self.conn is not None:
            self.conn.detach(now)

    def conclude(self) -> None:
        """After the exchange: judge the stream's ending, or parse the whole body or the error answer."""
        record, state = self.record, self.state
        assert self.status is not None and self.end_ns is not None
        if self.status >= 400:
            record.http_status = self.status
            state.retry_after = self.headers.get("retry-after")
            text = b"".join(self.parts).decode("utf-8", errors="replace")
            _fail(record, Status.ERROR, ErrorKind.HTTP, f"HTTP {self.status}: {_error_message(text)}")
        elif self.decoder is not None:
            if not self.over:
                self._flush()
            self._judge_end()
        else:
            record.end_ns = self.end_ns
            self._whole(b"".join(self.parts))

    def _flush(self) -> None:
        """The body ended before the stream's end marker: take what the decoder still holds."""
        assert self.decoder is not None and self.end_ns is not None
        try:
            for data in self.decoder.close():
                if self._event(data, self.end_ns):
                    return
        except _SHAPE_ERRORS as exc:
            _fail(self.record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected stream event ({_describe(exc)})")

    def _judge_end(self) -> None:
        record, state = self.record, self.state
        if record.status is not Status.OK:
            return
        if record.end_ns is None:
            record.end_ns = self.end_ns
        assert self.decoder is not None
        if self.decoder.malformed is not None:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"malformed SSE line: {self.decoder.malformed!r}")
        elif state.done:
            return
        elif not record.chunk_ns:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, "stream ended without tokens and without its end marker")
        elif not self.protocol.ends_on_close:
            _fail(record, Status.ERROR, ErrorKind.BROKEN,
                  f"stream ended after {len(record.chunk_ns)} token events without its end marker")

    def _whole(self, body: bytes) -> None:
        record = self.record
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not JSON: {body[:_RAW_KEEP]!r}")
            return
        if not isinstance(obj, dict):
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not a JSON object: {body[:_RAW_KEEP]!r}")
            return
        message = self.protocol.error_text(obj) if "error" in obj else None
        if message is not None:
            _fail(record, Status.ERROR, ErrorKind.STREAM, " ".join(message.split()))
            return
        try:
            self.protocol.on_whole(obj, record, self.state)
        except _SHAPE_ERRORS as exc:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"unexpected response shape ({_describe(exc)})")
            return
        self.state.done = True


def _diffs(cumulative: list[int]) -> list[int]:
    prev, out = 0, []
    for c in cumulative:
        out.append(c - prev)
        prev = c
    return out
