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
response, `http` for a 3xx (never followed), 4xx or 5xx answer, `broken` when the connection drops or
the stream stops short (no finish_reason, no [DONE]) after the response began,
`protocol` for bad JSON, a malformed SSE line or an event of the wrong shape,
`stream` for an error object inside the stream, `ttft_timeout` and `timeout`
for the two deadlines. A stream that closes cleanly after its finish_reason
but without `data: [DONE]` is ok, with the `missing_done` anomaly. Error texts
are redacted (API key, secret headers) before they are truncated and kept.

What is not OpenAI-specific lives once for every HTTP backend: the attempt, deadlines, failure
mapping, retries and record helpers in `backends/exchange.py`; settings, start/close and
`send` in `backends/pooled.py`. This module keeps the request body, discovery and the probe,
and the per-token sink, inline.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
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
    error_object_text,
    fail,
    fail_encoded,
    joined,
    json_object,
    note,
    settle_tokens,
    stream_to_judge,
    unparsed_event,
)
from tokspeed.backends.http1 import Endpoint, request_head
from tokspeed.backends.http_policy import NO_REDIRECTS, is_redirect, redirected
from tokspeed.backends.pooled import HTTPSettings, PooledHTTPBackend
from tokspeed.backends.sse import SSEDecoder
from tokspeed.errors import TargetError
from tokspeed.records import Anomaly, ErrorKind, RequestRecord, RequestSpec, Status

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are strings here, so only the checker needs it
    from typing_extensions import Unpack

PROBE_TIMEOUT_S = 60.0  # the start-up probe (one 1-token request) and discovery, at most --timeout
_PATHS = {"chat": "chat/completions", "completions": "completions", "embeddings": "embeddings"}


