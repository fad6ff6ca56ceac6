"""The lean HTTP/1.1 client's response parsing, fed byte by byte as a network might split it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tokspeed.backends.http1 import (
    BadFraming,
    BadResponse,
    Connection,
    ConnectionLost,
    Endpoint,
    request_bytes,
    request_head,
)


class Sink:
    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.reads: list[tuple[bytes, int]] = []

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def on_body(self, data: bytes, now: int) -> None:
        self.reads.append((data, now))

    @property
    def body(self) -> bytes:
        return b"".join(d for d, _ in self.reads)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True


def exchange(reads: list[bytes], lose: bool = False) -> tuple[Sink, Connection, Any]:
    """Run one exchange over a fake transport; returns the sink, the connection and the outcome."""

    async def go() -> tuple[Sink, Connection, Any]:
        conn = Connection()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        sink = Sink()
        done = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", sink)
        for r in reads:
            conn.data_received(r)
        if lose:
            conn.connection_lost(None)
        try:
            return sink, conn, done.result() if done.done() else None
        except Exception as exc:  # the outcome under test
            return sink, conn, exc

    return asyncio.run(go())


SSE = b"data: {\"a\":1}\n\n" * 3 + b"data: [DONE]\n\n"


def chunked(payload: bytes, size: int) -> bytes:
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("split", [1, 2, 3, 7, 64, 10_000])
def test_chunked_body_survives_any_split(split: int) -> None:
    raw = HEAD + chunked(SSE, 9)
    sink, conn, end = exchange([raw[i : i + split] for i in range(0, len(raw), split)])
    assert sink.status == 200 and sink.headers["content-type"] == "text/event-stream"
    assert sink.body == SSE and isinstance(end, int) and conn.reusable


def test_every_piece_carries_the_time_of_the_read_that_brought_it() -> None:
    raw = HEAD + chunked(SSE, 15)
    half = len(HEAD) + 40
    sink, _, _ = exchange([raw[:half], raw[half:]])
    times = sorted({t for _, t in sink.reads})
    first = b"".join(d for d, t in sink.reads if t == times[0])
    assert len(times) == 2 and first == SSE[: len(first)] and 15 <= len(first) < 40


def test_content_length_body_and_keep_alive() -> None:
    sink, conn, end = exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", b"lo"])
    assert sink.body == b"hello" and isinstance(end, int) and conn.reusable


def test_connection_close_header_makes_the_connection_not_reusable() -> None:
    sink, conn, end = exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"])
    assert sink.body == b"ok" and isinstance(end, int) and not conn.reusable


def test_body_without_length_ends_at_close() -> None:
    sink, conn, end = exchange([b"HTTP/1.0 200 OK\r\n\r\npart one ", b"part two"], lose=True)
    assert sink.body == b"part one part two" and isinstance(end, int) and not conn.reusable


def test_interim_100_continue_is_skipped() -> None:
    sink, _, end = exchange([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"])
    assert sink.status == 201 and sink.body == b"ok" and isinstance(end, int)


def test_close_before_any_byte_is_a_lost_connection_before_the_response() -> None:
    sink, _, err = exchange([], lose=True)
    assert isinstance(err, ConnectionLost) and "before the response" in str(err) and sink.status is None


def test_close_mid_body_is_a_lost_connection_that_keeps_what_arrived() -> None:
    raw = HEAD + chunked(SSE, 9)
    sink, _, err = exchange([raw[: len(HEAD) + 30]], lose=True)
    assert isinstance(err, ConnectionLost) and "before the response ended" in str(err)
    assert sink.status == 200 and sink.body and SSE.startswith(sink.body)


def test_short_content_length_at_close_is_lost_not_complete() -> None:
    _, _, err = exchange([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"], lose=True)
    assert isinstance(err, ConnectionLost)


def test_bad_chunk_size_is_bad_framing() -> None:
    _, conn, err = exchange([HEAD + b"zz\r\nabc\r\n"])
    assert isinstance(err, BadFraming) and conn.closed


def test_garbage_status_line_is_bad_response() -> None:
    _, _, err = exchange([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"])
    assert isinstance(err, BadResponse)


def test_detach_resolves_at_once_and_drops_the_rest_then_the_connection_is_reusable() -> None:
    async def go() -> tuple[int, Sink, Connection]:
        conn = Connection()
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        sink = Sink()
        done = conn.exchange(b"x", sink)
        conn.data_received(HEAD + b"5\r\nhello\r\n")
        conn.detach(123)
        assert conn.draining and not conn.reusable
        conn.data_received(b"5\r\nworld\r\n0\r\n\r\n")
        return done.result(), sink, conn

    end, sink, conn = asyncio.run(go())
    assert end == 123 and sink.body == b"hello" and conn.reusable


def test_request_bytes_carry_host_length_and_headers_but_never_a_second_length() -> None:
    endpoint = Endpoint("http://127.0.0.1:8000/v1/chat/completions")
    head = request_head("POST", "/v1/chat/completions", endpoint, {"Authorization": "Bearer k", "Content-Length": "9"})
    raw = request_bytes(head, b'{"a":1}')
    assert raw.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert raw.count(b"Content-Length") == 1 and raw.endswith(b"Content-Length: 7\r\n\r\n{\"a\":1}")
    assert Endpoint("https://example.com/v1").host_header == "example.com"
    assert Endpoint("http://[::1]:9/v1").host_header == "[::1]:9"


class DetachingSink(Sink):
    """Detaches at its first body bytes, in the same read, as the SSE sink does at data: [DONE]."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def on_body(self, data: bytes, now: int) -> None:
        super().on_body(data, now)
        self.conn.detach(1)


