"""A blocking OpenAI-compatible client for Locust users: one keep-alive socket per user.

Why a plain socket and not FastHttpUser/geventhttpclient: a streamed response there passes
through the library's own buffered reader and response object before tokspeed sees a byte, and
the time at which a read is handed over is not the time it arrived. Here each `recv()` returns
as soon as the (gevent-patched, inside Locust) socket has data; `perf_counter_ns()` is taken
right after it, before any parsing, exactly as the asyncio client does in `data_received`.
HTTP framing is parsed by llhttp (httptools) with the asyncio connection's own callbacks
(`http1.ResponseParsing`), the SSE events go to the asyncio backend's own sink
(`OpenAIHTTPBackend.response()`), and failures are classified by `backends.exchange`, so the
records, token counts, anomalies and error kinds are the same code's output, not a
re-implementation. Without gevent the same class works as an ordinary blocking client (the
unit tests use it that way).

A user sends one request at a time, so one connection per user needs no pool. A connection
that cannot be reused (closed by the server, a response cut short) is reopened on the next
request and that request's `connect_duration_ns` says so.
"""

from __future__ import annotations

import select
import socket
import ssl
from time import perf_counter_ns
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson

from tokspeed.backends.exchange import (
    TRANSPORT_ERRORS,
    Response,
    clean_ids,
    describe,
    fail,
    transport_failure,
)
from tokspeed.backends.http1 import (
    DRAIN_S,
    PARSER_ERRORS,
    ConnectionLost,
    Endpoint,
    ResponseParsing,
    ResponseSink,
    parse_failure,
    request_bytes,
    request_head,
)
from tokspeed.backends.http_policy import is_redirect, redirected
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

READ_SIZE = 65536


