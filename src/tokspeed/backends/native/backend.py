"""The backend for servers' native streaming APIs (TGI, Triton, Ollama, llama.cpp, SGLang).

It shares the lean HTTP/1.1 transport (`backends/http1.py`), the SSE decoder, and the attempt,
deadlines, retries, error classification and redaction of the OpenAI backend (`backends/exchange.py`),
and fills the same `RequestRecord` fields the same way: one `perf_counter_ns()` per network read,
TTFT at the first token-bearing event, one chunk time per token-bearing event. What differs per
server (request body, event shape, end marker, reported counts and timings) lives in one small
`NativeProtocol` module each.

Output tokens come from the server's own count when it sends one (TokenSource.USAGE), else the
tokenizer, else one per token-bearing event. The server's timings and counts are kept in
`record.server_timing` (ms; see `protocol.TIMING_KEYS`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.credentials import redact_url
from tokspeed.backends.exchange import (
    DONE,
    ERROR_SNIPPET,
    SHAPE_ERRORS,
    Response,
    as_count,
    bad_event,
    bad_shape,
    body_encoding,
    cannot_reach,
    error_message,
    fail,
    fail_encoded,
    joined,
    json_object,
    one_line,
    settle_tokens,
    stream_to_judge,
    unparsed_event,
)
from tokspeed.backends.http1 import Endpoint, request_head
from tokspeed.backends.http_policy import NO_REDIRECTS, is_redirect, redirected
from tokspeed.backends.native.ndjson import NDJSONDecoder
from tokspeed.backends.native.protocol import NativeProtocol, NativeState
from tokspeed.backends.pooled import HTTPSettings, PooledHTTPBackend
from tokspeed.backends.sse import SSEDecoder
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are strings here, so only the checker needs it
    from typing_extensions import Unpack


class NativeHTTPBackend(PooledHTTPBackend["_NativeResponse"]):
    """Streams (or not) generations from a server's native API, described by `protocol`."""

    def __init__(
        self,
        base_url: str,
        protocol: NativeProtocol,
        **settings: Unpack[HTTPSettings],
    ) -> None:
        super().__init__(base_url, **settings)
        self.base_url = server_root(self._url_plain)  # credentials are in the headers now
        self.protocol = protocol
        self._url = ""

    # lifecycle ------------------------------------------------------------
    async def _start(self) -> TargetInfo:
        """Discover the model (when needed), probe with a 1-token request, open connections."""
        self._open_session()
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
        self._open_pool(endpoint)
        await self._probe()
        notes = await self._prewarm_pool()
        return TargetInfo(
            kind=f"{self.protocol.name}-http",
            url=redact_url(self.base_url),
            model=self.model,
            api=self.protocol.name,
            stream=self.stream,
            include_usage=False,
            server_version=self._redact_maybe(self.protocol.version_from(info)),
            notes=tuple(notes),
        )

    async def _info(self) -> Any:
        """The protocol's discovery answer (None when it has none, or when the model is known and it failed)."""
        path = self.protocol.info_path(self.model)
        if path is None:
            return None
        assert self._session is not None
        url = f"{self.base_url}{path}"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=15), **NO_REDIRECTS) as resp:
                if is_redirect(resp.status):
                    raise redirected("GET", url, resp.status, resp.headers.get("Location"))
                if resp.status == 200:
                    return await resp.json(content_type=None)
                text = await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise cannot_reach(url, exc, f"is the server running? check --target (the server's root URL) and --api {self.protocol.name}") from exc
        if self.model is not None and not self.protocol.verifies_model:
            return None  # discovery is optional when the model is named (Triton checks it)
        raise TargetError(
            f"GET {url} answered HTTP {resp.status}: {error_message(text)}",
            hint=f"check --target, --api {self.protocol.name} and --model",
        )

    def probe_body(self) -> dict[str, Any]:
        return self._body(RequestSpec(index=-1, prompt="Hi", max_tokens=1))

    async def _probe(self) -> None:
        assert self._session is not None
        try:
            async with self._session.post(self._url, data=orjson.dumps(self.probe_body()), **NO_REDIRECTS) as resp:
                if is_redirect(resp.status):
                    raise redirected("POST", self._url, resp.status, resp.headers.get("Location"))
                status, text = resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise cannot_reach(self._url, exc, "is the server running? check --target") from exc
        if status >= 400:
            message = self._redact(f"probe request to {self._url} failed: HTTP {status}: {error_message(text)}")
            raise TargetError(message[:ERROR_SNIPPET], hint=f"check --target, --api {self.protocol.name} and --model")

    # requests ---------------------------------------------------------------
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
        body = self.protocol.body(spec, self.model, self.stream, self._sampling)
        body.update(self._extra)
        return body

    def response(self, record: RequestRecord, keep_text: bool) -> _NativeResponse:
        """A fresh sink for one attempt at `record`."""
        return _NativeResponse(record, NativeState([] if keep_text else None), self.protocol, self.stream)

    def _count_tokens(self, response: _NativeResponse) -> None:
        """Per request that ended well: token counts and their sources, server timings, sample text."""
        record, state = response.record, response.state
        settle_tokens(record, used=as_count(state.output_tokens), prompt=as_count(state.prompt_tokens),
                      chunk_counts=state.chunk_counts, text=joined(state.text) if state.text is not None else None,
                      counter=self._counter, keep_text_for=self._keep_text_for)
        if state.server:
            record.server_timing = dict(state.server)


