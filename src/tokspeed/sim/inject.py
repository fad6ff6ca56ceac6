"""Carrying out an injected fault (`faults.Fault`) on the wire, and noting it in the log entry.

The service decides when: HTTP faults and `reset` replace the response, `slow_headers`
delays its start, mid-stream faults strike after `fault_after_chunks` token chunks, and
`no_done`/`bad_usage` change the stream's end. These functions do the what.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from tokspeed.sim.config import SimConfig
from tokspeed.sim.faults import HTTP_STATUS, RETRY_AFTER, Fault
from tokspeed.sim.log import LogEntry, SimStatus
from tokspeed.sim.stream import ChunkEncoder, error_body

_MESSAGES = {
    Fault.HTTP_429: "simulated overload: too many requests, retry later",
    Fault.HTTP_500: "simulated internal server error",
    Fault.HTTP_503: "simulated outage: service unavailable, retry later",
}
_JSON = "application/json"
MID_STREAM_ERROR = "simulated engine failure mid-stream"


def leak(cfg: SimConfig, request: web.Request) -> str:
    """With --leaky-errors, a suffix echoing the request's Authorization header (as careless servers do)."""
    if not cfg.leaky_errors:
        return ""
    return f" (request Authorization: {request.headers.get('Authorization', '')})"


def echoed(cfg: SimConfig, request: web.Request) -> str:
    """With --echo-auth, the request's Authorization header (what careless servers put in a 200 body)."""
    if not cfg.echo_auth:
        return ""
    return request.headers.get("Authorization", "")


def http_fault(cfg: SimConfig, request: web.Request, entry: LogEntry, fault: Fault) -> web.Response:
    """The whole answer of an HTTP-status fault (429 and 503 carry Retry-After)."""
    status = HTTP_STATUS[fault]
    message = _MESSAGES[fault] + leak(cfg, request)
    entry.status, entry.http_status, entry.error = SimStatus.REJECTED, status, message
    headers = {"Retry-After": str(cfg.retry_after_s)} if fault in RETRY_AFTER else None
    body = error_body(message, status, kind="server_error")
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


def reset(request: web.Request, entry: LogEntry) -> web.Response:
    """Abort the connection before any response byte (the client sees a reset/disconnect)."""
    entry.status = SimStatus.ABORTED
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=500)  # never reaches the client


async def mid_stream(
    cfg: SimConfig, request: web.Request, resp: web.StreamResponse, enc: ChunkEncoder, entry: LogEntry, fault: Fault
) -> int | None:
    """Strike mid-stream. Returns how many ns later the rest of the stream is due, or None if it ended."""
    if fault is Fault.DISCONNECT:
        entry.status = SimStatus.ABORTED
        if request.transport is not None:
            request.transport.close()
        return None
    if fault is Fault.ERROR_EVENT:
        await resp.write(enc.error(MID_STREAM_ERROR + leak(cfg, request)))
        await resp.write_eof()
        entry.status = SimStatus.ABORTED
        return None
    if fault is Fault.STALL:
        await asyncio.sleep(cfg.stall_ms / 1000)
        return round(cfg.stall_ms * 1_000_000)
    if fault is Fault.STALL_RESET:
        await stall_then_reset(cfg, request, entry)
        return None
    if fault is Fault.SSE_ERROR:
        await resp.write(enc.sse_error(MID_STREAM_ERROR))
        return 0
    await resp.write(enc.malformed() if fault is Fault.MALFORMED_SSE else enc.invalid_json())
    return 0


def reported_completion_tokens(fault: Fault | None, sent: int) -> int:
    """What usage.completion_tokens says: the truth, or half of it under `bad_usage`."""
    return sent // 2 if fault is Fault.BAD_USAGE else sent


async def stall_then_reset(cfg: SimConfig, request: web.Request, entry: LogEntry) -> None:
    """Send nothing for --stall-ms, then abort the connection (a stuck engine behind a proxy's idle timeout)."""
    await asyncio.sleep(cfg.stall_ms / 1000)
    entry.status = SimStatus.ABORTED
    if request.transport is not None:
        request.transport.abort()


async def after_done(cfg: SimConfig, request: web.Request, fault: Fault) -> None:
    """After `data: [DONE]`: close, reset or hold the connection without the chunked body's terminator."""
    transport = request.transport
    if transport is None:
        return
    if fault is Fault.DONE_HANG:
        await asyncio.sleep(cfg.stall_ms / 1000)
    if fault is Fault.DONE_RESET:
        transport.abort()
    else:
        transport.close()
