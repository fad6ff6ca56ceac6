"""A lean HTTP/1.1 client for the per-token path: keep-alive connections, timestamps at read.

Why not aiohttp here: a streamed response passes each network read through
aiohttp's stream reader, an async iterator and a task wake-up before tokspeed
sees it; profiled, that was most of the client's CPU per request and the main
source of its timing error. Here a response is parsed inside the protocol's
`data_received` callback: the read is timestamped first, its HTTP framing
(Content-Length, chunked, or read-to-close) is stripped in place, and the
payload goes straight to a `ResponseSink` in the same call. No task wakes up
until the response has ended.

What it supports is what OpenAI-compatible servers need: one request at a time
per connection (no pipelining), keep-alive with `Connection: close` and
HTTP/1.0 honoured, `1xx` interim answers skipped, TLS for `https` targets (the context
comes from `http_policy.HttpPolicy`, as aiohttp's does). It does not follow redirects (a 3xx
is the request's `http` error), use proxies (`http_policy.refuse_proxy` says so before the
run), or decompress (it asks for identity).

A pool made with `kernel_stamps` (`--kernel-stamps`) opens its plain-http connections as
`kernel_stamps.StampedTransport`s: a read's time is then the kernel's receive stamp of its last
packet, not when the loop got to it (`stamped_data_received`), at ~1 µs more per read.

Failures end the exchange's future with one of three exceptions:
`ConnectionLost` (the peer closed or reset before the body ended),
`BadFraming` (a malformed chunk size, a body cut short of its length) and
`BadResponse` (not HTTP: a malformed status line or header block).
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl as ssl_module
from collections import deque
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Protocol
from urllib.parse import urlsplit

import httptools

from tokspeed.backends.kernel_stamps import StampedTransport

PREWARM_PARALLEL = 128  # connects in progress at once while opening connections ahead of the load
# connections refused (the server's port is closed: killed, restarting): wait before the next connect,
# BACKOFF_FIRST_S after the first refusal, doubling up to BACKOFF_MAX_S; any connection that opens resets it
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
GIVE_UP_S = 10.0  # refused this long without a break, after the target had answered: it is gone
DRAIN_S = 2.0  # how long a detached response may take to end before its connection is closed
DRAIN_HOLD_S = 0.05  # how long a request may wait for a draining connection before opening a new one
# an idle connection the server closed this soon after it came back to the pool was closed because of the
# response (llama-server), not by an idle timeout (uvicorn's 5 s): the pool then stops reusing connections
CLOSED_AFTER_RESPONSE_S = 0.1


class HTTPError(Exception):
    """Base of the client's failures."""


class ConnectionLost(HTTPError):
    """The connection closed or broke before the response ended."""


class BadFraming(HTTPError):
    """The body's framing is broken (chunk sizes, short Content-Length)."""


class BadResponse(HTTPError):
    """The bytes received are not an HTTP/1.x response."""


class ResponseSink(Protocol):
    """Receives one response; called from `data_received`, so it must not block."""

    def on_head(self, status: int, headers: dict[str, str]) -> None: ...

    def on_body(self, data: bytes, now: int) -> None: ...


