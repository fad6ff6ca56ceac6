"""Redirects and proxies, against a real local redirecting server and a real local HTTP proxy.

tokspeed never follows a redirect (a benchmark measures the server it names): a 3xx at
discovery or the probe stops the run before the load (exit 2, naming the Location); a 3xx
during the load is that request's `http` error. tokspeed's own HTTP/1.1 client cannot use a
proxy, so HTTP(S)_PROXY / ALL_PROXY that would apply to a non-loopback target are refused
(exit 2, one line saying to set NO_PROXY); a loopback target always goes direct.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from tests.integration.harness import SimServer, records, run_cli

RUN = ("--requests", "4", "--max-tokens", "4", "--warmup", "0", "--plain", "--no-telemetry")


class Background:
    """An asyncio server started by `start(loop)` in a thread of its own; `stop()` ends it."""

    def __init__(self, start: Callable[[], object], stop: Callable[[], object]) -> None:
        self.loop = asyncio.new_event_loop()
        self._stop = stop
        ready = threading.Event()

        def main() -> None:
            self.loop.run_until_complete(start())  # type: ignore[arg-type]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)  # type: ignore[arg-type]
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def serve_app(app: web.Application, host: str = "127.0.0.1") -> tuple[Background, int]:
    runner = web.AppRunner(app)
    ports: list[int] = []

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    return Background(start, runner.cleanup), ports[0]


def redirecting_app(to: str, *, models: bool, probe_ok: int) -> web.Application:
    """A gateway in front of `to` (the simulator's /v1) that redirects to it with 307.

    `models`: GET /v1/models redirects (else it lists the simulator's model itself). POST
    /v1/chat/completions: the first `probe_ok` are answered 200 (a one-token answer), every
    further one redirected.
    """
    posts = [0]
    with urllib.request.urlopen(f"{to}/models", timeout=10) as resp:
        model = json.loads(resp.read())["data"][0]["id"]

    async def list_models(request: web.Request) -> web.Response:
        if models:
            raise web.HTTPTemporaryRedirect(f"{to}/models")
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        posts[0] += 1
        if posts[0] <= probe_ok:
            body = {"id": "x", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            return web.json_response(body)
        raise web.HTTPTemporaryRedirect(f"{to}/chat/completions")

    app = web.Application()
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def sent(out: Path) -> bool:
    """Whether the run recorded any request."""
    return (out / "requests.jsonl").exists() and bool(records(out))


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimServer]:
    server = SimServer(tmp_path, "--ttft-ms", "2", "--itl-ms", "1")
    yield server
    server.stop()


@pytest.mark.parametrize("where", ["discovery", "probe"])
def test_a_redirect_before_the_load_is_refused_naming_its_location(sim: SimServer, tmp_path: Path, where: str) -> None:
    server, port = serve_app(redirecting_app(sim.url, models=where == "discovery", probe_ok=0))
    try:
        p = run_cli("run", "--target", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "r"), *RUN)
    finally:
        server.close()
    assert p.returncode == 2, p.stderr
    first = p.stderr.splitlines()[0]
    assert first.startswith("Error: ") and "307" in first and sim.url in first and "redirect" in first.lower(), p.stderr
    assert "Traceback" not in p.stderr
    assert not sent(tmp_path / "r")
    assert not sim.log.exists() or not sim.log.read_bytes().strip()  # nothing reached the server redirected to


def test_a_redirect_during_the_load_is_each_requests_http_error(sim: SimServer, tmp_path: Path) -> None:
    server, port = serve_app(redirecting_app(sim.url, models=False, probe_ok=1))  # the probe passes, the load does not
    try:
        p = run_cli("run", "--target", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "r"), *RUN)
    finally:
        server.close()
    assert p.returncode == 1, p.stderr  # no request completed
    recs = records(tmp_path / "r")
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "error" and r["error_kind"] == "http" and r["http_status"] == 307, r
        assert "redirect" in r["error"] and f"{sim.url}/chat/completions" in r["error"], r
    assert not sim.log.exists() or not sim.log.read_bytes().strip()


class CountingProxy:
    """A forward HTTP proxy (absolute-URI requests and CONNECT) on loopback that counts its clients."""

    def __init__(self) -> None:
        self.clients = 0
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self._bg = Background(self._start, self._close)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                up_r, up_w = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # GET http://host:port/path HTTP/1.1: forward the request as it came, one per connection
                hostport = target.split("/", 3)[2]
                host, _, port = hostport.rpartition(":")
                up_r, up_w = await asyncio.open_connection(host, int(port or 80))
                up_w.write(head.replace(b"Connection: keep-alive", b"Connection: close"))
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._bg.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@pytest.fixture
def proxy() -> Iterator[CountingProxy]:
    p = CountingProxy()
    yield p
    p.close()


def outward_address() -> str | None:
    """This machine's own non-loopback IPv4 address (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture
def outward_sim(tmp_path: Path) -> Iterator[str]:
    """The simulator on all interfaces, as http://<this machine's non-loopback address>:PORT/v1."""
    address = outward_address()
    if address is None:
        pytest.skip("no non-loopback address on this machine")
    server = SimServer(tmp_path, "--host", "0.0.0.0", "--ttft-ms", "2", "--itl-ms", "1")
    yield server.url.replace("0.0.0.0", address).replace("127.0.0.1", address)
    server.stop()


def test_the_proxy_is_real_for_a_client_that_honours_it(outward_sim: str, proxy: CountingProxy) -> None:
    """The setup the next tests rely on: urllib (which reads HTTP_PROXY) goes through this proxy to the target."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))
    with opener.open(f"{outward_sim}/models", timeout=10) as resp:
        assert resp.status == 200 and b"data" in resp.read()
    assert proxy.clients == 1


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_for_a_remote_target_is_refused_in_one_line(outward_sim: str, proxy: CountingProxy, tmp_path: Path,
                                                            variable: str) -> None:
    p = run_cli("run", "--target", outward_sim, "--out", str(tmp_path / "r"), *RUN,
                env={variable: proxy.url, "NO_PROXY": "", "no_proxy": ""})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith("Error: ") and variable in lines[0] and len(lines) <= 2, p.stderr
    assert "NO_PROXY" in p.stderr and "Traceback" not in p.stderr
    assert proxy.clients == 0 and not sent(tmp_path / "r")


def test_no_proxy_exempts_the_target_which_then_goes_direct(outward_sim: str, proxy: CountingProxy,
                                                            tmp_path: Path) -> None:
    host = outward_sim.split("//")[1].split(":")[0]
    p = run_cli("run", "--target", outward_sim, "--out", str(tmp_path / "r"), *RUN,
                env={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url, "NO_PROXY": host})
    assert p.returncode == 0, p.stderr
    assert len(records(tmp_path / "r")) == 4 and proxy.clients == 0


def test_a_loopback_target_goes_direct_whatever_the_proxy_variables(sim: SimServer, proxy: CountingProxy,
                                                                    tmp_path: Path) -> None:
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), *RUN,
                env={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url, "ALL_PROXY": proxy.url, "NO_PROXY": ""})
    assert p.returncode == 0, p.stderr
    assert len(records(tmp_path / "r")) == 4 and proxy.clients == 0