class OpenAIHTTPBackend(PooledHTTPBackend["_Response"]):
    """Streams (or not) completions from an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "chat",
        include_usage: bool = True,
        mix: tuple[str, ...] = (),
        **settings: Unpack[HTTPSettings],
    ) -> None:
        super().__init__(base_url, **settings)
        self.mix = mix  # a model mix: every name it asks for, checked against /v1/models at start
        self.base_url = self._url_plain.rstrip("/")  # credentials are in the headers now
        self.api = api
        self.include_usage = include_usage and self.stream
        self._url = f"{self.base_url}/{_PATHS.get(api, 'completions')}"
        self._endpoint = Endpoint(self._url)
        self._head = request_head("POST", urlsplit(self._url).path, self._endpoint, self._headers)

    # lifecycle ------------------------------------------------------------
    async def _start(self) -> TargetInfo:
        """Open the session, discover the model, probe the target, open connections."""
        self._open_session()
        self._open_pool(self._endpoint)
        notes: list[str] = []
        if self.model is None:
            self.model = await self._discover_model()
        if self.mix:
            notes += await self._check_mix()
        if not await self._probe():
            self.include_usage = False
            notes.append("server rejected stream_options.include_usage; output tokens counted another way")
        notes += await self._prewarm_pool()
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

    async def _check_mix(self) -> list[str]:
        """Every model of the mix must be listed by /v1/models (TargetError naming those that are not).

        A server whose /v1/models does not answer is not judged: a note says the mix went unchecked.
        """
        try:
            body = await self._get_json(f"{self.base_url}/models", quiet=True)
        except TargetError as exc:
            return [f"the model mix was not checked against /v1/models ({exc})"]
        data = body.get("data") if isinstance(body, dict) else None
        listed = [str(m.get("id")) for m in data or () if isinstance(m, dict)]
        missing = [name for name in self.mix if name not in listed]
        if missing:
            raise TargetError(
                f"{self.base_url}/models does not list {', '.join(map(repr, missing))} of the model mix",
                hint=f"it lists {', '.join(listed) or 'nothing'}; an adapter must be loaded first "
                "(vLLM: --enable-lora --lora-modules NAME=PATH)",
            )
        return []

    async def _server_version(self) -> str | None:
        root = self.base_url.removesuffix("/v1")
        try:
            body = await self._get_json(f"{root}/version", quiet=True)
        except TargetError:
            return None
        if not isinstance(body, dict) or not body.get("version"):
            return None
        return self._redact(str(body["version"]))  # a server can echo what it was sent

    async def _get_json(self, url: str, quiet: bool = False) -> Any:
        assert self._session is not None
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_S),
                                         **NO_REDIRECTS) as resp:
                if is_redirect(resp.status):
                    raise redirected("GET", url, resp.status, resp.headers.get("Location"))
                if resp.status != 200:
                    text = await resp.text(errors="replace")
                    hint = (
                        _hint_for_status(resp.status)
                        if resp.status in (401, 403, 404)
                        else "check --target (it should end in /v1) and --api-key; or pass --model"
                    )
                    raise TargetError(f"GET {url} answered HTTP {resp.status}: {error_message(text)}", hint=hint)
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            if quiet:
                raise TargetError(str(exc) or type(exc).__name__) from exc
            raise unreachable(url, exc, DISCOVERY_TIMEOUT_S) from exc

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
        message = self._redact(f"probe request to {self._url} failed: HTTP {status}: {error_message(text)}")
        raise TargetError(message[:ERROR_SNIPPET], hint=_hint_for_status(status))

    def probe_body(self) -> dict[str, Any]:
        """The smallest request shaped like the real ones: 1 token, or `min_tokens` when the body sets it."""
        floor = self._extra.get("min_tokens")
        tokens = floor if isinstance(floor, int) and not isinstance(floor, bool) and floor > 1 else 1
        return self._body(RequestSpec(index=-1, prompt="Hi", max_tokens=tokens))

    async def _post_probe(self) -> tuple[int, str]:
        assert self._session is not None
        limit = min(self._timeout_s, PROBE_TIMEOUT_S)  # its own deadline: a stuck server fails the start, not the run
        try:
            async with self._session.post(self._url, data=orjson.dumps(self.probe_body()),
                                          timeout=aiohttp.ClientTimeout(total=limit), **NO_REDIRECTS) as resp:
                if is_redirect(resp.status):  # a gateway's redirect: the load's client would not follow it either
                    raise redirected("POST", self._url, resp.status, resp.headers.get("Location"))
                return resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise unreachable(self._url, exc, limit, probe=True) from exc

    # requests ---------------------------------------------------------------
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
        model = spec.model or self.model  # a model mix names each request's model
        if self.api == "embeddings":
            return {"model": model, "input": spec.prompt_text(), **self._extra}
        body: dict[str, Any] = {"model": model}
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

    @property
    def endpoint(self) -> Endpoint:
        """Where the requests go (the blocking Locust client connects there too)."""
        return self._endpoint

    def _asked_tokens(self, spec: RequestSpec) -> int | None:
        return spec.max_tokens if self.api != "embeddings" else None

    def response(self, record: RequestRecord, keep_text: bool) -> _Response:
        """A fresh sink for one attempt at `record`."""
        return _Response(record, _StreamState(keep_text), self.stream)

    def _count_tokens(self, response: _Response) -> None:
        """Per request that ended well: token counts and their sources, cached prompt tokens, sample text."""
        record, state = response.record, response.state
        _sanitise(state)
        text = joined(state.text) if state.text is not None else None
        settle_tokens(record, used=state.usage_completion, prompt=state.usage_prompt, chunk_counts=state.chunk_usage,
                      text=text, counter=self._counter, keep_text_for=self._keep_text_for)
        if state.usage_cached is not None:
            record.cached_tokens = _cached_tokens(state.usage_cached)


class _StreamState:
    """Per-request scratch space while a response streams in."""

    __slots__ = ("chunk_usage", "done", "text", "usage_cached", "usage_completion", "usage_prompt")

    def __init__(self, keep_text: bool) -> None:
        self.text: list[str] | None = [] if keep_text else None
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.usage_cached: Any = None  # usage.prompt_tokens_details, as sent (read once the request ended)
        self.chunk_usage: list[int] = []  # cumulative completion_tokens per token chunk, when sent
        self.done = False


def _sanitise(state: _StreamState) -> None:
    """Per request: drop counts of the wrong type a server sent, so records stay well-typed."""
    state.usage_completion = as_count(state.usage_completion)
    state.usage_prompt = as_count(state.usage_prompt)
    if state.chunk_usage and not all(as_count(c) is not None for c in state.chunk_usage):
        state.chunk_usage = []


def _cached_tokens(details: object) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` (prefix-cache hits), when it is a token count."""
    return as_count(details.get("cached_tokens")) if isinstance(details, dict) else None


class _Response(Response):
    """The sink of one HTTP exchange: parses SSE events (or collects a body) as reads arrive.

    Called from the connection's `data_received`, so it runs on the per-token path:
    it timestamps nothing itself (`now` is the read's time) and detaches the
    connection as soon as the stream is over (`[DONE]`, an error event, bad JSON).
    """

    __slots__ = ("decoder", "state")

    def __init__(self, record: RequestRecord, state: _StreamState, stream: bool) -> None:
        super().__init__(record, stream)
        self.state = state
        self.decoder: SSEDecoder | None = None  # set when the body is an event stream

    def kept_text(self) -> list[Any] | None:
        return self.state.text

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if status < 300 and self.stream and headers.get("content-type", "").startswith("text/event-stream") \
                and body_encoding(headers) is None:
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
                    self.end_at(now)
                    return
        except SHAPE_ERRORS as exc:
            bad_event(record, exc)
            record.end_ns = now
            self.end_at(now)
            return
        if decoder.error is not None:  # `event: error`: the server says the stream failed
            error_event(record, decoder.error, now)
            self.end_at(now)

    def conclude(self) -> None:
        """After the exchange: judge the stream's ending, or parse the whole body or the error answer."""
        record = self.record
        assert self.status is not None and self.end_ns is not None
        if self.status >= 300:  # 3xx too: a redirect is not followed
            self.fail_http()
        elif (encoding := body_encoding(self.headers)) is not None:
            fail_encoded(record, encoding, self.end_ns)
        elif self.decoder is not None:
            if self.over:
                _end_of_stream(record, self.state, self.decoder, self.end_ns)
            else:
                _stream_ended(record, self.state, self.decoder, self.end_ns)
        else:
            record.end_ns = self.end_ns
            _take_body(b"".join(self.parts), record, self.state)
            if self.stream and record.status is Status.OK:  # stream: true, answered with one whole body
                note(record, Anomaly.NOT_STREAMED)


