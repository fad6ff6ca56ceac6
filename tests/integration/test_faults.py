"""Each simulator fault against the real client, in one process: one record, the right classification.

The simulator's log is the truth (`fault`, chunks sent); the client's record must say what
happened — status, error kind, chunk times kept — and never raise.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from tokspeed.backends.http1 import Endpoint, Pool
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.errors import TargetError
from tokspeed.records import Anomaly, ErrorKind, RequestRecord, RequestSpec, Status, TokenSource
from tokspeed.sim import SimConfig, make_app
from tokspeed.sim.faults import Fault

pytestmark = pytest.mark.integration

TOKENS = 6
AFTER = 2  # --fault-after-chunks
SECRET = "sk-test-SENTINEL-4f9a1c77e0"


@asynccontextmanager
async def sim(tmp_path: Path, **cfg: Any) -> AsyncIterator[tuple[str, Path]]:
    log = tmp_path / f"sim-{time.monotonic_ns()}.jsonl"
    runner = web.AppRunner(make_app(SimConfig(ttft_ms=1, itl_ms=1, log_path=log, **cfg)), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", log
    finally:
        await runner.cleanup()


@asynccontextmanager
async def client(url: str, **kw: Any) -> AsyncIterator[OpenAIHTTPBackend]:
    backend = OpenAIHTTPBackend(url, **kw)
    try:
        await backend.start()
        yield backend
    finally:
        await backend.close()


async def send(backend: OpenAIHTTPBackend, index: int = 0) -> RequestRecord:
    record = RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=time.perf_counter_ns())
    await backend.send(RequestSpec(index=index, prompt="hello there", max_tokens=TOKENS), record)
    return record


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_entries(log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log.read_bytes().splitlines()]


# fault -> (status, error kind, token chunks the client must keep, anomaly)
EXPECTED: dict[Fault, tuple[Status, ErrorKind | None, int, str | None]] = {
    Fault.HTTP_429: (Status.ERROR, ErrorKind.HTTP, 0, None),
    Fault.HTTP_500: (Status.ERROR, ErrorKind.HTTP, 0, None),
    Fault.HTTP_503: (Status.ERROR, ErrorKind.HTTP, 0, None),
    Fault.RESET: (Status.ERROR, ErrorKind.CONNECT, 0, None),
    Fault.SLOW_HEADERS: (Status.OK, None, TOKENS, None),
    Fault.DISCONNECT: (Status.ERROR, ErrorKind.BROKEN, AFTER, None),
    Fault.MALFORMED_SSE: (Status.ERROR, ErrorKind.PROTOCOL, TOKENS, None),
    Fault.INVALID_JSON: (Status.ERROR, ErrorKind.PROTOCOL, AFTER, None),
    Fault.ERROR_EVENT: (Status.ERROR, ErrorKind.STREAM, AFTER, None),
    Fault.STALL: (Status.OK, None, TOKENS, None),
    Fault.NO_DONE: (Status.OK, None, TOKENS, Anomaly.MISSING_DONE.value),
    Fault.BAD_USAGE: (Status.OK, None, TOKENS, Anomaly.USAGE_BELOW_CHUNKS.value),
    Fault.STALL_RESET: (Status.ERROR, ErrorKind.BROKEN, AFTER, None),
    Fault.DONE_HANG: (Status.OK, None, TOKENS, None),
    Fault.DONE_CLOSE: (Status.OK, None, TOKENS, None),
    Fault.DONE_RESET: (Status.OK, None, TOKENS, None),
    Fault.JSON_BODY: (Status.OK, None, 0, Anomaly.NOT_STREAMED.value),
    Fault.SSE_ERROR: (Status.ERROR, ErrorKind.STREAM, AFTER, None),
}


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
async def test_each_fault_is_one_classified_record(tmp_path: Path, fault: Fault) -> None:
    cfg = dict(faults={fault: 1.0}, clean_requests=1, fault_after_chunks=AFTER, stall_ms=150, slow_headers_ms=150,
               retry_after_s=0)
    async with sim(tmp_path, **cfg) as (url, log):
        async with client(url) as backend:
            record = await send(backend)
    status, kind, chunks, anomaly = EXPECTED[fault]
    assert (record.status, record.error_kind) == (status, kind), record.error
    assert len(record.chunk_ns) == chunks and record.end_ns is not None
    assert record.anomalies == (None if anomaly is None else [anomaly])
    truth = log_entries(log)[-1]
    assert truth["fault"] == fault.value
    if kind is ErrorKind.HTTP:
        assert record.http_status == int(fault.value.split("_")[1]) and record.error is not None
    if fault is Fault.SLOW_HEADERS:
        assert record.first_token_ns is not None and record.first_token_ns - record.sent_ns >= 150e6
    if fault is Fault.STALL:
        assert max(b - a for a, b in zip(record.chunk_ns, record.chunk_ns[1:])) >= 150e6
    if fault is Fault.BAD_USAGE:
        assert (record.output_tokens, record.output_tokens_source) == (TOKENS, TokenSource.CHUNKS)
    if fault is Fault.DONE_HANG:  # the record ends at [DONE], not when the server lets the connection go
        assert record.end_ns - record.sent_ns < 150e6
    if fault is Fault.JSON_BODY:
        assert record.first_token_ns is None and record.output_tokens == TOKENS
    if fault is Fault.SSE_ERROR:
        assert record.error is not None and "event: error" in record.error and "engine failure" in record.error


async def test_retries_429_then_succeeds_and_counts_them(tmp_path: Path) -> None:
    async with sim(tmp_path, faults={Fault.HTTP_429: 0.5}, clean_requests=1, retry_after_s=0, seed=3) as (url, log):
        async with client(url, retries=20) as backend:
            records = [await send(backend, i) for i in range(30)]
    assert all(r.ok for r in records)
    rejected = sum(e["fault"] == "http_429" for e in log_entries(log))
    assert rejected > 5 and sum(r.retries for r in records) == rejected


async def test_retry_waits_for_retry_after_and_gives_up_after_n(tmp_path: Path) -> None:
    async with sim(tmp_path, faults={Fault.HTTP_503: 1.0}, clean_requests=1, retry_after_s=1) as (url, _):
        async with client(url, retries=1) as backend:
            t0 = time.perf_counter_ns()
            record = await send(backend)
    assert record.status is Status.ERROR and record.http_status == 503 and record.retries == 1
    assert record.sent_ns - t0 >= 1e9  # the final attempt went out after Retry-After


async def test_without_retries_a_429_is_reported_as_is(tmp_path: Path) -> None:
    async with sim(tmp_path, faults={Fault.HTTP_429: 1.0}, clean_requests=1) as (url, _):
        async with client(url) as backend:
            record = await send(backend)
    assert record.http_status == 429 and record.retries == 0


@pytest.mark.parametrize("fault", [Fault.STALL, Fault.SLOW_HEADERS])
async def test_ttft_timeout_fires_when_no_token_comes(tmp_path: Path, fault: Fault) -> None:
    cfg = dict(faults={fault: 1.0}, clean_requests=1, fault_after_chunks=0, stall_ms=3000, slow_headers_ms=3000)
    async with sim(tmp_path, **cfg) as (url, _):
        async with client(url, ttft_timeout_s=0.2) as backend:
            t0 = time.perf_counter()
            record = await send(backend)
            elapsed = time.perf_counter() - t0
    assert record.status is Status.ERROR and record.error_kind is ErrorKind.TTFT_TIMEOUT
    assert 0.2 <= elapsed < 1.5 and record.first_token_ns is None


async def test_ttft_timeout_is_disarmed_once_tokens_flow(tmp_path: Path) -> None:
    cfg = dict(faults={Fault.STALL: 1.0}, clean_requests=1, fault_after_chunks=1, stall_ms=400)
    async with sim(tmp_path, **cfg) as (url, _):
        async with client(url, ttft_timeout_s=0.2) as backend:
            record = await send(backend)
            await asyncio.sleep(0.3)  # a stray timer would cancel this test's task
    assert record.ok and len(record.chunk_ns) == TOKENS


async def test_total_timeout_keeps_the_chunks_received(tmp_path: Path) -> None:
    cfg = dict(faults={Fault.STALL: 1.0}, clean_requests=1, fault_after_chunks=AFTER, stall_ms=3000)
    async with sim(tmp_path, **cfg) as (url, _):
        async with client(url, timeout_s=0.5) as backend:
            record = await send(backend)
    assert record.status is Status.ERROR and record.error_kind is ErrorKind.TIMEOUT
    assert len(record.chunk_ns) == AFTER and record.first_token_ns is not None


async def test_connection_refused_is_a_connect_error(tmp_path: Path) -> None:
    async with sim(tmp_path) as (url, _):
        async with client(url) as backend:
            dead = f"http://127.0.0.1:{free_port()}/v1/chat/completions"  # nobody listens there
            backend._pool = Pool(Endpoint(dead), 1)
            record = await send(backend)
    assert record.status is Status.ERROR and record.error_kind is ErrorKind.CONNECT


async def test_echoed_keys_are_redacted_in_records_and_target_errors(tmp_path: Path) -> None:
    cfg = dict(api_key=SECRET, leaky_errors=True, faults={Fault.HTTP_500: 0.5, Fault.ERROR_EVENT: 0.5},
               clean_requests=1)
    async with sim(tmp_path, **cfg) as (url, _):
        async with client(url, api_key=SECRET) as backend:
            records = [await send(backend, i) for i in range(8)]
        with pytest.raises(TargetError) as exc:
            async with client(url, api_key=SECRET[:-1] + "X"):
                pass
    errors = [r.error or "" for r in records]
    assert all(e and SECRET not in e for e in errors) and any("***" in e for e in errors)
    assert "HTTP 403" in str(exc.value) and "***" in str(exc.value) and SECRET[:-1] not in str(exc.value)


async def test_url_credentials_reach_the_load_requests_not_only_discovery(tmp_path: Path) -> None:
    """Issue 22: user:password@ went to discovery (aiohttp) but never on the load (http1): every POST got 401."""
    async with sim(tmp_path, basic_auth='bob:pw"\\x-7') as (url, log):
        with_user = url.replace("http://", "http://bob:pw%22%5Cx-7@")
        async with client(with_user) as backend:
            records = [await send(backend, i) for i in range(3)]
            assert "pw" not in (backend._url + str(backend.base_url))
    assert [r.status for r in records] == [Status.OK] * 3, [r.error for r in records]
    assert sum(1 for e in log_entries(log) if e.get("status") == "ok") >= 3  # the probe and the three


async def test_a_key_echoed_in_200_bodies_is_redacted_in_texts_and_server_version(tmp_path: Path) -> None:
    """Issue 22: a server echoing the key in /version and in the generated text put it in run.json."""
    key = 'sk-ech\\o"ed-91ab'
    async with sim(tmp_path, api_key=key, echo_auth=True) as (url, _):
        async with client(url, api_key=key) as backend:
            records = [await send(backend, i) for i in range(2)]
            version = await backend._server_version()
    assert version is not None and "***" in version and "ech" not in version
    texts = [r.output_text or "" for r in records]
    assert all(t.startswith("*** ") for t in texts), texts  # "Bearer KEY" echoed before the first token
    assert not any("ech" in t for t in texts)


async def test_missing_key_and_wrong_model_are_refused_by_the_probe(tmp_path: Path) -> None:
    async with sim(tmp_path, api_key=SECRET) as (url, _):
        with pytest.raises(TargetError, match="HTTP 401") as exc:
            async with client(url, model="tokspeed-sim"):
                pass
        assert exc.value.hint is not None and "--api-key" in exc.value.hint
    async with sim(tmp_path) as (url, _):
        with pytest.raises(TargetError, match="HTTP 404: The model `nope` does not exist") as exc:
            async with client(url, model="nope"):
                pass
        assert exc.value.hint is not None and "--model" in exc.value.hint