async def _serve_chunks_then(after: str) -> tuple[asyncio.AbstractServer, int]:
    """A server that answers each request with one chunk and no terminator, then holds or closes or resets."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + b"5\r\nhello\r\n")
        await writer.drain()
        if after == "terminator":  # a little after [DONE], as every well-behaved server does
            while True:
                await asyncio.sleep(0.005)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                await reader.readuntil(b"\r\n\r\n")
                writer.write(HEAD + b"5\r\nhello\r\n")
                await writer.drain()
        elif after == "close":
            writer.close()
        elif after == "reset":
            writer.transport.abort()
        else:
            await asyncio.sleep(30)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("after", ["hold", "close", "reset"])
async def test_a_draining_connection_never_makes_the_next_request_wait(after: str) -> None:
    """[DONE] came, the chunk terminator does not: the slot is free at once and the connection is not reused."""
    from tokspeed.backends.http1 import DRAIN_S, Pool

    server, port = await _serve_chunks_then(after)
    pool = Pool(Endpoint(f"http://127.0.0.1:{port}/v1"), limit=1)
    try:
        for _ in range(3):
            # a fresh connection each time (connect time given): one whose framing never ended is not reused;
            # DRAIN_S / 2 is > 100x a loopback connect on 2 loaded cores (the bug waited DRAIN_S per request)
            conn, connect_ns = await asyncio.wait_for(pool.acquire(), DRAIN_S / 2)
            assert connect_ns is not None
            sink = DetachingSink(conn)
            assert await conn.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", sink) == 1
            pool.release(conn)
        await asyncio.sleep(0.05)
        if after != "hold":  # closed or reset while draining: handed back (and dropped) at once
            assert not pool._draining and pool.unended == 3
    finally:
        pool.close()
        server.close()
    assert not pool._draining and pool._open == 0


async def test_a_connection_whose_terminator_follows_done_is_reused() -> None:
    """The normal case: the chunk terminator comes a few ms after [DONE]; the next request waits for it, no reconnect."""
    from tokspeed.backends.http1 import Pool

    server, port = await _serve_chunks_then("terminator")
    pool = Pool(Endpoint(f"http://127.0.0.1:{port}/v1"), limit=1)
    connects = []
    try:
        for _ in range(4):
            conn, connect_ns = await asyncio.wait_for(pool.acquire(), 5)
            connects.append(connect_ns)
            assert await conn.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", DetachingSink(conn)) == 1
            pool.release(conn)
    finally:
        pool.close()
        server.close()
    assert connects[0] is not None and connects[1:] == [None, None, None] and pool.unended == 0


def test_refusals_back_off_doubling_to_a_cap_and_reset_when_a_connection_opens() -> None:
    from tokspeed.backends.http1 import BACKOFF_FIRST_S, BACKOFF_MAX_S, GIVE_UP_S, Refusals

    r, ms = Refusals(), 1_000_000
    assert r.wait_s(0) == 0 and r.gone(0) is None and r.note() is None
    r.opened(0)
    waits = []
    now = 0
    for _ in range(8):
        r.refused(now)
        waits.append(round(r.wait_s(now), 3))
        now += 10 * ms
    assert waits == [min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**k) for k in range(8)]
    assert r.gone(now) is None  # refused, but not for GIVE_UP_S yet
    assert r.gone(int(GIVE_UP_S * 1e9)) is not None and "stopped answering" in (r.gone(int(GIVE_UP_S * 1e9)) or "")
    r.opened(now)  # the server is back
    assert r.wait_s(now) == 0 and r.streak == 0 and r.gone(int(GIVE_UP_S * 2e9)) is None
    assert r.total == 8 and "refused 8 connections" in (r.note() or "")
    never = Refusals()  # a target that never answered is not "gone": start-up reports it
    never.refused(0)
    assert never.gone(int(GIVE_UP_S * 2e9)) is None


async def test_a_client_worker_keeps_the_connect_error_of_a_request_that_found_the_target_gone() -> None:
    """In a client worker, TargetGone must not turn the refused request into an `other` error."""
    from tokspeed.backends.worker_child import _one
    from tokspeed.errors import TargetGone
    from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status

    class Gone:
        async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
            record.sent_ns, record.end_ns = 1, 2
            record.status, record.error_kind, record.error = Status.ERROR, ErrorKind.CONNECT, "refused"
            raise TargetGone("the target stopped answering")

    sent: list[bytes] = []
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)
    await _one(Gone(), 1, RequestSpec(index=0, prompt="p"), record, sent.append)  # type: ignore[arg-type]
    assert (record.status, record.error_kind, record.error) == (Status.ERROR, ErrorKind.CONNECT, "refused") and sent


async def test_a_server_that_closes_after_each_response_gets_a_new_connection_for_each_request() -> None:
    # was: llama.cpp's llama-server closes the connection a few µs after each streamed response while its
    # headers say keep-alive; the pool handed it out again before the loop had read the close, and every
    # second request of a run failed as "server closed the connection before the response"
    from tokspeed.backends.http1 import Pool

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()  # at once, as llama-server does

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = Pool(Endpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"), limit=1)
    connects = []
    try:
        for _ in range(4):
            conn, connect_ns = await asyncio.wait_for(pool.acquire(), 5)
            connects.append(connect_ns)
            sink = Sink()
            await asyncio.wait_for(conn.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", sink), 5)
            assert sink.body == b"hello"
            pool.release(conn)
            await asyncio.sleep(0.01)  # the close has reached the socket (the loop may not have read it)
    finally:
        pool.close()
        server.close()
    assert None not in connects and pool.peer_closes  # never reused after the first close seen


async def test_a_server_that_closes_idle_connections_later_keeps_its_connections_reused() -> None:
    """A close long after the response (an idle timeout, uvicorn's 5 s) costs that connection only."""
    from tokspeed.backends import http1
    from tokspeed.backends.http1 import Pool

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3 * http1.CLOSED_AFTER_RESPONSE_S)  # idle timeout
            except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = Pool(Endpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"), limit=1)
    connects = []
    try:
        for pause in (0.0, 0.0, 5 * http1.CLOSED_AFTER_RESPONSE_S, 0.0):
            await asyncio.sleep(pause)
            conn, connect_ns = await asyncio.wait_for(pool.acquire(), 5)
            connects.append(connect_ns)
            await asyncio.wait_for(conn.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", Sink()), 5)
            pool.release(conn)
    finally:
        pool.close()
        server.close()
    assert not pool.peer_closes
    assert connects[0] is not None and connects[1] is None and connects[2] is not None and connects[3] is None