def error_event(record: RequestRecord, data: bytes, now: int) -> None:
    """An SSE event of type `error`: the request failed (`stream`), with the event's message."""
    if record.status is Status.OK:
        fail(record, Status.ERROR, ErrorKind.STREAM, f"event: error: {error_message(data.decode('utf-8', 'replace'))}")
        record.end_ns = now


def _stream_ended(record: RequestRecord, state: _StreamState, decoder: SSEDecoder, now: int) -> None:
    """The body ended before the stream said it was over: flush the decoder, then judge the ending."""
    if not record.chunk_ns:
        now = perf_counter_ns()
    try:
        for data in decoder.close():
            if _on_event(data, now, record, state):
                break
    except SHAPE_ERRORS as exc:
        bad_event(record, exc)
        return
    if decoder.error is not None:
        error_event(record, decoder.error, now)
        return
    _end_of_stream(record, state, decoder, now)


def _end_of_stream(record: RequestRecord, state: _StreamState, decoder: SSEDecoder, now: int) -> None:
    """Per request, once the body ended: judge how the stream ended."""
    if not stream_to_judge(record, decoder.malformed, now):  # failed by an event or a malformed line
        return
    if state.done:
        if record.finish_reason is None and record.chunk_ns:  # e.g. llama-cpp-python interrupting a stream
            note(record, Anomaly.MISSING_FINISH_REASON)
        return
    elif not record.chunk_ns:
        fail(record, Status.ERROR, ErrorKind.PROTOCOL, "stream ended without data: [DONE] and without tokens")
    elif record.finish_reason is None:
        fail(record, Status.ERROR, ErrorKind.BROKEN,
              f"stream ended after {len(record.chunk_ns)} token chunks without finish_reason or data: [DONE]")
    else:
        note(record, Anomaly.MISSING_DONE)


def _on_event(data: bytes, now: int, record: RequestRecord, state: _StreamState) -> bool:
    """Handle one SSE event; True when the stream is finished (done or failed). The per-token path."""
    if data == DONE:
        state.done = True
        return True
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        ended = unparsed_event(data, record, now)
        if ended is None:
            return False
        state.done = ended
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
        fail(record, Status.ERROR, ErrorKind.STREAM, error_object_text(obj))
        record.end_ns = now
        return True
    return False


def _take_body(body: bytes, record: RequestRecord, state: _StreamState) -> None:
    """A non-streaming response (or a server that ignored stream=true)."""
    obj = json_object(body, record)
    if obj is None:
        return
    if "error" in obj or obj.get("object") == "error":
        fail(record, Status.ERROR, ErrorKind.STREAM, error_object_text(obj))
    else:
        try:
            _take_whole(obj, record, state)
        except SHAPE_ERRORS as exc:
            bad_shape(record, exc)


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
        fail(record, Status.ERROR, ErrorKind.PROTOCOL, "embeddings response without data[0].embedding")
        return
    record.response_id = obj.get("id")  # vLLM names its answers; OpenAI's do not
    usage = obj.get("usage") or {}
    state.usage_prompt = usage.get("prompt_tokens")
    state.usage_completion = 0
    state.done = True


DISCOVERY_TIMEOUT_S = 15.0  # GET /v1/models and /version


def unreachable(url: str, exc: BaseException, limit_s: float, probe: bool = False) -> TargetError:
    """The TargetError for a discovery GET or the probe that failed in transport: a timeout says so."""
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        what = "the 1-token probe request to" if probe else "GET"
        return TargetError(
            f"{what} {url} got no answer within {limit_s:g} s (the connection opened, nothing came back)",
            hint=("the server accepted the connection but did not answer one 1-token request: it may be stuck or "
                  "still loading its model; check its logs, and run again once it answers") if probe else
                 "the server accepted the connection but did not answer: check its logs and --target",
        )
    return cannot_reach(url, exc, "is the server running? check --target, e.g. http://127.0.0.1:8000/v1")


def _hint_for_status(status: int) -> str:
    if status in (401, 403):
        return "pass --api-key or set OPENAI_API_KEY"
    if status == 404:
        return "check --target (it should end in /v1), --api and --model"
    if status in (400, 422):
        return "the server rejected the request body: check --model, --extra-body and sampling flags"
    return "the server failed a 1-token probe request; check its logs"
