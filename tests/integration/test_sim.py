"""The simulator against real sockets: wire format, queueing, and that its log keeps the schedule."""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tokspeed.sim import SimConfig, make_app
from tokspeed.workload.tokens import approx_token_count

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "say something about cats"}]
FAST: dict[str, Any] = {"ttft_ms": 0.0, "itl_ms": 0.0}
MS = 1_000_000
LATE_MS = 8  # how late a chunk may be on a busy machine (typically < 1.5 ms; the log is what counts)


class Sim:
    """A running simulator, an HTTP session to it, and its log."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession, log_path: Path) -> None:
        self.base_url = base_url
        self.session = session
        self.log_path = log_path

    def url(self, path: str) -> str:
        return self.base_url + path

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        async with self.session.post(self.url(path), json=body) as resp:
            return resp.status, await resp.read()

    async def stream(self, path: str, body: dict[str, Any]) -> list[Any]:
        """The SSE events of a streamed response: parsed JSON objects, then the string '[DONE]'."""
        status, raw = await self.post(path, {**body, "stream": True})
        assert status == 200, raw
        return parse_events(raw)

    def log(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.log_path.read_bytes().splitlines()]

    async def wait_for_log(self, lines: int, timeout_s: float = 2.0) -> list[dict[str, Any]]:
        for _ in range(int(timeout_s / 0.01)):
            if self.log_path.exists() and len(entries := self.log()) >= lines:
                return entries
            await asyncio.sleep(0.01)
        raise AssertionError(f"log never reached {lines} lines")


@asynccontextmanager
async def running_sim(tmp_path: Path, *, handler_cancellation: bool = False, **cfg: Any) -> AsyncIterator[Sim]:
    """The app on a free loopback port, run as `run_server` runs it (or with handler cancellation)."""
    log_path = tmp_path / "sim.jsonl"
    app = make_app(SimConfig(log_path=log_path, **cfg))
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            yield Sim(f"http://127.0.0.1:{port}", session, log_path)
    finally:
        await runner.cleanup()


def parse_events(raw: bytes) -> list[Any]:
    events: list[Any] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                data = line[len(b"data: ") :]
                events.append(data.decode() if data == b"[DONE]" else orjson.loads(data))
    return events


def token_events(events: list[Any]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e["choices"] and _text(e["choices"][0])]


def _text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return str(choice["text"])
    delta = choice["delta"]
    return str(delta.get("content") or delta.get("reasoning_content") or "")


def counts(events: list[dict[str, Any]]) -> list[int]:
    return [approx_token_count(_text(e["choices"][0])) for e in events]


# --- wire format ----------------------------------------------------------------------------


async def test_chat_stream_shape(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, reasoning_tokens=3, tokens_per_chunk=2) as sim:
        body = {"messages": MESSAGES, "max_tokens": 7, "stream_options": {"include_usage": True}}
        events = await sim.stream(CHAT, body)
    first, *middle, usage, done = events
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = token_events(middle)
    assert tokens == middle  # nothing between the role chunk and the usage trailer but tokens
    assert counts(tokens) == [2, 1, 2, 2]
    deltas = [e["choices"][0]["delta"] for e in tokens]
    assert [("reasoning_content" in d, "content" in d) for d in deltas] == [(True, False)] * 2 + [(False, True)] * 2
    assert [e["choices"][0]["finish_reason"] for e in tokens] == [None, None, None, "length"]
    assert usage["choices"] == []
    prompt_tokens = approx_token_count(MESSAGES[0]["content"])
    assert usage["usage"]["prompt_tokens"] == prompt_tokens
    assert usage["usage"]["completion_tokens"] == 7
    assert usage["usage"]["total_tokens"] == prompt_tokens + 7
    assert done == "[DONE]"
    assert len({e["id"] for e in events[:-1]}) == 1
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "tokspeed-sim" for e in events[:-1])


async def test_completions_stream_shape_and_grouping(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, tokens_per_chunk=3, reasoning_tokens=5) as sim:
        events = await sim.stream(COMPLETIONS, {"prompt": "once upon a time", "max_tokens": 10, "ignore_eos": True})
    assert events[-1] == "[DONE]"
    tokens = events[:-1]
    assert token_events(tokens) == tokens  # no usage trailer (not asked), no role chunk
    assert counts(tokens) == [3, 3, 3, 1]  # completions have no reasoning
    assert all(e["object"] == "text_completion" for e in tokens)
    assert [e["choices"][0]["finish_reason"] for e in tokens][-2:] == [None, "length"]
    text = "".join(e["choices"][0]["text"] for e in tokens)
    assert approx_token_count(text) == 10


async def test_token_counts_exact_from_each_source(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, output_tokens=11) as sim:
        default = await sim.stream(CHAT, {"messages": MESSAGES})
        by_mct = await sim.stream(CHAT, {"messages": MESSAGES, "max_completion_tokens": 4, "min_tokens": 4})
        big = await sim.stream(COMPLETIONS, {"prompt": "x", "max_tokens": 300, "temperature": 0})
    assert sum(counts(token_events(default))) == 11
    assert sum(counts(token_events(by_mct))) == 4
    assert sum(counts(token_events(big))) == 300


async def test_usage_false_never_sends_usage(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, usage=False) as sim:
        body = {"messages": MESSAGES, "max_tokens": 3, "stream_options": {"include_usage": True}}
        events = await sim.stream(CHAT, body)
        status, raw = await sim.post(CHAT, {"messages": MESSAGES, "max_tokens": 3})
    assert not any(isinstance(e, dict) and "usage" in e for e in events)
    assert status == 200 and "usage" not in orjson.loads(raw)


async def test_non_stream_responses(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, reasoning_tokens=2) as sim:
        s1, chat_raw = await sim.post(CHAT, {"messages": MESSAGES, "max_tokens": 5, "stream": False})
        s2, cmpl_raw = await sim.post(COMPLETIONS, {"prompt": ["a b", "c"], "max_tokens": 6})
    chat, cmpl = orjson.loads(chat_raw), orjson.loads(cmpl_raw)
    assert (s1, s2) == (200, 200)
    message = chat["choices"][0]["message"]
    assert chat["object"] == "chat.completion" and message["role"] == "assistant"
    assert approx_token_count(message["reasoning_content"]) == 2
    assert approx_token_count(message["content"]) == 3
    assert chat["usage"]["completion_tokens"] == 5
    assert chat["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert cmpl["object"] == "text_completion"
    assert approx_token_count(cmpl["choices"][0]["text"]) == 6
    assert cmpl["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    assert cmpl["choices"][0]["finish_reason"] == "length"


async def test_sse_comments_and_crlf(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, sse_comments=True, crlf=True) as sim:
        status, raw = await sim.post(CHAT, {"messages": MESSAGES, "max_tokens": 9, "stream": True})
    assert status == 200
    assert b"\n" not in raw.replace(b"\r\n", b"")  # every line ends with CRLF
    blocks = raw.split(b"\r\n\r\n")
    assert blocks[-1] == b"" and blocks[-2] == b"data: [DONE]"
    kinds = ["comment" if b.startswith(b":") else "data" for b in blocks[:-1]]
    assert kinds[:3] == ["data", "comment", "data"]  # role chunk, keep-alive, first token
    assert kinds.count("comment") == 3  # before chunks 0, 4 and 8
    assert sum(counts(token_events(parse_events(raw)))) == 9


async def test_plain_lf_without_comments(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST) as sim:
        status, raw = await sim.post(COMPLETIONS, {"prompt": "x", "max_tokens": 3, "stream": True})
    assert status == 200 and b"\r" not in raw and b": keep-alive" not in raw
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")


async def test_stream_content_type(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST) as sim:
        body = {"prompt": "x", "max_tokens": 2, "stream": True}
        async with sim.session.post(sim.url(COMPLETIONS), json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            await resp.read()


# --- errors -------------------------------------------------------------------------------


async def test_reject_stream_options(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, reject_stream_options=True) as sim:
        body = {"messages": MESSAGES, "max_tokens": 2, "stream": True}
        status, raw = await sim.post(CHAT, {**body, "stream_options": {"include_usage": True}})
        ok = await sim.stream(CHAT, body)
        entries = sim.log()
    assert status == 400
    error = orjson.loads(raw)["error"]
    assert "stream_options" in error["message"] and error["type"] and error["code"]
    assert ok[-1] == "[DONE]"
    assert [(e["status"], e["http_status"]) for e in entries] == [("rejected", 400), ("ok", 200)]


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        (COMPLETIONS, b"{oops"),
        (COMPLETIONS, b'{"max_tokens": 4}'),
        (CHAT, b'{"prompt": "x"}'),
        (CHAT, b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}'),
    ],
)
async def test_bad_requests_get_openai_errors(tmp_path: Path, path: str, raw: bytes) -> None:
    async with running_sim(tmp_path, **FAST) as sim, sim.session.post(sim.url(path), data=raw) as resp:
        status, body = resp.status, await resp.json()
    assert status == 400
    assert set(body["error"]) >= {"message", "type", "code"}


async def test_info_endpoints(tmp_path: Path) -> None:
    async with running_sim(tmp_path, model="my-model") as sim:
        async with sim.session.get(sim.url("/v1/models")) as resp:
            models = await resp.json()
        async with sim.session.get(sim.url("/health")) as resp:
            health = resp.status
        async with sim.session.get(sim.url("/version")) as resp:
            version = await resp.json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["my-model"]
    assert health == 200
    assert version["version"].startswith("tokspeed-sim ")


# --- the log and the schedule ---------------------------------------------------------------


async def test_log_follows_the_schedule(tmp_path: Path) -> None:
    """Never early; late by no more than scheduling noise; no drift over 100 chunks (absolute deadlines)."""
    async with running_sim(tmp_path, ttft_ms=30, itl_ms=5) as sim:
        events = await sim.stream(COMPLETIONS, {"prompt": "x", "max_tokens": 100})
        [entry] = await sim.wait_for_log(1)
    assert len(token_events(events)) == 100
    assert entry["status"] == "ok" and entry["chunk_tokens"] == [1] * 100
    start, chunk_ns = entry["start_ns"], entry["chunk_ns"]
    due = [start + entry["prefill_ns"] + i * entry["itl_ns"] for i in range(100)]
    assert all(t >= d for t, d in zip(chunk_ns, due, strict=True))
    assert 30 <= (entry["first_token_ns"] - start) / MS < 30 + LATE_MS
    gaps = [(b - a) / MS for a, b in itertools.pairwise(chunk_ns)]
    assert abs(statistics.median(gaps) - 5) < 2
    assert abs((chunk_ns[-1] - chunk_ns[0]) / MS - 99 * 5) < LATE_MS
    assert entry["received_ns"] <= start <= chunk_ns[0] <= entry["end_ns"]


async def test_log_records_every_field(tmp_path: Path) -> None:
    async with running_sim(tmp_path, **FAST, reasoning_tokens=2, tokens_per_chunk=2) as sim:
        body = {"messages": MESSAGES, "max_tokens": 5, "stream_options": {"include_usage": True}}
        events = await sim.stream(CHAT, body)
        [entry] = await sim.wait_for_log(1)
    expected = {
        "id", "api", "stream", "received_ns", "start_ns", "first_token_ns", "chunk_ns", "chunk_tokens",
        "reasoning_chunks", "end_ns", "prompt_tokens", "completion_tokens", "status", "epoch_offset_ns",
    }  # fmt: skip
    assert expected <= set(entry)
    assert entry["id"] == events[0]["id"] and entry["api"] == "chat" and entry["stream"] is True
    assert entry["chunk_tokens"] == [2, 2, 1] and entry["reasoning_chunks"] == 1
    assert entry["completion_tokens"] == 5 and entry["prompt_tokens"] == approx_token_count(MESSAGES[0]["content"])
    assert isinstance(entry["epoch_offset_ns"], int) and entry["epoch_offset_ns"] > 0


async def test_prefill_time_per_prompt_token(tmp_path: Path) -> None:
    prompt = " ".join(["word"] * 1000)
    async with running_sim(tmp_path, ttft_ms=5, itl_ms=0, per_prompt_token_us=20) as sim:
        await sim.stream(COMPLETIONS, {"prompt": prompt, "max_tokens": 2})
        [entry] = await sim.wait_for_log(1)
    assert entry["prompt_tokens"] == 1000 and entry["prefill_ns"] == 25_000_000
    assert 25 <= (entry["first_token_ns"] - entry["start_ns"]) / MS < 25 + LATE_MS


async def test_non_stream_is_sent_when_the_last_token_is_due(tmp_path: Path) -> None:
    async with running_sim(tmp_path, ttft_ms=20, itl_ms=2) as sim:
        await sim.post(COMPLETIONS, {"prompt": "x", "max_tokens": 6})
        [entry] = await sim.wait_for_log(1)
    assert entry["stream"] is False and entry["chunk_tokens"] == [6]
    assert 30 <= (entry["chunk_ns"][0] - entry["start_ns"]) / MS < 30 + LATE_MS


async def test_max_concurrency_queues_fifo(tmp_path: Path) -> None:
    async with running_sim(tmp_path, ttft_ms=20, itl_ms=2, max_concurrency=1) as sim:
        body = {"prompt": "x", "max_tokens": 5}
        await asyncio.gather(*(sim.stream(COMPLETIONS, body) for _ in range(3)))
        entries = sorted(await sim.wait_for_log(3), key=lambda e: e["start_ns"])
    for earlier, later in itertools.pairwise(entries):
        assert later["start_ns"] >= earlier["end_ns"]  # one at a time
        assert later["received_ns"] < earlier["end_ns"]  # it really waited in the queue
        assert later["received_ns"] > earlier["received_ns"]  # served in arrival order
    for e in entries:  # the queue wait adds to TTFT; service time itself is unchanged
        assert e["first_token_ns"] - e["start_ns"] >= 20 * MS


@pytest.mark.parametrize("handler_cancellation", [False, True])
async def test_client_disconnect_is_logged_and_harmless(tmp_path: Path, handler_cancellation: bool) -> None:
    async with running_sim(tmp_path, handler_cancellation=handler_cancellation, ttft_ms=0, itl_ms=5) as sim:
        body = {"prompt": "x", "max_tokens": 200, "stream": True}
        resp = await sim.session.post(sim.url(COMPLETIONS), json=body)
        for _ in range(3):
            await resp.content.readline()
        resp.close()
        [entry] = await sim.wait_for_log(1)
        after = await sim.stream(COMPLETIONS, {"prompt": "x", "max_tokens": 3})
    assert entry["status"] == "disconnected"
    assert 0 < entry["completion_tokens"] < 200 and entry["planned_tokens"] == 200
    assert len(entry["chunk_ns"]) == entry["completion_tokens"]
    assert after[-1] == "[DONE]"


@pytest.mark.parametrize("handler_cancellation", [False, True])
async def test_disconnect_while_queued(tmp_path: Path, handler_cancellation: bool) -> None:
    async with running_sim(
        tmp_path, handler_cancellation=handler_cancellation, ttft_ms=0, itl_ms=1, max_concurrency=1
    ) as sim:
        busy = asyncio.create_task(sim.stream(COMPLETIONS, {"prompt": "x", "max_tokens": 100}))
        await asyncio.sleep(0.02)
        queued = asyncio.create_task(sim.stream(COMPLETIONS, {"prompt": "y z", "max_tokens": 5}))
        await asyncio.sleep(0.02)
        queued.cancel()  # closes its connection while it waits for the slot
        await busy
        entries = {e["prompt_tokens"]: e for e in await sim.wait_for_log(2)}
        after = await sim.stream(COMPLETIONS, {"prompt": "x", "max_tokens": 2})
    assert (entries[1]["status"], entries[1]["completion_tokens"]) == ("ok", 100)
    assert (entries[2]["status"], entries[2]["completion_tokens"], entries[2]["chunk_ns"]) == ("disconnected", 0, [])
    assert after[-1] == "[DONE]"


# --- run_server in a real process -----------------------------------------------------------

_SERVE = (
    "import sys; from tokspeed.sim import SimConfig, run_server; "
    "run_server(SimConfig.model_validate_json(sys.argv[1]), port=0)"
)


async def _start_process(cfg: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SERVE, cfg, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
    match = re.search(r"listening on (http://\S+/v1) \((.*)\)", line)
    assert match, line
    return proc, match.group(1)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_run_server_process_serves_and_stops_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    log_path = tmp_path / "proc.jsonl"
    proc, base = await _start_process(orjson.dumps({"ttft_ms": 1, "itl_ms": 1, "log_path": str(log_path)}).decode())
    try:
        async with aiohttp.ClientSession() as session:
            body = {"messages": MESSAGES, "max_tokens": 4, "stream": True}
            async with session.post(base + "/chat/completions", json=body) as resp:
                events = parse_events(await resp.read())
    finally:
        proc.send_signal(sig)
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert events[-1] == "[DONE]"
    assert proc.returncode == 0, stderr.decode()
    [entry] = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert entry["status"] == "ok" and entry["completion_tokens"] == 4


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_run_server_stops_promptly_with_a_stream_in_flight(tmp_path: Path) -> None:
    log_path = tmp_path / "proc.jsonl"
    proc, base = await _start_process(orjson.dumps({"ttft_ms": 0, "itl_ms": 10, "log_path": str(log_path)}).decode())
    chunks = 0
    try:
        async with aiohttp.ClientSession() as session:
            body = {"prompt": "x", "max_tokens": 10_000, "stream": True}
            async with session.post(base + "/completions", json=body) as resp:
                await resp.content.readline()
                proc.send_signal(signal.SIGTERM)
                with pytest.raises(aiohttp.ClientError):
                    async for line in resp.content:
                        chunks += line.startswith(b"data: {")
    finally:
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, stderr.decode()
    [entry] = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert entry["status"] == "cancelled"  # the server stopped it, after its grace period
    assert 0 < entry["completion_tokens"] < 10_000


async def _start_cli_sim(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tokspeed", "sim", "--ttft-ms", "0", "--itl-ms", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def _listening_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
    match = re.search(r"listening on (http://\S+/v1)", line)
    assert match, line
    return match.group(1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreads connections on Linux")
async def test_simulators_started_with_reuse_port_share_one_port_and_its_connections(tmp_path: Path) -> None:
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    first = await _start_cli_sim("--port", "0", "--reuse-port", "--log", str(logs[0]))
    procs = [first]
    try:
        base = await _listening_url(first)
        port = base.rsplit(":", 1)[1].removesuffix("/v1")
        procs.append(await _start_cli_sim("--port", port, "--reuse-port", "--log", str(logs[1])))
        assert await _listening_url(procs[1]) == base
        alone = await _start_cli_sim("--port", port)  # without --reuse-port the port is taken
        _, stderr = await asyncio.wait_for(alone.communicate(), 15)
        assert alone.returncode != 0 and f"cannot listen on http://127.0.0.1:{port}" in stderr.decode()
        body = {"prompt": "x", "max_tokens": 2, "stream": True}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            for _ in range(40):  # each on a new connection: the kernel picks a simulator per connection
                async with session.post(base + "/completions", json=body) as resp:
                    assert parse_events(await resp.read())[-1] == "[DONE]"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 10)
    served = [len(log.read_bytes().splitlines()) for log in logs]
    assert sum(served) == 40 and min(served) > 0, served  # all served once, by both (all by one: p = 2^-39)
