"""The blocking Locust client and a server that closes idle keep-alive connections (review of d5e6b3b).

uvicorn (vLLM, SGLang) closes a keep-alive connection after 5 idle seconds. A paced Locust
user (`--tokspeed-rate`, U/R seconds between its requests) often waits longer than that, so
its next request must not go out on the dead socket and fail as a connect error: it opens a
new connection (and says so in connect_duration_ns).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import orjson
import pytest

from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.distributed.sync_http import SyncOpenAIClient
from tokspeed.records import RequestRecord, RequestSpec, Status

IDLE_CLOSE_S = 0.05


def _sse() -> bytes:
    events = [
        {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}]},
    ]
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _serve_one_connection(conn: socket.socket) -> None:
    """Answer every request on `conn`; close it after IDLE_CLOSE_S without a new request (keep-alive timeout)."""
    body = _sse()
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    buf = b""
    conn.settimeout(IDLE_CLOSE_S)
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head_end = buf.index(b"\r\n\r\n") + 4
            length = int(next(line.split(b":")[1] for line in buf[:head_end].split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(buf) < head_end + length:
                buf += conn.recv(65536)
            buf = buf[head_end + length:]
            conn.sendall(head + body)
    except (TimeoutError, OSError):
        return
    finally:
        conn.close()


@pytest.fixture
def idle_closing_server() -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=_serve_one_connection, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(2)
        listener.close()


def _send(client: SyncOpenAIClient, index: int) -> RequestRecord:
    record = RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=time.perf_counter_ns())
    client.send(RequestSpec(index=index, prompt="hi", max_tokens=2), record)
    return record


def test_a_connection_the_server_closed_while_idle_is_not_reused(idle_closing_server: str) -> None:
    client = SyncOpenAIClient(OpenAIHTTPBackend(idle_closing_server, model="m"), timeout_s=5.0)
    try:
        first = _send(client, 0)
        back_to_back = _send(client, 1)  # within the idle timeout: the same connection
        time.sleep(IDLE_CLOSE_S * 6)  # the server has closed it by now
        after_idle = _send(client, 2)
    finally:
        client.close()
    assert first.status is Status.OK and first.connect_duration_ns is not None
    assert back_to_back.status is Status.OK and back_to_back.connect_duration_ns is None
    assert after_idle.status is Status.OK, after_idle.error
    assert after_idle.connect_duration_ns is not None  # it paid for a new connection, and says so
    assert after_idle.output_tokens == 2
