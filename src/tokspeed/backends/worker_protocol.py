"""The pipe protocol between tokspeed and its client worker processes (`--workers N`).

Each message is one frame: a 4-byte big-endian length, then that many bytes of
orjson. Messages are JSON objects with an `op`:

    parent -> worker   init    {worker, settings, model, include_usage, pool_size}   (first, once)
                       send    {id, spec, rec}      rec = [index, iteration, warmup, scheduled_ns]
                       cancel  {id}
    worker -> parent   ready   {}                   the worker's backend started
                       failed  {message, hint}      it could not start (the text is already redacted)
                       record  {id, rec}            rec = RequestRecord.to_json_dict(0)

Times cross the pipe as they were taken: CLOCK_MONOTONIC nanoseconds
(`time.perf_counter_ns()` on Linux is that clock, shared by every process on
the host), so a worker's timestamps need no conversion. Secrets travel only in
`init.settings`, over the pipe: never in argv or the environment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from tokspeed.records import RequestRecord, RequestSpec, TokenSource

HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024  # a larger length means the stream is corrupt, not a record

INIT, READY, FAILED, SEND, CANCEL, RECORD = "init", "ready", "failed", "send", "cancel", "record"

# what the worker fills; the rest of a record (index, iteration, warmup, scheduled_ns, benchmark, the
# workload's tags conversation, turn, prefix_group, model, and the schedule's labels stage, workload_class) is the parent's
_FILLED = tuple(
    f.name for f in dataclasses.fields(RequestRecord)
    if f.name not in ("index", "iteration", "warmup", "scheduled_ns", "benchmark", "conversation", "turn", "prefix_group",
                      "stage", "workload_class", "model")
)


class FrameError(Exception):
    """The byte stream is not a sequence of frames (a stray write to the pipe, a torn frame)."""


class WorkerInit(BaseModel):
    """What a worker needs to build its backend. `settings` may hold secrets: it is never shown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    worker: int = Field(ge=1, description="1-based worker number, for messages")
    settings: dict[str, Any] = Field(repr=False, description="the backend's configuration (opaque here)")
    model: str = Field(description="the model the parent discovered, so workers do not rediscover it")
    include_usage: bool = Field(description="whether the target accepted stream_options.include_usage")
    pool_size: int = Field(ge=1, description="connections this worker may open")


def frame(message: dict[str, Any]) -> bytes:
    """One message as a length-prefixed frame."""
    body = orjson.dumps(message)
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message; None at a clean end of stream. Raises FrameError on a torn or bad frame."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("stream ended inside a frame header") from None
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes: the stream is corrupt")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("stream ended inside a frame") from None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise FrameError("frame is not a message")
    return message


# requests ---------------------------------------------------------------------
def send_message(request_id: int, spec: RequestSpec, record: RequestRecord) -> dict[str, Any]:
    """Ask a worker to send `spec` for `record` (only the parts of the record the backend reads)."""
    return {
        "op": SEND,
        "id": request_id,
        "spec": spec_to_wire(spec),
        "rec": [record.index, record.iteration, record.warmup, record.scheduled_ns],
    }


def spec_to_wire(spec: RequestSpec) -> dict[str, Any]:
    return {
        "index": spec.index,
        "prompt": spec.prompt,
        "messages": spec.messages,
        "max_tokens": spec.max_tokens,
        "input_tokens": spec.input_tokens,
        "input_tokens_source": None if spec.input_tokens_source is None else spec.input_tokens_source.value,
        "images": spec.images,
        "keep_text": spec.keep_text,
        "model": spec.model,
        "cancel_after_ns": spec.cancel_after_ns,
    }


def spec_from_wire(d: dict[str, Any]) -> RequestSpec:
    messages = d.get("messages")
    source = d.get("input_tokens_source")
    return RequestSpec(
        index=int(d["index"]),
        prompt=d.get("prompt"),
        messages=None if messages is None else tuple(messages),
        max_tokens=d.get("max_tokens"),
        input_tokens=d.get("input_tokens"),
        input_tokens_source=None if source is None else TokenSource(source),
        images=tuple(images) if (images := d.get("images")) else None,
        keep_text=bool(d.get("keep_text")),
        model=d.get("model"),
        cancel_after_ns=d.get("cancel_after_ns"),
    )


def record_from_wire(rec: list[Any]) -> RequestRecord:
    """The fresh record a worker fills, from `send_message`'s `rec`."""
    index, iteration, warmup, scheduled_ns = rec
    return RequestRecord(index=int(index), iteration=int(iteration), warmup=bool(warmup), scheduled_ns=int(scheduled_ns))


def record_message(request_id: int, record: RequestRecord) -> dict[str, Any]:
    """A finished record, on the monotonic clock (epoch offset 0)."""
    return {"op": RECORD, "id": request_id, "rec": record.to_json_dict(0)}


def fill(record: RequestRecord, wire: dict[str, Any]) -> None:
    """Copy what a worker observed into the parent's `record` (its identity and schedule stay)."""
    filled = RequestRecord.from_json_dict(wire, 0)
    for name in _FILLED:
        setattr(record, name, getattr(filled, name))
