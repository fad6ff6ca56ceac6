"""The simulator's ground-truth log: one JSON line per finished request, appended and flushed.

Every `*_ns` value is `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux, shared by all
processes on the machine, so it compares directly with a client's timestamps);
`epoch_offset_ns` (sampled once at startup) converts any of them to Unix-epoch nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO

import orjson


class SimStatus(str, Enum):
    """How a request ended, from the server's side."""

    OK = "ok"  # every byte, [DONE] included, was handed to the transport
    DISCONNECTED = "disconnected"  # the client went away mid-response
    CANCELLED = "cancelled"  # the server stopped it (shutdown)
    REJECTED = "rejected"  # answered with an HTTP error (see http_status, error)
    ABORTED = "aborted"  # the server cut the response short on purpose (see fault)


@dataclass(slots=True)
class LogEntry:
    """What the simulator did for one request.

    `chunk_ns[i]` is taken immediately before writing token-bearing chunk i and recorded only
    once the write succeeded; `first_token_ns` is taken after the first such chunk was handed
    to the transport. For a non-streamed response the whole body is the one chunk.
    """

    id: str
    api: str
    epoch_offset_ns: int
    received_ns: int
    stream: bool | None = None
    start_ns: int | None = None  # service began (after any queue wait)
    first_token_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    reasoning_chunks: int = 0
    end_ns: int | None = None  # after [DONE] (or the body) was written, or when it failed
    prompt_tokens: int | None = None
    completion_tokens: int = 0  # tokens actually sent (reasoning included)
    reasoning_tokens: int = 0  # of completion_tokens, how many were reasoning
    planned_tokens: int | None = None  # tokens the response was to carry
    prefill_ns: int | None = None  # scheduled time to first token, after start_ns
    itl_ns: int | None = None  # scheduled interval between tokens
    include_usage: bool = False
    status: SimStatus = SimStatus.OK
    http_status: int = 200
    error: str | None = None
    fault: str | None = None  # the injected fault (sim/faults.py), when one was applied
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache (None: no prefix cache)
    spec_drafts: int | None = None  # speculative decoding (sim/spec_decode.py): drafts counted for this request
    spec_accepted: int | None = None  # ... draft tokens accepted in them
    spec_accepted_per_pos: list[int] | None = None  # ... accepted at each draft position
    model: str | None = None  # the request body's `model`, as sent (None: none, or not a string)


class SimLog:
    """Appends `LogEntry` lines to `path` (a no-op without one); open/close bracket its use."""

    __slots__ = ("_file", "_path")

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._file: IO[bytes] | None = None

    def open(self) -> None:
        if self._path is not None and self._file is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self._path.open("ab")

    def write(self, entry: LogEntry) -> None:
        """Append one line and flush it, so a crash loses nothing already finished."""
        if self._file is not None:
            self._file.write(orjson.dumps(entry) + b"\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
