"""`tokspeed sim --kernel-stamps`: arrivals stamped by the kernel, on real loopback sockets.

The check that matters: while the simulator's event loop is blocked (as it is while it writes a
burst of chunks), a request that reaches its socket is logged as arriving when it was sent, not
when the loop got to it; the loop's own stamp, the default, is late by the block. Then the
transport is exercised where a hand-written one breaks: requests and answers larger than one
read or one send, keep-alive, and a client that goes away.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from tests.integration.harness import ClockDrift

from tokspeed.backends.kernel_stamps import supported
from tokspeed.sim import SimConfig, make_app
from tokspeed.sim.arrival import use_arrival_stamps
from tokspeed.sim.server import listen_site

pytestmark = pytest.mark.skipif(not supported(), reason="kernel receive stamps on TCP are Linux's")

MS = 1_000_000
BLOCK_MS = 300  # how long the simulator's loop is kept busy after the request is sent


@asynccontextmanager
async def serving(tmp_path: Path, kernel_stamps: bool, **cfg: Any) -> AsyncIterator[tuple[int, Path]]:
    """The simulator in this loop, listening as `run_server` does; yields its port and log."""
    log_path = tmp_path / f"sim-{kernel_stamps}.jsonl"
    runner = web.AppRunner(make_app(SimConfig(log_path=log_path, **cfg)), access_log=None)
    await runner.setup()
    use_arrival_stamps(runner)
    try:
        await listen_site(runner, "127.0.0.1", 0, kernel_stamps=kernel_stamps).start()
        yield runner.addresses[0][1], log_path
    finally:
        await runner.cleanup()


def _request(port: int, body: dict[str, Any]) -> bytes:
    data = orjson.dumps(body)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


def _send_late_and_read(sock: socket.socket, request: bytes, sent_ns: list[int]) -> bytes:
    time.sleep(0.03)  # the loop is blocked by now
    sent_ns.append(time.perf_counter_ns())
    sock.sendall(request)
    answer = b""
    while b"data: [DONE]" not in answer:
        part = sock.recv(65536)
        if not part:
            break
        answer += part
    return answer


@pytest.mark.parametrize("kernel_stamps", [True, False], ids=["kernel", "loop"])
async def test_a_request_sent_while_the_loop_is_busy_is_logged_as_arriving_when_sent(
    tmp_path: Path, kernel_stamps: bool
) -> None:
    drift = ClockDrift()
    async with serving(tmp_path, kernel_stamps, ttft_ms=0, itl_ms=0) as (port, log_path):
        sock = socket.create_connection(("127.0.0.1", port))
        await asyncio.sleep(0.02)  # the loop accepts the connection
        sent_ns: list[int] = []
        client = threading.Thread(target=lambda: answers.append(_send_late_and_read(
            sock, _request(port, {"prompt": "x", "max_tokens": 2, "stream": True}), sent_ns)))
        answers: list[bytes] = []
        client.start()
        time.sleep(BLOCK_MS / 1000)  # the loop is busy: nothing in it runs, the request waits in the socket
        unblocked_ns = time.perf_counter_ns()
        await asyncio.to_thread(client.join, 10)
        sock.close()
    assert answers and b"data: [DONE]" in answers[0]
    assert unblocked_ns - sent_ns[0] > 100 * MS  # the request did wait in the socket (the thread sent at ~30 ms)
    [entry] = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    late_ms = (entry["received_ns"] - sent_ns[0]) / MS
    if kernel_stamps:  # the kernel's stamp: the send's delivery on loopback (µs; 20 ms for a preempted thread)
        early_ms = drift.allowance_ms()  # the real-time clock's adjustments between arrival and read
        assert -early_ms < late_ms < 20 and entry["received_ns"] < unblocked_ns, (late_ms, early_ms)
    else:  # the loop's stamp, the default: not before the loop was free to read
        assert entry["received_ns"] >= unblocked_ns, late_ms
    assert entry["start_ns"] >= entry["received_ns"]


async def test_large_requests_and_answers_keep_alive_and_match_the_default_transport(tmp_path: Path) -> None:
    prompt = "word " * 200_000  # 1 MB: many reads
    bodies = [
        {"prompt": prompt, "max_tokens": 3, "stream": True},
        {"prompt": "x", "max_tokens": 1_000_000, "stream": False},  # ~ 4 MB answer: more than one send
        {"prompt": "x", "max_tokens": 5, "stream": True},
    ]
    answers: dict[bool, list[bytes]] = {}
    for kernel_stamps in (True, False):
        async with serving(tmp_path, kernel_stamps, ttft_ms=0, itl_ms=0) as (port, _), aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1)  # one connection, kept alive across the three
        ) as session:
            answers[kernel_stamps] = []
            for body in bodies:
                async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as resp:
                    assert resp.status == 200
                    answers[kernel_stamps].append(await resp.read())
    assert len(answers[True][1]) > 3_000_000
    for got, expected in zip(answers[True], answers[False]):
        assert _without_times(got) == _without_times(expected)


def _without_times(raw: bytes) -> bytes:
    """The answer without the `created` field (seconds since the epoch, may differ between runs)."""
    import re

    return re.sub(rb'"created":\d+', b'"created":0', raw)


async def test_a_client_that_goes_away_mid_stream_is_logged_as_disconnected(tmp_path: Path) -> None:
    async with serving(tmp_path, True, ttft_ms=0, itl_ms=20) as (port, log_path):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(port, {"prompt": "x", "max_tokens": 500, "stream": True}))
        await reader.readuntil(b"data: {")
        writer.transport.abort()
        for _ in range(300):
            if log_path.exists() and log_path.read_bytes():
                break
            await asyncio.sleep(0.01)
    [entry] = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert entry["status"] == "disconnected" and 0 < entry["completion_tokens"] < 500


@pytest.mark.skipif(sys.platform != "linux", reason="Linux")
async def test_the_cli_flag_serves_with_kernel_stamps(tmp_path: Path) -> None:
    log_path = tmp_path / "cli.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tokspeed", "sim", "--port", "0", "--kernel-stamps", "--ttft-ms", "0", "--itl-ms", "0",
        "--log", str(log_path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
        base = line.split("listening on ")[1].split()[0]
        async with aiohttp.ClientSession() as session, session.post(
            base + "/completions", json={"prompt": "x", "max_tokens": 3, "stream": True}
        ) as resp:
            assert b"data: [DONE]" in await resp.read()
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, stderr.decode()
    [entry] = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert entry["status"] == "ok" and entry["received_ns"] <= entry["start_ns"]
