"""The simulator as a web server: `make_app` builds the aiohttp application, `run_server` runs it.

`run_server` blocks, prefers uvloop, prints one flushed `tokspeed sim listening on ...` line once
the socket is bound (a parent process can wait for it), and stops cleanly on SIGINT/SIGTERM,
closing the log after in-flight requests finish or are cancelled.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from tokspeed.backends.kernel_stamps import supported as kernel_stamps_supported
from tokspeed.errors import ConfigError
from tokspeed.sim.arrival import arrival_middleware, use_arrival_stamps
from tokspeed.sim.auth import auth_middleware
from tokspeed.sim.config import SimConfig, describe
from tokspeed.sim.kernel_stamps import KernelStampSite
from tokspeed.sim.native import NativeSim
from tokspeed.sim.service import SHUTDOWN_GRACE_S, SimService

MAX_BODY_BYTES = 64 * 1024 * 1024  # long-context prompts are large


def make_app(cfg: SimConfig) -> web.Application:
    """An aiohttp application serving the simulated OpenAI-compatible API for `cfg`."""
    service = SimService(cfg)
    middlewares: list[Middleware] = [arrival_middleware]
    if cfg.api_key is not None or cfg.basic_auth is not None:
        middlewares.append(auth_middleware(cfg))
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    app.add_routes(
        [
            web.get("/v1/models", service.models),
            web.get("/health", service.health),
            web.get("/version", service.version),
            web.get("/metrics", service.metrics),
            web.post("/v1/completions", service.completions),
            web.post("/v1/chat/completions", service.chat),
            web.post("/v1/embeddings", service.embeddings),
        ]
    )
    if cfg.control:
        from tokspeed.sim.control import control_routes

        app.add_routes(control_routes(service))
    if cfg.profile_endpoints:
        from tokspeed.sim.profile import SimProfiler

        app.add_routes(SimProfiler(service).routes())
    app.add_routes(NativeSim(service).routes())  # TGI, Triton, Ollama, llama.cpp, SGLang native APIs
    if not cfg.keep_alive:
        app.on_response_prepare.append(_close_after)
    app.on_shutdown.append(service.on_shutdown)
    app.cleanup_ctx.append(service.log_context)
    return app


async def _close_after(request: web.Request, response: web.StreamResponse) -> None:
    """--no-keep-alive: every response says Connection: close, and the server closes after it."""
    response.headers["Connection"] = "close"  # force_close() alone closes without saying so
    response.force_close()


def run_server(
    cfg: SimConfig, host: str = "127.0.0.1", port: int = 8001, reuse_port: bool = False, kernel_stamps: bool = False
) -> None:
    """Serve `cfg` on host:port until SIGINT/SIGTERM (port 0 picks a free port).

    `reuse_port`: bind with SO_REUSEPORT, so several simulators started alike share the port and
    the kernel spreads connections among them (to serve more load than one process can).
    `kernel_stamps`: the log's arrival times are the kernel's receive times (sim/kernel_stamps.py).
    """
    if kernel_stamps and not kernel_stamps_supported():
        raise ConfigError("--kernel-stamps needs Linux (SO_TIMESTAMPNS on TCP)", hint="leave it off here")
    _run(_serve(cfg, host, port, reuse_port, kernel_stamps))


def _run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


LISTEN_BACKLOG = 4096  # aiohttp's default (128) drops connections when thousands arrive at once


async def _serve(cfg: SimConfig, host: str, port: int, reuse_port: bool, kernel_stamps: bool) -> None:
    runner = web.AppRunner(make_app(cfg), handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    use_arrival_stamps(runner)
    try:
        site = listen_site(runner, host, port, reuse_port=reuse_port, kernel_stamps=kernel_stamps)
        try:
            await site.start()
        except OSError as exc:  # the port is taken, the address is not this machine's, a port below 1024
            raise ConfigError(f"cannot listen on {_base_url(host, port).removesuffix('/v1')}: {exc.strerror or exc}",
                              hint="pick another --port (0 picks a free one), or stop what holds it") from None
        except ValueError as exc:  # asyncio: "reuse_port not supported by socket module"
            raise ConfigError(f"--reuse-port: {exc}", hint="this system has no SO_REUSEPORT; run one simulator") from None
        bound_port = _bound_port(runner, port)
        print(f"tokspeed sim listening on {_base_url(host, bound_port)} ({describe(cfg)})", flush=True)
        await _wait_for_stop_signal()
    finally:
        await runner.cleanup()


def listen_site(
    runner: web.AppRunner, host: str, port: int, *, reuse_port: bool = False, kernel_stamps: bool = False
) -> web.BaseSite:
    """The site `run_server` listens with (start it to listen): uvloop's transports, or with
    `kernel_stamps` the recvmsg transport that takes the kernel's arrival stamps."""
    if kernel_stamps:
        return KernelStampSite(runner, host, port, backlog=LISTEN_BACKLOG, reuse_port=reuse_port)
    return web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG, reuse_port=reuse_port or None)


def _bound_port(runner: web.AppRunner, requested: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return requested


def _base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


async def _wait_for_stop_signal() -> None:
    """Return on SIGINT or SIGTERM (or on KeyboardInterrupt where signals cannot be hooked)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    hooked: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            continue
        hooked.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in hooked:
            loop.remove_signal_handler(sig)