def server_root(url: str) -> str:
    """The server's root URL: a trailing `/` or `/v1` (the OpenAI prefix, often pasted by habit) is dropped."""
    return url.rstrip("/").removesuffix("/v1")


class _NativeResponse(Response):
    """The sink of one HTTP exchange: splits the stream into JSON events and hands them to the protocol."""

    __slots__ = ("decoder", "protocol", "state")

    def __init__(self, record: RequestRecord, state: NativeState, protocol: NativeProtocol, stream: bool) -> None:
        super().__init__(record, stream)
        self.state = state
        self.protocol = protocol
        self.decoder: SSEDecoder | NDJSONDecoder | None = None

    def kept_text(self) -> list[Any] | None:
        return self.state.text

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if self.record.response_id is None:  # native bodies carry no id; proxies and the simulator send this
            self.record.response_id = headers.get("x-request-id")
        if status >= 300 or body_encoding(headers) is not None:
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
                    self.end_at(now)
                    return
        except SHAPE_ERRORS as exc:
            bad_event(self.record, exc)
            self.record.end_ns = now
            self.end_at(now)

    def _event(self, data: bytes, now: int) -> bool:
        """One event's payload; True when the stream is over (its end marker, an error, bad JSON)."""
        record = self.record
        if data == DONE:
            self.state.done = True
            return True
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            ended = unparsed_event(data, record, now)
            if ended is None:
                return False
            self.state.done = ended
            return True
        if type(obj) is not dict:
            return False
        if "error" in obj:
            message = self.protocol.error_text(obj)
            if message is not None:
                fail(record, Status.ERROR, ErrorKind.STREAM, one_line(message))
                record.end_ns = now
                return True
        return self.protocol.on_event(obj, now, record, self.state)

    def conclude(self) -> None:
        """After the exchange: judge the stream's ending, or parse the whole body or the error answer."""
        assert self.status is not None and self.end_ns is not None
        if self.status >= 300:  # 3xx too: a redirect is not followed
            self.fail_http()
        elif (encoding := body_encoding(self.headers)) is not None:
            fail_encoded(self.record, encoding, self.end_ns)
        elif self.decoder is not None:
            if not self.over:
                self._flush()
            self._judge_end()
        else:
            self.record.end_ns = self.end_ns
            self._whole(b"".join(self.parts))

    def _flush(self) -> None:
        """The body ended before the stream's end marker: take what the decoder still holds."""
        assert self.decoder is not None and self.end_ns is not None
        try:
            for data in self.decoder.close():
                if self._event(data, self.end_ns):
                    return
        except SHAPE_ERRORS as exc:
            bad_event(self.record, exc)

    def _judge_end(self) -> None:
        record = self.record
        assert self.decoder is not None and self.end_ns is not None
        if not stream_to_judge(record, self.decoder.malformed, self.end_ns) or self.state.done:
            return
        if not record.chunk_ns:
            fail(record, Status.ERROR, ErrorKind.PROTOCOL, "stream ended without tokens and without its end marker")
        elif not self.protocol.ends_on_close:
            fail(record, Status.ERROR, ErrorKind.BROKEN,
                 f"stream ended after {len(record.chunk_ns)} token events without its end marker")

    def _whole(self, body: bytes) -> None:
        record = self.record
        obj = json_object(body, record)
        if obj is None:
            return
        message = self.protocol.error_text(obj) if "error" in obj else None
        if message is not None:
            fail(record, Status.ERROR, ErrorKind.STREAM, one_line(message))
            return
        try:
            self.protocol.on_whole(obj, record, self.state)
        except SHAPE_ERRORS as exc:
            bad_shape(record, exc)
            return
        self.state.done = True