class Endpoint:
    """Where requests go: scheme, host, port and the request-line prefix for a URL."""

    __slots__ = ("host", "host_header", "port", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default = (self.port == 443) if self.tls else (self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default else f"{host}:{self.port}"


def request_head(method: str, path: str, endpoint: Endpoint, headers: dict[str, str]) -> bytes:
    """The request line and headers up to (not including) Content-Length, built once per target."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {endpoint.host_header}", "Accept-Encoding: identity"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def request_bytes(head: bytes, body: bytes) -> bytes:
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)


# what llhttp raises for bytes it cannot parse
PARSER_ERRORS = (httptools.HttpParserUpgrade, httptools.HttpParserError)


def parse_failure(exc: Exception, in_body: bool) -> HTTPError:
    """The client's failure for one of `PARSER_ERRORS`: broken framing once the body began, else not HTTP."""
    if isinstance(exc, httptools.HttpParserUpgrade):
        return BadResponse("the server switched protocols")
    return BadFraming(f"bad body framing: {exc}") if in_body else BadResponse(f"not HTTP/1.x: {exc}")


class ResponseParsing:
    """The llhttp callbacks of a connection (asyncio here, blocking in `distributed.sync_http`).

    They collect the headers, skip `1xx` answers, decide keep-alive and read-to-close framing,
    and hand each body piece to the sink with the time of the read that carried it (`_now`).
    The connection owns the parser, feeds it, and acts on `_complete`.
    """

    _parser: httptools.HttpResponseParser
    _sink: ResponseSink | None
    _headers: dict[str, str]
    _now: int  # when the read being parsed arrived
    _interim: bool  # the current message is a 1xx answer
    _in_body: bool
    _to_close: bool  # the body has no length: it ends when the connection closes
    _complete: bool
    keep_alive: bool

    def on_message_begin(self) -> None:
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        val = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {val}" if key in self._headers else val

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._interim = 100 <= status < 200
        if self._interim:  # 100 Continue and friends: the real answer follows
            return
        headers = self._headers
        self.keep_alive = bool(self._parser.should_keep_alive())
        self._in_body = True
        framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
        self._to_close = not framed and status not in (204, 304)
        if self._to_close:
            self.keep_alive = False
        if self._sink is not None:
            self._sink.on_head(status, headers)

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is not None and body:
            sink.on_body(body, self._now)

    def on_message_complete(self) -> None:
        if not self._interim:
            self._complete = True


class Connection(ResponseParsing, asyncio.Protocol):
    """One keep-alive connection; `exchange()` sends a request and parses its response inline.

    Framing (status line, headers, Content-Length, chunked) is parsed in C by
    llhttp (httptools); each payload piece it finds goes straight to the sink,
    stamped with the time of the read that carried it.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = True
        self.unended = False  # closed after being detached, before its body ended in its framing
        self._parser = httptools.HttpResponseParser(self)
        self._sink: ResponseSink | None = None
        self._done: asyncio.Future[int] | None = None
        self._busy = False  # an exchange is in progress (request sent, body not ended)
        self._in_body = False
        self._to_close = False  # the body has no length: it ends when the connection closes
        self._interim = False  # the current message is a 1xx answer
        self._headers: dict[str, str] = {}
        self._now = 0  # when the read being parsed arrived
        self._complete = False
        self._after: Callable[[Connection], None] | None = None  # called when a detached body ends
        self.released_ns = 0  # when it last came back to the pool idle
        self.closed_ns = 0  # when the close was read

    # asyncio.Protocol --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.closed_ns = perf_counter_ns()
        after, self._after = self._after, None
        if after is not None:  # a detached body that drained to a close or reset: hand it back now
            self._busy = False
            after(self)
            return
        if not self._busy:
            return
        if self._to_close and self._in_body:  # the body ran to the close: that is its end
            self._end(perf_counter_ns())
            return
        self._busy = False
        done = self._done
        if done is not None and not done.done():
            what = f"{type(exc).__name__}: {exc}" if exc else "server closed the connection"
            where = "before the response ended" if self._in_body else "before the response"
            done.set_exception(ConnectionLost(f"{what} {where}"))
        elif done is not None:  # detached at [DONE], then closed before its body ended in its framing
            self.unended = True

    def eof_received(self) -> bool | None:
        return False  # close our side too; connection_lost follows

    # exchange ----------------------------------------------------------------
    def exchange(self, data: bytes, sink: ResponseSink) -> asyncio.Future[int]:
        """Write `data`; the future resolves with the time of the last read when the body ends."""
        assert self.transport is not None and not self._busy
        self._done = asyncio.get_running_loop().create_future()
        self._sink, self._busy = sink, True
        self._in_body = self._to_close = self._complete = False
        self.transport.write(data)
        return self._done

    def detach(self, now: int) -> None:
        """The caller has what it needs: resolve the exchange now; the rest of the body is read and dropped."""
        self._sink = None
        done = self._done
        if done is not None and not done.done():
            done.set_result(now)

    @property
    def reusable(self) -> bool:
        return not self.closed and self.keep_alive and not self._busy

    def peer_closed(self) -> bool:
        """Whether the idle socket is readable now (one poll, no wait): the peer's close, or bytes nobody asked for.

        A server may close a keep-alive connection right after a response (llama.cpp's llama-server
        closes it after every streamed one while its headers say keep-alive): the close reaches the
        socket a few microseconds after the body's last byte, before the event loop has read it, so a
        request sent at once on it would be lost. Either way the connection is not reused.
        """
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    @property
    def draining(self) -> bool:
        """Detached with its body still arriving on a connection worth keeping."""
        return not self.closed and self.keep_alive and self._busy and not self._to_close

    def abort(self) -> None:
        self.closed = True
        self._busy = False
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self._received(data, perf_counter_ns())  # the read's time, before anything else

    def stamped_data_received(self, data: bytes, stamp_ns: int | None) -> None:
        """A read with the kernel's receive stamp (`--kernel-stamps`): when its last packet reached the socket."""
        self._received(data, perf_counter_ns() if stamp_ns is None else stamp_ns)

    def _received(self, data: bytes, now: int) -> None:
        self._now = now
        if not self._busy:
            if data.strip():
                self.keep_alive = False  # bytes nobody asked for: do not trust this connection
            return
        try:
            self._parser.feed_data(data)
        except PARSER_ERRORS as exc:
            self._fail(parse_failure(exc, self._in_body))
            return
        if self._complete:
            self._end(self._now)

    # endings -----------------------------------------------------------------------
    def _end(self, now: int) -> None:
        self._busy = self._in_body = self._complete = False
        self._sink = None
        done = self._done
        if done is not None and not done.done():
            done.set_result(now)
        after, self._after = self._after, None
        if after is not None:
            after(self)

    def _fail(self, exc: HTTPError) -> None:
        done = self._done
        self.abort()
        self._sink = None
        if done is not None and not done.done():
            done.set_exception(exc)


async def open_stamped(loop: asyncio.AbstractEventLoop, host: str, port: int) -> tuple[StampedTransport, Connection]:
    """A plain TCP connection whose reads carry the kernel's receive stamps (`--kernel-stamps`).

    Each address `host` resolves to is tried in turn, as `create_connection` does; when none
    connects, the last one's error is raised (a refusal stays a ConnectionRefusedError).
    """
    failure: OSError | None = None
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            conn = Connection()
            return StampedTransport(loop, sock, conn), conn
        except OSError as exc:
            sock.close()
            failure = exc
        except BaseException:
            sock.close()
            raise
    raise failure or OSError(f"{host} resolved to no address")


class Refusals:
    """Connection refusals in a row, and the back-off they impose on the next connect.

    A server killed mid-run refuses at once, so without a pause a closed loop turns thousands
    of refusals a second into records: the error rate and a `--requests` budget would then
    describe the outage, not the run. After each refusal the next connect waits (first
    BACKOFF_FIRST_S, doubling, at most BACKOFF_MAX_S); a connection that opens ends the streak.
    """

    __slots__ = ("connected", "longest_ns", "since_ns", "streak", "total", "waited_ns", "_retry_at")

    def __init__(self) -> None:
        self.connected = False  # a connection ever opened
        self.total = 0  # refusals over the whole run
        self.streak = 0  # refusals since the last connection that opened
        self.since_ns: int | None = None  # the first refusal of the streak
        self.longest_ns = 0  # the longest streak, first refusal to the connect that ended it (or to now)
        self.waited_ns = 0  # back-off slept, all connects together
        self._retry_at = 0

    def wait_s(self, now: int) -> float:
        return max(0, self._retry_at - now) / 1e9

    def refused(self, now: int) -> None:
        self.total += 1
        self.streak += 1
        if self.since_ns is None:
            self.since_ns = now
        self.longest_ns = max(self.longest_ns, now - self.since_ns)
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(self.streak - 1, 30))
        self._retry_at = max(self._retry_at, now + int(delay * 1e9))

    def opened(self, now: int) -> None:
        if self.since_ns is not None:
            self.longest_ns = max(self.longest_ns, now - self.since_ns)
        self.connected = True
        self.streak, self.since_ns, self._retry_at = 0, None, 0

    def gone(self, now: int) -> str | None:
        """Why the target looks gone (refused for GIVE_UP_S without a break after answering), or None."""
        if not self.connected or self.since_ns is None or now - self.since_ns < GIVE_UP_S * 1e9:
            return None
        return (f"the target stopped answering: it refused every connection for {(now - self.since_ns) / 1e9:.0f} s "
                f"({self.streak} attempts, backing off up to {BACKOFF_MAX_S:g} s between them)")

    def note(self) -> str | None:
        """What the run.json warnings say about the refusals (None when there were none)."""
        if not self.total:
            return None
        return (f"the target refused {self.total} connections (the longest outage {self.longest_ns / 1e9:.1f} s): "
                f"tokspeed backed off between attempts ({BACKOFF_FIRST_S * 1000:g} ms doubling to "
                f"{BACKOFF_MAX_S:g} s; {self.waited_ns / 1e9:.1f} s waited in all), so those requests' send lateness "
                "includes the waits and each refused request is one connect error")


class Pool:
    """Up to `limit` keep-alive connections to one endpoint; callers wait when all are busy."""

    def __init__(self, endpoint: Endpoint, limit: int, connect_timeout_s: float | None = None,
                 ssl_context: ssl_module.SSLContext | None = None, kernel_stamps: bool = False) -> None:
        if kernel_stamps and endpoint.tls:
            raise ValueError("kernel receive stamps need a plain http:// connection (TLS decrypts above the socket)")
        self.endpoint = endpoint
        self.kernel_stamps = kernel_stamps  # connections read with recvmsg and stamped by the kernel
        self.limit = max(1, limit)
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[Connection] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._draining: set[Connection] = set()  # detached, body still arriving
        self._uncounted: set[Connection] = set()  # draining past DRAIN_HOLD_S: no longer counted in _open
        self.refusals = Refusals()
        self.unended = 0  # bodies detached at [DONE] that never ended by their framing (closed, reset, held)
        # the server closed a kept-alive connection right after a response: from then on each request gets a
        # new one (llama-server closes after every streamed response, µs after its last byte: a reuse races it)
        self.peer_closes = False
        # https: the caller's context (backends/http_policy.py, shared with aiohttp), else the system's trust
        self._ssl: ssl_module.SSLContext | None = (ssl_context or ssl_module.create_default_context()) if endpoint.tls else None

    async def acquire(self) -> tuple[Connection, int | None]:
        """An idle connection (connect time None) or a new one (with its connect time in ns)."""
        while True:
            while self._idle:
                conn = self._idle.pop()
                if conn.reusable and not conn.peer_closed():
                    return conn, None
                closed_at = conn.closed_ns if conn.closed else perf_counter_ns()  # read, or waiting in the socket
                if conn.keep_alive and closed_at - conn.released_ns < CLOSED_AFTER_RESPONSE_S * 1e9:
                    self.peer_closes = True
                self._drop(conn)
            if self._open < self.limit:
                return await self._connect()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake()  # it was our turn: pass it on
                raise

    async def _connect(self) -> tuple[Connection, int]:
        self._open += 1
        loop = asyncio.get_running_loop()
        try:
            if (wait := self.refusals.wait_s(perf_counter_ns())) > 0:  # the target refused: back off first
                await asyncio.sleep(wait)
                self.refusals.waited_ns += int(wait * 1e9)
            t0 = perf_counter_ns()
            opening = self._opening(loop)
            if self.connect_timeout_s is None:
                _, conn = await opening
            else:
                _, conn = await asyncio.wait_for(opening, self.connect_timeout_s)
        except BaseException as exc:
            self._open -= 1
            self._wake()
            if isinstance(exc, ConnectionRefusedError):
                self.refusals.refused(perf_counter_ns())
            raise
        now = perf_counter_ns()
        self.refusals.opened(now)
        return conn, now - t0

    def _opening(self, loop: asyncio.AbstractEventLoop) -> Awaitable[tuple[asyncio.BaseTransport, Connection]]:
        """One connection to the endpoint: kernel-stamped (plain http) when asked, else the loop's own transport."""
        host, port = self.endpoint.host, self.endpoint.port
        if self.kernel_stamps:
            return open_stamped(loop, host, port)
        return loop.create_connection(Connection, host, port, ssl=self._ssl, server_hostname=host if self._ssl else None)

    def release(self, conn: Connection) -> None:
        """Give a connection back after an exchange; a connection that cannot be reused is closed.

        A detached connection whose body is still arriving (the stream's `[DONE]` came
        before the HTTP terminator) drains in the background: it comes back to the pool when
        its body ends in its framing (normally within a millisecond), or is dropped at once if
        the peer closes or resets it (`connection_lost`). It keeps its place in the pool's count
        for DRAIN_HOLD_S only: after that a waiting request opens a new connection rather than
        wait for it, and it is closed if its body has not ended after `DRAIN_S`. A connection
        whose body did not end by its own framing is never reused: where the next response
        would begin is unknown.
        """
        if conn.reusable and not self.peer_closes:
            conn.released_ns = perf_counter_ns()
            self._idle.append(conn)
        elif conn.unended:  # [DONE], then a close or reset before the pool even had it back
            self.unended += 1
            self._drop(conn)
        elif conn.draining and len(self._draining) < self.limit:  # at most `limit` more sockets open
            self._draining.add(conn)
            conn._after = self._drained
            loop = asyncio.get_running_loop()
            loop.call_later(DRAIN_HOLD_S, self._stop_holding, conn)
            loop.call_later(DRAIN_S, self._drain_expired, conn)
            return
        else:
            self._drop(conn)
        self._wake()

    def _stop_holding(self, conn: Connection) -> None:
        """A drain past DRAIN_HOLD_S: its place in the count goes to the requests waiting for one."""
        if conn._after is not None and conn not in self._uncounted:
            self._uncounted.add(conn)
            self._open -= 1
            self._wake()

    def _drained(self, conn: Connection) -> None:
        """A draining connection's body ended (or it closed): back into the pool if reusable and there is room."""
        self._draining.discard(conn)
        counted = conn not in self._uncounted
        self._uncounted.discard(conn)
        if conn.reusable and not self.peer_closes and (counted or self._open < self.limit):
            self._open += not counted
            conn.released_ns = perf_counter_ns()
            self._idle.append(conn)
        else:
            self.unended += conn.closed
            self._open -= counted
            if not conn.closed:
                conn.abort()
        self._wake()

    def _drain_expired(self, conn: Connection) -> None:
        if conn._after is not None:  # still draining
            conn._after = None
            self._draining.discard(conn)
            self._open -= conn not in self._uncounted
            self._uncounted.discard(conn)
            self.unended += 1
            conn.abort()
            self._wake()

    def _drop(self, conn: Connection) -> None:
        self._open -= 1
        if not conn.closed:
            conn.abort()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def prewarm(self, count: int, parallel: int = PREWARM_PARALLEL) -> int:
        """Open up to `count` connections ahead of the load (so no measured request pays a connect).

        At most `parallel` connects are in progress at once: thousands of simultaneous SYNs
        overflow a server's listen backlog, and a dropped handshake costs seconds of retransmits.
        """
        count = min(count, self.limit - self._open)
        opened = 0
        for start in range(0, max(count, 0), parallel):
            wave = min(parallel, count - start)
            results = await asyncio.gather(*(self._connect() for _ in range(wave)), return_exceptions=True)
            for result in results:
                if isinstance(result, tuple):
                    self._idle.append(result[0])
                    opened += 1
            if opened < start + wave:  # the server refuses or is slow: the load will connect on demand
                break
        return opened

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._open -= len(self._idle)
        self._idle.clear()
        for conn in self._draining:
            conn._after = None
            conn.abort()
        self._open -= len(self._draining - self._uncounted)
        self._draining.clear()
        self._uncounted.clear()
