"""What every backend over the lean HTTP/1.1 pool shares: its settings, start/close, and `send`.

`PooledHTTPBackend` is the base of the OpenAI backend (`openai_http`) and the native-protocol
backend (`native.backend`). It holds the target's settings (headers with the API key, extra
body, sampling, deadlines, retries, pool size, token counter, how many sample texts to keep),
redacts secrets from every error it raises or records, and sends a request the same way for
both: the request's bytes, attempts with 429/503 retries (`exchange.retrying`), the full text
for a multi-turn caller, and the error text redacted then cut. A subclass says how it starts
(discovery, probe), what a request's body is (`_body`), which sink parses the answer
(`response`) and how an ended exchange is judged and counted (`settle`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypedDict, TypeVar

import aiohttp
import orjson

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.credentials import with_url_auth
from tokspeed.backends.exchange import (
    Response,
    clean_ids,
    exchange,
    joined,
    prewarm,
    redact_error,
    redacted,
    retrying,
    take_spec,
)
from tokspeed.backends.http1 import Endpoint, Pool, request_bytes
from tokspeed.backends.http_policy import HttpPolicy, refuse_proxy
from tokspeed.backends.redact import Redactor
from tokspeed.errors import TargetError
from tokspeed.records import RequestRecord, RequestSpec, Status
from tokspeed.workload.tokens import TokenCounter

R = TypeVar("R", bound=Response)


class HTTPSettings(TypedDict, total=False):
    """The keyword settings every pooled HTTP backend takes (see `PooledHTTPBackend` for their defaults)."""

    stream: bool
    model: str | None
    api_key: str | None
    headers: dict[str, str] | None
    extra_body: dict[str, Any] | None
    sampling: dict[str, Any] | None
    timeout_s: float
    ttft_timeout_s: float | None
    retries: int
    pool_size: int
    prewarm: int | None
    counter: TokenCounter | None
    keep_text_for: int
    policy: HttpPolicy
    kernel_stamps: bool


class PooledHTTPBackend(ABC, Generic[R]):
    """Settings, session, pool and the request loop of an HTTP backend; subclasses fill in the protocol.

    `R` is the backend's response sink.
    """

    def __init__(
        self,
        base_url: str,
        *,
        stream: bool = True,
        model: str | None = None,  # None: discovered at start
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,  # merged over each request body
        sampling: dict[str, Any] | None = None,  # empty values are dropped
        timeout_s: float = 600.0,
        ttft_timeout_s: float | None = None,
        retries: int = 0,  # of 429/503 answers
        pool_size: int = 64,
        prewarm: int | None = None,
        counter: TokenCounter | None = None,  # counts output tokens when the server does not
        keep_text_for: int = 3,  # requests (by index) whose output text is kept as a sample
        policy: HttpPolicy | None = None,  # TLS, proxies, redirects: one policy for the session and the pool
        kernel_stamps: bool = False,  # reads stamped with the kernel's receive time (plain http://, Linux)
    ) -> None:
        self.stream = stream
        self.model = model
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # user:password@ in the URL becomes a Basic header, for discovery and the load alike
        self._url_plain, self._headers = with_url_auth(base_url, self._headers)
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
        self._policy = policy or HttpPolicy()
        self._kernel_stamps = kernel_stamps
        self._session: aiohttp.ClientSession | None = None  # discovery and the probe
        self._pool: Pool | None = None  # the requests themselves
        self._head = b""  # the request line and headers (set once the route is known)

    @property
    def policy(self) -> HttpPolicy:
        """The TLS policy of this backend's clients (the blocking Locust client uses it too)."""
        return self._policy

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        """Discover and probe the target, open connections; a TargetError's text never holds a secret."""
        refuse_proxy(self._url_plain)  # ConfigError: a proxy the environment names would not be used
        try:
            return await self._start()
        except TargetError as exc:
            raise redacted(exc, self._redact) from None

    @abstractmethod
    async def _start(self) -> TargetInfo:
        ...

    def _open_session(self) -> aiohttp.ClientSession:
        """The aiohttp session for discovery and the probe (requests go through the pool), under the policy."""
        self._session = self._policy.session(headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self._session

    def _open_pool(self, endpoint: Endpoint) -> Pool:
        """The load's connection pool, with the same TLS context as the session."""
        self._pool = Pool(endpoint, self._pool_size, ssl_context=self._policy.ssl_context() if endpoint.tls else None,
                          kernel_stamps=self._kernel_stamps)
        return self._pool

    async def _prewarm_pool(self) -> list[str]:
        """Open the pool's connections ahead of the load; notes for TargetInfo when fewer opened."""
        assert self._pool is not None
        return await prewarm(self._pool, self._pool_size, self._prewarm)

    def transport_notes(self) -> list[str]:
        """What the connection pool has to say for run.json's warnings (refused connections and back-off)."""
        if self._pool is None:
            return []
        notes = [self._pool.refusals.note()]
        if self._pool.unended:
            notes.append(
                f"at least {self._pool.unended} responses did not end their HTTP body after data: [DONE] (the server "
                "closed, reset or held the connection without the chunk terminator): each was recorded at [DONE] and "
                "its connection not reused, so as many requests opened a new connection"
            )
        return [n for n in notes if n]

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # requests ---------------------------------------------------------------
    @abstractmethod
    def _body(self, spec: RequestSpec) -> dict[str, Any]:
        """The JSON request body for `spec`."""
        ...

    def _asked_tokens(self, spec: RequestSpec) -> int | None:
        """The output tokens the request asks for (`record.max_tokens`)."""
        return spec.max_tokens

    def prepare(self, spec: RequestSpec, record: RequestRecord) -> tuple[bytes, bool]:
        """`spec` as the request's bytes, its fields in `record`; and whether to keep the answer's text."""
        take_spec(record, spec, self._asked_tokens(spec))
        keep_text = record.index < self._keep_text_for or self._counter is not None or spec.keep_text
        return request_bytes(self._head, orjson.dumps(self._body(spec))), keep_text

    @abstractmethod
    def response(self, record: RequestRecord, keep_text: bool) -> R:
        """A fresh sink for one attempt at `record`."""
        ...

    def settle(self, response: R) -> None:
        """After an exchange that ended (ids already cleaned): judge the response; when it ended well, count."""
        response.conclude()
        if response.record.status is Status.OK:
            self._count_tokens(response)

    @abstractmethod
    def _count_tokens(self, response: R) -> None:
        """Per request that ended well: token counts and their sources, sample text, what else the server said."""
        ...

    def _redact_maybe(self, text: str | None) -> str | None:
        """`text` (something the server said about itself) without this target's secrets."""
        return None if text is None else self._redact(text)

    def redact_error(self, record: RequestRecord) -> None:
        """The record's texts (error, output, ids), redacted of this target's secrets; the error then cut."""
        redact_error(record, self._redact)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send `spec` (retrying 429/503 up to `retries` times) and fill `record`; never raises for failures."""
        assert self._pool is not None, "start() first"
        data, keep_text = self.prepare(spec, record)
        try:
            response = await retrying(lambda: self._attempt(data, record, keep_text, spec.cancel_after_ns), record,
                                      self._retries)
            if spec.keep_text and record.output_text is None and record.status is Status.OK:  # multi-turn
                record.output_text = joined(response.kept_text() or [])
        finally:
            redact_error(record, self._redact)

    async def _attempt(self, data: bytes, record: RequestRecord, keep_text: bool, cancel_after_ns: int | None = None) -> R:
        """One HTTP exchange: every outcome lands in `record` (a Ctrl-C cancellation is re-raised)."""
        assert self._pool is not None
        response = self.response(record, keep_text)
        try:
            ended = await exchange(self._pool, data, response, self._ttft_timeout_s, self._timeout_s, cancel_after_ns)
        finally:
            clean_ids(record)
        if ended:
            self.settle(response)
        return response
