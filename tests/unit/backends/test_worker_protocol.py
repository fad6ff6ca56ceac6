"""The pipe protocol of `--workers`: frames, specs and records across it, and a worker's serve loop."""

from __future__ import annotations

import asyncio
import dataclasses
from time import perf_counter_ns
from typing import Any

import orjson
import pytest

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.worker_child import serve
from tokspeed.backends.worker_protocol import (
    HEADER,
    MAX_FRAME,
    FrameError,
    WorkerInit,
    fill,
    frame,
    read_frame,
    record_from_wire,
    record_message,
    send_message,
    spec_from_wire,
    spec_to_wire,
)
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource


def reader_of(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


async def test_frames_round_trip_and_a_clean_end_is_none() -> None:
    messages = [{"op": "send", "id": i, "x": "é" * i} for i in range(3)]
    reader = reader_of(b"".join(frame(m) for m in messages))
    assert [await read_frame(reader) for _ in messages] == messages
    assert await read_frame(reader) is None


@pytest.mark.parametrize(
    "data,problem",
    [
        (b"\x00\x00", "inside a frame header"),
        (HEADER.pack(10) + b"{}", "inside a frame"),
        (HEADER.pack(MAX_FRAME + 1), "corrupt"),
        (HEADER.pack(3) + b"abc", "not JSON"),
        (HEADER.pack(2) + b"[]", "not a message"),
        (HEADER.pack(11) + b'{"op": 1}  ', "not a message"),
    ],
)
async def test_a_torn_or_foreign_frame_is_an_error(data: bytes, problem: str) -> None:
    with pytest.raises(FrameError, match=problem):
        await read_frame(reader_of(data))


def test_specs_cross_the_pipe_unchanged() -> None:
    specs = [
        RequestSpec(index=3, prompt="你好", max_tokens=8, input_tokens=2, input_tokens_source=TokenSource.TOKENIZER),
        RequestSpec(index=4, messages=({"role": "user", "content": "hi"},), max_tokens=None),
    ]
    for spec in specs:
        assert spec_from_wire(orjson.loads(orjson.dumps(spec_to_wire(spec)))) == spec


def finished_record() -> RequestRecord:
    return RequestRecord(
        index=5, iteration=2, warmup=False, scheduled_ns=1_000, sent_ns=2_000, first_token_ns=2_500,
        first_content_ns=2_600, end_ns=9_000, chunk_ns=[2_500, 2_500, 3_000], chunk_tokens=[1, 1, 3],
        reasoning_chunks=1, input_tokens=7, input_tokens_source=TokenSource.USAGE, output_tokens=5,
        output_tokens_source=TokenSource.USAGE, max_tokens=8, status=Status.ERROR, error_kind=ErrorKind.BROKEN,
        error="cut", http_status=200, response_id="r1", finish_reason=None, output_text="abc", retries=1,
        anomalies=["missing_done"], connect_duration_ns=300,
    )


def test_a_filled_record_comes_back_whole_and_keeps_the_parents_identity() -> None:
    done = finished_record()
    parent = RequestRecord(index=5, iteration=2, warmup=False, scheduled_ns=1_000, benchmark=4)
    wire = orjson.loads(orjson.dumps(record_message(9, done)))
    assert wire["op"] == "record" and wire["id"] == 9
    fill(parent, wire["rec"])
    assert parent == dataclasses.replace(done, benchmark=4)
    assert parent.chunk_ns[0] is parent.chunk_ns[1]  # chunks read at one instant share one int, as in memory


def test_a_send_message_carries_only_what_the_backend_reads() -> None:
    record = RequestRecord(index=1, iteration=0, warmup=True, scheduled_ns=123)
    message = orjson.loads(orjson.dumps(send_message(7, RequestSpec(index=1, prompt="p"), record)))
    assert message["id"] == 7 and record_from_wire(message["rec"]) == record


def test_worker_init_never_shows_its_settings() -> None:
    init = WorkerInit(worker=1, settings={"api_key": "sk-SECRET"}, model="m", include_usage=True, pool_size=4)
    assert "sk-SECRET" not in repr(init) and "sk-SECRET" not in str(init)


class SlowBackend:
    """Each request takes `delay_s`; index 13 raises (a backend bug)."""

    def __init__(self, init: WorkerInit) -> None:
        self.delay_s = float(init.settings["delay_s"])
        self.closed = False

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = perf_counter_ns()
        if spec.index == 13:
            raise RuntimeError("bug")
        await asyncio.sleep(self.delay_s)
        record.end_ns = perf_counter_ns()

    async def close(self) -> None:
        self.closed = True


def init_frame(**settings: Any) -> bytes:
    init = WorkerInit(worker=1, settings=settings, model="m", include_usage=True, pool_size=1)
    return frame({"op": "init", **init.model_dump()})


def send_frame(rid: int, index: int) -> bytes:
    return frame(send_message(rid, RequestSpec(index=index, prompt="p"), RequestRecord(index, 1, False, 0)))


async def test_serve_answers_every_send_and_cancels_what_is_left_at_the_end() -> None:
    reader = asyncio.StreamReader()
    out: list[dict[str, Any]] = []

    def write(data: bytes) -> None:
        out.append(orjson.loads(data[HEADER.size:]))

    backends: list[SlowBackend] = []

    def make(init: WorkerInit) -> SlowBackend:
        backends.append(SlowBackend(init))
        return backends[-1]

    reader.feed_data(init_frame(delay_s=0.05) + send_frame(0, 1) + send_frame(1, 2) + send_frame(2, 13)
                     + send_frame(3, 4))
    served = asyncio.ensure_future(serve(reader, write, make))
    await asyncio.sleep(0.01)
    reader.feed_data(frame({"op": "cancel", "id": 1}) + frame({"op": "cancel", "id": 99}))
    await asyncio.sleep(0.1)
    reader.feed_data(send_frame(4, 5))
    await asyncio.sleep(0.01)
    reader.feed_eof()  # the parent closed the pipe with request 4 in flight
    assert await served == 0
    assert out[0] == {"op": "ready"}
    got = {m["id"]: m["rec"] for m in out[1:]}
    assert sorted(got) == [0, 1, 2, 3, 4]  # one record per request, cancelled or not
    assert got[0]["status"] == got[3]["status"] == "ok"
    assert got[1]["status"] == got[4]["status"] == "incomplete"
    assert got[2]["status"] == "error" and got[2]["error_kind"] == "other" and "bug" in got[2]["error"]
    assert backends[0].closed


async def test_serve_reports_a_backend_that_cannot_start() -> None:
    class Refusing(SlowBackend):
        async def start(self) -> TargetInfo:
            raise TargetError("refused", hint="check it")

    out: list[bytes] = []
    assert await serve(reader_of(init_frame(delay_s=0)), out.append, Refusing) == 1
    assert orjson.loads(out[0][HEADER.size:]) == {"op": "failed", "message": "refused", "hint": "check it"}


async def test_serve_wants_init_first() -> None:
    with pytest.raises(FrameError, match="init"):
        await serve(reader_of(send_frame(0, 1)), lambda _: None, SlowBackend)
