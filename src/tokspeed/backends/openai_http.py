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
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.sse import SSEDecoder
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource
from tokspeed.workload.tokens import TokenCounter

_DONE = b"[DONE]"
_ERROR_SNIPPET = 300


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
        pool_size: int = 64,
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
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._pool_size = pool_size
        self._counter = counter
        self._keep_text_for = keep_text_for
        self._session: aiohttp.ClientSession | None = None
        self._url = f"{self.base_url}/{'chat/completions' if api == 'chat' else 'completions'}"

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_mark_sent)
        connector = aiohttp.TCPConnector(limit=self._pool_size, ttl_dns_cache=300, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], headers=self._headers, timeout=self._timeout
        )
        notes: list[str] = []
        if self.model is None:
            self.model = await self._discover_model()
        if not await self._probe():
            self.include_usage = False
            notes.append("server rejected stream_options.include_usage; output tokens counted another way")
        return TargetInfo(
            kind="openai-http",
            url=self.base_url,
            model=self.model,
            api=self.api,
            stream=self.stream,
            include_usage=self.include_usage,
            server_version=await self._server_version(),
            notes=tuple(notes),
        )

    async def close(self) -> None:
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
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
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
                    raise TargetError(
                        f"GET {url} answered HTTP {resp.status}",
                        hint="check --target (it should end in /v1) and --api-key; or pass --model",
                    )
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
        raise TargetError(
            f"probe request to {self._url} failed: HTTP {status}: {_error_message(text[:_ERROR_SNIPPET])}",
            hint=_hint_for_status(status),
        )

    async def _post_probe(self) -> tuple[int, str]:
        assert self._session is not None
        body = self._body(RequestSpec(index=-1, prompt="Hi", max_tokens=1))
        try:
            async with self._session.post(self._url, data=orjson.dumps(body)) as resp:
                return resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TargetError(
                f"cannot reach {self._url}: {exc or type(exc).__name__}",
                hint="is the server running? check --target, e.g. http://127.0.0.1:8000/v1",
            ) from exc

    # requests ---------------------------------------------------------------
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
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
        assert self._session is not None, "start() first"
        data = orjson.dumps(self._body(spec))
        record.max_tokens = spec.max_tokens
        record.input_tokens = spec.input_tokens
        record.input_tokens_source = spec.input_tokens_source
        state = _StreamState(keep_text=record.index < self._keep_text_for or self._counter is not None)
        record.sent_ns = perf_counter_ns()
        try:
            async with self._session.post(self._url, data=data, trace_request_ctx=record) as resp:
                if resp.status >= 400:
                    await self._fail_http(resp, record)
                    return
                ctype = resp.headers.get("Content-Type", "")
                if self.stream and ctype.startswith("text/event-stream"):
                    await _read_stream(resp, record, state)
                else:
                    await _read_whole(resp, record, state)
        except asyncio.CancelledError:
            _fail(record, Status.INCOMPLETE, None, "cancelled before completion")
            raise
        except asyncio.TimeoutError:
            _fail(record, Status.ERROR, ErrorKind.TIMEOUT, f"no complete response within {self._timeout.total:g} s")
            return
        except aiohttp.ClientConnectionError as exc:
            _fail(record, Status.ERROR, ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}")
            return
        except aiohttp.ClientError as exc:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"{type(exc).__name__}: {exc}")
            return
        self._finish(record, state)

    async def _fail_http(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        text = (await resp.text(errors="replace"))[:_ERROR_SNIPPET]
        record.http_status = resp.status
        _fail(record, Status.ERROR, ErrorKind.HTTP, f"HTTP {resp.status}: {_error_message(text)}")

    def _finish(self, record: RequestRecord, state: _StreamState) -> None:
        if record.status is not Status.OK:
            return
        if state.usage_completion is not None:
            record.output_tokens = state.usage_completion
            record.output_tokens_source = TokenSource.USAGE
        elif self._counter is not None and state.text is not None:
            record.output_tokens = self._counter.count("".join(state.text))
            record.output_tokens_source = TokenSource.TOKENIZER
        elif record.chunk_ns:
            record.output_tokens = len(record.chunk_ns)
            record.output_tokens_source = TokenSource.CHUNKS
        if state.usage_prompt is not None:
            record.input_tokens = state.usage_prompt
            record.input_tokens_source = TokenSource.USAGE
        if state.text is not None and record.index < self._keep_text_for:
            record.output_text = "".join(state.text)
        if state.chunk_usage and len(state.chunk_usage) == len(record.chunk_ns):
            record.chunk_tokens = _diffs(state.chunk_usage)


class _StreamState:
    """Per-request scratch space while a response streams in."""

    __slots__ = ("text", "usage_completion", "usage_prompt", "chunk_usage", "done")

    def __init__(self, keep_text: bool) -> None:
        self.text: list[str] | None = [] if keep_text else None
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.chunk_usage: list[int] = []  # cumulative completion_tokens per token chunk, when sent
        self.done = False


async def _mark_sent(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    record = ctx.trace_request_ctx
    if record is not None:
        record.sent_ns = perf_counter_ns()


async def _read_stream(resp: aiohttp.ClientResponse, record: RequestRecord, state: _StreamState) -> None:
    decoder = SSEDecoder()
    now = record.sent_ns
    async for raw in resp.content.iter_any():
        now = perf_counter_ns()
        for data in decoder.feed(raw):
            if _on_event(data, now, record, state):
                return _end(record, now)
    now = perf_counter_ns() if not record.chunk_ns else now
    for data in decoder.close():
        if _on_event(data, now, record, state):
            return _end(record, now)
    if not state.done and record.status is Status.OK:
        if not record.chunk_ns:
            _fail(record, Status.ERROR, ErrorKind.PROTOCOL, "stream ended without data: [DONE] and without tokens")
            return
    _end(record, now)


def _end(record: RequestRecord, now: int) -> None:
    if record.end_ns is None:
        record.end_ns = now


def _on_event(data: bytes, now: int, record: RequestRecord, state: _StreamState) -> bool:
    """Handle one SSE event; True when the stream is finished (done or failed)."""
    if data == _DONE:
        state.done = True
        return True
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"bad JSON in stream: {data[:80]!r}")
        record.end_ns = now
        return True
    if not isinstance(obj, dict):
        return False
    choices = obj.get("choices")
    tokens = _on_choice(choices[0], now, record, state) if choices else False
    if record.response_id is None:
        record.response_id = obj.get("id")
    usage = obj.get("usage")
    if usage:
        state.usage_completion = usage.get("completion_tokens", state.usage_completion)
        state.usage_prompt = usage.get("prompt_tokens", state.usage_prompt)
        if tokens and state.usage_completion is not None:
            state.chunk_usage.append(state.usage_completion)
    elif not choices and ("error" in obj or obj.get("object") == "error"):
        _fail(record, Status.ERROR, ErrorKind.STREAM, _stream_error_text(obj))
        record.end_ns = now
        return True
    return False


def _on_choice(choice: dict[str, Any], now: int, record: RequestRecord, state: _StreamState) -> bool:
    """Record a token-bearing choice; True when it carried tokens."""
    delta = choice.get("delta")
    if delta is not None:
        content = delta.get("content")
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    else:
        content = choice.get("text")
        reasoning = None
    finish = choice.get("finish_reason")
    if finish:
        record.finish_reason = finish
    if content:
        if record.first_content_ns is None:
            record.first_content_ns = now
        if state.text is not None:
            state.text.append(content)
    elif reasoning:
        record.reasoning_chunks += 1
    else:
        return False
    if record.first_token_ns is None:
        record.first_token_ns = now
    record.chunk_ns.append(now)
    return True


async def _read_whole(resp: aiohttp.ClientResponse, record: RequestRecord, state: _StreamState) -> None:
    """A non-streaming response (or a server that ignored stream=true)."""
    body = await resp.read()
    record.end_ns = perf_counter_ns()
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        _fail(record, Status.ERROR, ErrorKind.PROTOCOL, f"response is not JSON: {body[:80]!r}")
        return
    if not isinstance(obj, dict) or "error" in obj or obj.get("object") == "error":
        _fail(record, Status.ERROR, ErrorKind.STREAM, _stream_error_text(obj if isinstance(obj, dict) else {}))
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
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return str(err.get("message") or err)[:_ERROR_SNIPPET]
    return str(err)[:_ERROR_SNIPPET]


def _error_message(text: str) -> str:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.strip()
    if isinstance(obj, dict):
        return _stream_error_text(obj)
    return text.strip()


def _hint_for_status(status: int) -> str:
    if status in (401, 403):
        return "pass --api-key or set OPENAI_API_KEY"
    if status == 404:
        return "check --target (it should end in /v1), --api and --model"
    if status in (400, 422):
        return "the server rejected the request body: check --model, --extra-body and sampling flags"
    return "the server failed a 1-token probe request; check its logs"