class SyncConnection(ResponseParsing):
    """One blocking HTTP/1.1 keep-alive connection; `exchange()` parses a response as it is read."""

    def __init__(self, endpoint: Endpoint, timeout_s: float, context: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if endpoint.tls:  # the policy's context (backends/http_policy.py), as the asyncio clients use
            sock = (context or ssl.create_default_context()).wrap_socket(sock, server_hostname=endpoint.host)
        self.sock = sock
        self.timeout_s = timeout_s
        self.closed = False
        self.keep_alive = True
        self._sink: ResponseSink | None = None
        self._parser = httptools.HttpResponseParser(self)  # replaced by a fresh one at each exchange
        self._headers: dict[str, str] = {}
        self._now = 0
        self._interim = False
        self._in_body = False
        self._to_close = False
        self._complete = False
        self._detached_at: int | None = None

    # exchange ------------------------------------------------------------------
    def exchange(self, data: bytes, sink: ResponseSink) -> int:
        """Send `data`; return the time of the read that ended the response (or the sink's detach)."""
        self._sink, self._parser = sink, httptools.HttpResponseParser(self)
        self._in_body = self._to_close = self._complete = False
        self._detached_at = None
        self.sock.sendall(data)
        while not self._complete and self._detached_at is None:
            self._read()
        end = self._detached_at if self._detached_at is not None else self._now
        if not self._complete:
            self._drain()
        return end

    def detach(self, now: int) -> None:
        """The sink has what it needs (the stream said it is over): stop handing it data."""
        self._sink = None
        self._detached_at = now

    def _read(self) -> None:
        data = self.sock.recv(READ_SIZE)
        self._now = perf_counter_ns()  # the read's time, before anything else
        if not data:
            self.closed = True
            if self._to_close and self._in_body:  # the body ran to the close: that is its end
                self._complete = True
                return
            where = "before the response ended" if self._in_body else "before the response"
            raise ConnectionLost(f"server closed the connection {where}")
        try:
            self._parser.feed_data(data)
        except PARSER_ERRORS as exc:
            raise parse_failure(exc, self._in_body) from None

    def _drain(self) -> None:
        """Read the rest of a detached body (the HTTP terminator after `[DONE]`), or give the connection up."""
        if self.closed or not self.keep_alive or self._to_close:
            self.keep_alive = False
            return
        self.sock.settimeout(DRAIN_S)
        try:
            while not self._complete:
                self._read()
        except TRANSPORT_ERRORS:
            self.keep_alive = False
        finally:
            self.sock.settimeout(self.timeout_s)

    @property
    def reusable(self) -> bool:
        return not self.closed and self.keep_alive

    def idle_and_open(self) -> bool:
        """Whether the idle connection can carry the next request: nothing to read on it (readable while idle
        means the server closed it, e.g. uvicorn's 5 s keep-alive timeout, or sent bytes nobody asked for)."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

class SyncOpenAIClient:
    """Sends workload requests for one Locust user and fills `RequestRecord`s.

    Request bodies, token counting, sample text and error redaction come from an (unstarted)
    `OpenAIHTTPBackend` built with the same settings, so the distributed path cannot drift
    from the single-process one.
    """

    def __init__(self, backend: OpenAIHTTPBackend, timeout_s: float = 600.0) -> None:
        self.backend = backend
        self.timeout_s = timeout_s
        self._endpoint = backend.endpoint
        self._ssl = backend.policy.ssl_context() if self._endpoint.tls else None  # built once per client
        self._conn: SyncConnection | None = None

    def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send `spec` and fill `record`; failures land in the record, a kill (GreenletExit) marks it incomplete."""
        backend = self.backend
        data, keep_text = backend.prepare(spec, record)
        response = backend.response(record, keep_text)
        try:
            if self._attempt(data, response):
                backend.settle(response)
        finally:
            backend.redact_error(record)

    def _attempt(self, data: bytes, response: Response) -> bool:
        """One exchange on this user's connection: True when it ended (to judge), False when a failure was recorded."""
        record = response.record
        record.sent_ns = perf_counter_ns()
        conn = None
        try:
            conn = self._connection(record)
            response.conn = conn
            record.sent_ns = perf_counter_ns()
            response.end_ns = conn.exchange(data, response)
        except TimeoutError:
            fail(record, Status.ERROR, ErrorKind.TIMEOUT, f"no complete response within {self.timeout_s:g} s")
            return False
        except TRANSPORT_ERRORS as exc:  # OSError: connect refused, reset, TLS
            transport_failure(record, exc, began=response.status is not None)
            return False
        except BaseException:  # GreenletExit when Locust stops the user, KeyboardInterrupt
            fail(record, Status.INCOMPLETE, None, "cancelled before completion")
            raise
        finally:
            if conn is not None and (response.end_ns is None or not conn.reusable):
                conn.close()
                self._conn = None
            clean_ids(record)
        return True

    def _connection(self, record: RequestRecord) -> SyncConnection:
        if self._conn is not None and self._conn.reusable:
            if self._conn.idle_and_open():
                return self._conn
            self._conn.close()  # closed by the server while idle: a new connection, paid by this request
        t0 = perf_counter_ns()
        self._conn = SyncConnection(self._endpoint, self.timeout_s, self._ssl)
        record.connect_duration_ns = perf_counter_ns() - t0
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def get_json(url: str, headers: dict[str, str], timeout_s: float = 15.0, context: ssl.SSLContext | None = None) -> Any:
    """GET `url` with a fresh blocking connection and parse the JSON answer (TargetError if that fails;
    TargetRedirected for a 3xx, which is never followed)."""
    endpoint = Endpoint(url)
    parts = urlsplit(url)
    head = request_head("GET", parts.path or "/", endpoint, headers)
    sink = _Collect()
    try:
        conn = SyncConnection(endpoint, timeout_s, context)
        try:
            conn.exchange(request_bytes(head, b""), sink)
        finally:
            conn.close()
    except TRANSPORT_ERRORS as exc:
        raise TargetError(f"cannot reach {url}: {describe(exc)}",
                          hint="is the server running? check --target, e.g. http://127.0.0.1:8000/v1") from None
    if sink.status is not None and is_redirect(sink.status):
        raise redirected("GET", url, sink.status, sink.headers.get("location"))
    if sink.status != 200:
        raise TargetError(f"GET {url} answered HTTP {sink.status}", hint="check --target and --model")
    try:
        return orjson.loads(b"".join(sink.parts))
    except orjson.JSONDecodeError:
        raise TargetError(f"GET {url} did not answer JSON", hint="check --target (it should end in /v1)") from None


def check_reachable(base_url: str, timeout_s: float = 15.0, context: ssl.SSLContext | None = None) -> None:
    """Open (and close) one connection to the target: TargetError, in one line, when it cannot be reached."""
    try:
        conn = SyncConnection(Endpoint(base_url), timeout_s, context)
    except OSError as exc:  # refused, unreachable host, DNS, TLS, timeout
        raise TargetError(f"cannot reach {base_url}: {describe(exc)}",
                          hint="is the server running? check --target, e.g. http://127.0.0.1:8000/v1") from None
    conn.close()


def discover_model(base_url: str, headers: dict[str, str], context: ssl.SSLContext | None = None) -> str:
    """The first model `GET /models` lists (what the asyncio backend does when --model is not given)."""
    body = get_json(f"{base_url.rstrip('/')}/models", headers, context=context)
    data = body.get("data") if isinstance(body, dict) else None
    if not data or not isinstance(data[0], dict):
        raise TargetError(f"{base_url}/models lists no model", hint="pass --model NAME")
    return str(data[0].get("id"))


class _Collect:
    """A sink that keeps a whole (small) response."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def on_body(self, data: bytes, now: int) -> None:
        self.parts.append(data)
