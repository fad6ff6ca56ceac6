"""The lean HTTP/1.1 client over real loopback sockets: pooling, keep-alive, connect times."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from tests.integration.harness import SimServer, load_json, records, run_cli

from tokspeed.backends.http1 import Endpoint, Pool, request_bytes, request_head
from tokspeed.records import Status


class Sink:
    def __init__(self) -> None:
        self.status: int | None = None
        self.body = b""

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def on_body(self, data: bytes, now: int) -> None:
        self.body += data


async def serve(close: bool) -> tuple[web.AppRunner, str, list[object], list[int]]:
    """A server that answers `ok`, remembers which connection carried each request, and how many ran at once."""
    seen: list[object] = []
    peak = [0, 0]  # running, max

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.transport)
        peak[0] += 1
        peak[1] = max(peak)
        await asyncio.sleep(0.02)
        peak[0] -= 1
        return web.Response(text="ok", headers={"Connection": "close"} if close else {})

    app = web.Application()
    app.router.add_post("/x", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/x", seen, peak


async def post(pool: Pool, url: str) -> tuple[Sink, int | None]:
    conn, connect_ns = await pool.acquire()
    sink = Sink()
    try:
        await conn.exchange(request_bytes(request_head("POST", "/x", pool.endpoint, {}), b"{}"), sink)
    finally:
        pool.release(conn)
    return sink, connect_ns


def test_keep_alive_reuses_connections_and_the_limit_holds() -> None:
    async def go() -> None:
        runner, url, seen, peak = await serve(close=False)
        pool = Pool(Endpoint(url), limit=2)
        try:
            results = await asyncio.gather(*(post(pool, url) for _ in range(10)))
        finally:
            pool.close()
            await runner.cleanup()
        assert all(s.status == 200 and s.body == b"ok" for s, _ in results)
        assert peak[1] <= 2 and len({id(t) for t in seen}) == 2  # 2 connections carried all 10
        assert sum(c is not None for _, c in results) == 2  # only the 2 that opened one report a connect time

    asyncio.run(go())


def test_connection_close_means_a_new_connection_and_a_connect_time_each_time() -> None:
    async def go() -> None:
        runner, url, seen, _ = await serve(close=True)
        pool = Pool(Endpoint(url), limit=1)
        try:
            results = [await post(pool, url) for _ in range(3)]
        finally:
            pool.close()
            await runner.cleanup()
        assert [s.body for s, _ in results] == [b"ok"] * 3
        assert all(c is not None and c > 0 for _, c in results) and len({id(t) for t in seen}) == 3

    asyncio.run(go())


def test_prewarm_opens_connections_ahead_of_the_load() -> None:
    async def go() -> None:
        runner, url, _, _ = await serve(close=False)
        pool = Pool(Endpoint(url), limit=4)
        try:
            assert await pool.prewarm(4) == 4
            results = await asyncio.gather(*(post(pool, url) for _ in range(4)))
        finally:
            pool.close()
            await runner.cleanup()
        assert all(c is None for _, c in results)  # nobody paid a connect

    asyncio.run(go())


def test_prewarm_in_waves_opens_every_connection_asked_for() -> None:
    async def go() -> None:
        runner, url, _, _ = await serve(close=False)
        pool = Pool(Endpoint(url), limit=10)
        try:
            assert await pool.prewarm(10, parallel=3) == 10  # waves of 3, 3, 3, 1
            assert await pool.prewarm(5) == 0  # the limit is reached
        finally:
            pool.close()
            await runner.cleanup()

    asyncio.run(go())


def test_prewarm_against_nobody_stops_after_the_first_wave() -> None:
    async def go() -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pool = Pool(Endpoint(f"http://127.0.0.1:{port}/x"), limit=100)
        assert await pool.prewarm(100, parallel=4) == 0 and pool._open == 0

    asyncio.run(go())


@pytest.mark.parametrize("concurrency", [4])
def test_a_run_warms_its_connections_so_no_measured_request_pays_a_connect(
    start_sim: Callable[..., SimServer], tmp_path: Path, concurrency: int
) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--concurrency", str(concurrency),
                "--requests", "20", "--max-tokens", "4", "--warmup", "0", "--plain")
    assert p.returncode == 0, p.stderr
    recs = records(tmp_path / "r")
    assert len(recs) == 20 and all(r["status"] == Status.OK.value for r in recs)
    assert all(r["connect_duration_ns"] is None for r in recs)


def test_a_server_without_keep_alive_costs_a_connect_per_request_and_the_diagnosis_says_so(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1", "--no-keep-alive")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--concurrency", "4",
                "--requests", "40", "--max-tokens", "4", "--warmup", "4", "--plain")
    assert p.returncode == 0, p.stderr
    recs = [r for r in records(tmp_path / "r") if not r["warmup"]]
    assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
    assert all(r["connect_duration_ns"] is not None and r["connect_duration_ns"] > 0 for r in recs)
    result = load_json(tmp_path / "r" / "run.json")
    assert result["benchmarks"][0]["summary"]["connect_ms"]["count"] == 40
    (found,) = [f for f in result["diagnosis"] if f["rule"] == "reconnects"]
    assert found["evidence"]["connects"] == 40 and "reconnects" in " ".join(p.stdout.split())
