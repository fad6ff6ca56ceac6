"""Injected faults: which generation request fails, and how — drawn from a seeded generator.

Every fault has a per-request probability (`tokspeed sim --fault NAME=P`, repeatable). Each
generation request draws one uniform number u from a generator seeded with `--seed` and
gets the first fault, in `Fault` order, whose cumulative probability exceeds u, so a request
has at most one fault and the probabilities must add up to at most 1. Request n (in arrival
order) therefore gets the same fault on every run with the same seed and the same
probabilities. The first `--clean-requests` requests draw but are served without a fault
(to let a client's probe through). Faults that only make sense in a stream are not applied
to non-streamed requests. The fault applied is logged in the request's `fault` field.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from enum import Enum


class Fault(str, Enum):
    """What goes wrong with one request (the `--fault` names)."""

    HTTP_429 = "http_429"  # 429 Too Many Requests with Retry-After: --retry-after-s
    HTTP_500 = "http_500"  # 500 with an OpenAI-style error body
    HTTP_503 = "http_503"  # 503 with Retry-After: --retry-after-s
    RESET = "reset"  # the connection is aborted before any response byte
    SLOW_HEADERS = "slow_headers"  # the response starts --slow-headers-ms late (added to TTFT)
    DISCONNECT = "disconnect"  # the connection is closed mid-stream after --fault-after-chunks chunks
    MALFORMED_SSE = "malformed_sse"  # a line that is no SSE field, mid-stream; the stream goes on
    INVALID_JSON = "invalid_json"  # a data: event holding truncated JSON, mid-stream; the stream goes on
    ERROR_EVENT = "error_event"  # an OpenAI error object mid-stream, then the stream ends
    STALL = "stall"  # no bytes for --stall-ms mid-stream, then the stream goes on
    NO_DONE = "no_done"  # the stream ends cleanly, usage included, without data: [DONE]
    BAD_USAGE = "bad_usage"  # usage.completion_tokens reports half the tokens sent
    STALL_RESET = "stall_reset"  # no bytes for --stall-ms (mid-stream, or before a whole body), then a reset
    DONE_HANG = "done_hang"  # data: [DONE], then no chunk terminator: the connection stays open --stall-ms
    DONE_CLOSE = "done_close"  # data: [DONE], then the connection closes without the chunk terminator
    DONE_RESET = "done_reset"  # data: [DONE], then the connection is reset without the chunk terminator
    JSON_BODY = "json_body"  # a streamed request answered with one whole JSON body (stream: true ignored)
    SSE_ERROR = "sse_error"  # an `event: error` SSE event mid-stream (no error object), then the stream goes on


HTTP_STATUS: dict[Fault, int] = {Fault.HTTP_429: 429, Fault.HTTP_500: 500, Fault.HTTP_503: 503}
RETRY_AFTER: frozenset[Fault] = frozenset({Fault.HTTP_429, Fault.HTTP_503})
MID_STREAM: frozenset[Fault] = frozenset(
    {Fault.DISCONNECT, Fault.MALFORMED_SSE, Fault.INVALID_JSON, Fault.ERROR_EVENT, Fault.STALL, Fault.STALL_RESET,
     Fault.SSE_ERROR}
)
AFTER_DONE: frozenset[Fault] = frozenset({Fault.DONE_HANG, Fault.DONE_CLOSE, Fault.DONE_RESET})
# stall_reset also strikes a non-streamed request (before its body); the others need a stream
STREAM_ONLY: frozenset[Fault] = (MID_STREAM - {Fault.STALL_RESET}) | AFTER_DONE | {
    Fault.NO_DONE, Fault.BAD_USAGE, Fault.JSON_BODY}
NAMES = ", ".join(f.value for f in Fault)


def parse_fault(text: str) -> tuple[Fault, float]:
    """`NAME=P` (0 ≤ P ≤ 1) or a bare `NAME` (every request) -> (fault, probability)."""
    name, sep, value = text.partition("=")
    try:
        fault = Fault(name.strip().lower())
    except ValueError:
        raise ValueError(f"unknown fault {name.strip()!r}; known: {NAMES}") from None
    if not sep:
        return fault, 1.0
    try:
        p = float(value)
    except ValueError:
        raise ValueError(f"fault {fault.value}: probability {value!r} is not a number") from None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"fault {fault.value}: probability must be between 0 and 1, got {value}")
    return fault, p


def check_rates(rates: Mapping[Fault, float]) -> None:
    """Raise ValueError unless each probability is in [0, 1] and they add up to at most 1."""
    for fault, p in rates.items():
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"fault {fault.value}: probability must be between 0 and 1, got {p}")
    total = sum(rates.values())
    if total > 1.0 + 1e-9:
        raise ValueError(f"fault probabilities add up to {total:g}; a request gets at most one fault, so keep it ≤ 1")


class FaultPicker:
    """Draws the fault of each generation request, in arrival order."""

    __slots__ = ("_clean", "_rng", "_seen", "_table")

    def __init__(self, rates: Mapping[Fault, float], seed: int = 0, clean_requests: int = 0) -> None:
        check_rates(rates)
        self._rng = random.Random(seed)
        self._clean = clean_requests
        self._seen = 0
        cumulative = 0.0
        table: list[tuple[float, Fault]] = []
        for fault in Fault:  # a fixed order, whatever order the flags came in
            p = rates.get(fault, 0.0)
            if p > 0:
                cumulative += p
                table.append((cumulative, fault))
        self._table = tuple(table)

    def pick(self, stream: bool) -> Fault | None:
        """The fault for the next request (None: serve it normally)."""
        if not self._table:
            return None
        self._seen += 1
        u = self._rng.random()
        if self._seen <= self._clean:
            return None
        fault = next((f for bound, f in self._table if u < bound), None)
        if fault in STREAM_ONLY and not stream:
            return None
        return fault
