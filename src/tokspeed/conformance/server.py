"""The scripted-stream server: plays each conformance scenario's bytes at their scheduled times, and logs them.

A raw asyncio HTTP/1.1 server on loopback (no framework between the script and
the socket, TCP_NODELAY, one `write` per scripted piece). Paths:

* `GET  /s/<name>/v1/models`                           one model, `conformance`
* `POST /s/<name>/v1/chat/completions` (or `/completions`)  the scenario's script
* `GET  /scenarios`                                    the scenario names (JSON)

A POST whose body asks for `max_tokens` (or `max_completion_tokens`) of 1 is a
readiness probe (tokspeed sends one before a run): it gets a tiny valid answer,
not the script. Times are `at_ms` after the whole request was read; each write is
logged (`Play`) with its actual time, on the clock `time.perf_counter_ns()`.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import orjson

from tokspeed.conformance.scenarios import (
    DONE,
    MODEL,
    PROBE_MAX_TOKENS,
    SCENARIOS,
    Scenario,
    by_name,
    finish,
    tok,
    usage_trailer,
)

NS_PER_MS = 1_000_000
_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 404: "Not Found", 400: "Bad Request", 500: "Internal Server Error"}


@dataclass(slots=True)
class Play:
    """One scripted response as played: when the request was read and when each piece was written (ns)."""

    scenario: str
    received_ns: int
    write_ns: list[int] = field(default_factory=list)

    def lateness_ms(self, scenario: Scenario) -> float:
        """The worst delay of a write behind its scripted time (ms): how late the server itself was."""
        late = [(t - self.received_ns) / NS_PER_MS - w.at_ms for t, w in zip(self.write_ns, scenario.writes)]
        return max(late, default=0.0)


class ScriptedServer:
    """Serve the scenarios on 127.0.0.1; `plays` logs every scripted response in order."""

    def __init__(self, scenarios: tuple[Scenario, ...] = SCENARIOS) -> None:
        self._scenarios = {s.name: s for s in scenarios}
        self._server: asyncio.base_events.Server | None = None
        self.plays: list[Play] = []
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._connection, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def url(self, name: str) -> str:
        """The base URL (ending in /v1) that serves scenario `name`."""
        return f"http://127.0.0.1:{self.port}/s/{name}/v1"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is to be closed."""
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ") + ["", ""])[:3]
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        received = perf_counter_ns()
        return await self._route(method, path, body, received, writer)

    async def _route(self, method: str, path: str, body: bytes, received: int, writer: asyncio.StreamWriter) -> bool:
        if path == "/scenarios":
            await _send_whole(writer, 200, orjson.dumps([s for s in self._scenarios]))
            return True
        parts = path.split("?")[0].strip("/").split("/")  # s, <name>, v1, ...
        scenario = self._scenarios.get(parts[1]) if len(parts) >= 4 and parts[0] == "s" else None
        if scenario is None or parts[2] != "v1":
            await _send_whole(writer, 404, orjson.dumps({"error": {"message": f"no scenario at {path}"}}))
            return True
        endpoint = "/".join(parts[3:])
        if method == "GET" and endpoint == "models":
            await _send_whole(writer, 200, orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
            return True
        if method != "POST" or endpoint not in ("chat/completions", "completions"):
            await _send_whole(writer, 404, orjson.dumps({"error": {"message": f"no endpoint {method} {path}"}}))
            return True
        request = _json(body)
        if _is_probe(request):
            await _send_probe_answer(writer, bool(request.get("stream")))
            return True
        return await self._play(scenario, received, writer)

    async def _play(self, scenario: Scenario, received: int, writer: asyncio.StreamWriter) -> bool:
        play = Play(scenario.name, received)
        self.plays.append(play)
        loop = asyncio.get_running_loop()
        start = loop.time() - (perf_counter_ns() - received) / 1e9  # loop clock at `received`
        chunked = scenario.framing == "chunked"
        head = _head(scenario, sum(len(w.data) for w in scenario.writes))
        if chunked:
            writer.write(head)
            head = b""
        last = len(scenario.writes) - 1
        for i, w in enumerate(scenario.writes):
            delay = start + w.at_ms / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            data = (_chunk(w.data) if chunked else w.data) if w.data else b""
            if i == last and chunked and scenario.ending == "terminator":
                data += b"0\r\n\r\n"
            if i == last and scenario.ending == "close":
                if data or head:
                    writer.write(head + data)
                play.write_ns.append(perf_counter_ns())
                _abort(writer)
                return False
            writer.write(head + data)
            head = b""
            play.write_ns.append(perf_counter_ns())
            await writer.drain()
        return True


def _head(scenario: Scenario, length: int) -> bytes:
    lines = [f"HTTP/1.1 {scenario.status} {_REASONS.get(scenario.status, 'Status')}",
             f"Content-Type: {scenario.content_type}"]
    if scenario.framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in scenario.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once, without the chunked terminator: the client sees the body cut."""
    transport = writer.transport
    transport.close()


def _json(body: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _is_probe(request: dict[str, Any]) -> bool:
    wanted = request.get("max_tokens", request.get("max_completion_tokens"))
    return wanted == PROBE_MAX_TOKENS


async def _send_probe_answer(writer: asyncio.StreamWriter, stream: bool) -> None:
    if not stream:
        body = orjson.dumps({"id": "probe", "object": "chat.completion", "model": MODEL,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "a"},
                                          "finish_reason": "length", "text": "a"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        await _send_whole(writer, 200, body)
        return
    body = tok("a") + finish("length") + usage_trailer(1, 1) + DONE
    await _send_whole(writer, 200, body, "text/event-stream")


async def _send_whole(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> None:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    writer.write(head + body)
    await writer.drain()


async def serve_forever(port: int, host: str = "127.0.0.1") -> None:
    """`tokspeed conformance --serve PORT`: serve every scenario until cancelled."""
    server = ScriptedServer()
    await server.start(host, port)
    print(f"conformance server listening on http://{host}:{server.port}", flush=True)
    for s in SCENARIOS:
        print(f"  {s.name:<22} {server.url(s.name)}  ({'stream' if s.stream else 'stream=false'}, {s.api})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


__all__ = ["Play", "ScriptedServer", "by_name", "serve_forever"]
