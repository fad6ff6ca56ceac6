"""Sustained throughput: the rate a load point's server completed requests while it was under load.

`requests_per_s` divides the completed requests by the whole window, first send to
last end, which holds the ramp-up (no completion before the first E2E) and the
drain (the last requests finishing while none is sent). With N requests of E2E T
sent at λ, that window is N/λ + T, so a point "achieves" N/(N/λ + T) whatever the
server can do: 100 requests of 2.6 s at 8 req/s read as 2.6 req/s. This is the
rate at steady state instead, per iteration:

* window = [a, b], a = max(first send, first end) of the measured requests,
  b = last send of the measured requests (after it the point only drains);
* sustained_requests_per_s = finished requests (ok, error or cancelled, warm-up ones
  included: a warm-up held at the load keeps completing into the window) whose
  end falls in [a, b], over b − a;
* window_arrivals_per_s = requests sent in [a, b], over b − a (the offered rate
  the server really saw in that window).

A server that keeps up completes what arrives (the two rates agree up to the
in-flight count's fluctuation at the window's edges); one that does not lets
its queue grow, by (arrivals − completions) over the window. Iterations are
summed (their windows do not overlap). None with fewer than `MIN_COMPLETIONS`
completions in the window or no window.

Memory: two int64 per record (sent and end times), kept as arrays.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from tokspeed.metrics.schema import Throughput
from tokspeed.records import RequestRecord, Status

NS_PER_S = 1_000_000_000
MIN_COMPLETIONS = 10


@dataclass
class _Span:
    first_send: int
    last_send: int
    first_end: int | None = None


@dataclass(frozen=True, slots=True)
class Sustained:
    requests_per_s: float
    arrivals_per_s: float
    window_s: float
    completed: int  # in the window
    arrived: int


@dataclass
class SustainedWindow:
    """Fed every record of a point (`add`), warm-up included; `result()` gives the sustained rates."""

    _sent: array = field(default_factory=lambda: array("q"))
    _ends: array = field(default_factory=lambda: array("q"))
    _spans: dict[int, _Span] = field(default_factory=dict)

    def add(self, r: RequestRecord) -> None:
        if r.status is Status.INCOMPLETE:  # never finished (cancelled, or the run stopped)
            return
        self._sent.append(r.sent_ns)
        if r.end_ns is not None:
            self._ends.append(r.end_ns)
        if r.warmup:
            return
        sent = r.sent_ns
        span = self._spans.get(r.iteration)
        if span is None:
            span = self._spans[r.iteration] = _Span(sent, sent)
        span.first_send, span.last_send = min(span.first_send, sent), max(span.last_send, sent)
        if r.end_ns is not None:
            span.first_end = r.end_ns if span.first_end is None else min(span.first_end, r.end_ns)

    def result(self) -> Sustained | None:
        ends = np.sort(np.frombuffer(self._ends, dtype=np.int64)) if self._ends else np.zeros(0, np.int64)
        sent = np.sort(np.frombuffer(self._sent, dtype=np.int64)) if self._sent else np.zeros(0, np.int64)
        window = completed = arrived = 0
        for span in self._spans.values():
            a = max(span.first_send, span.first_end or span.first_send)
            b = span.last_send
            if b <= a:
                continue
            window += b - a
            completed += int(np.searchsorted(ends, b, "right") - np.searchsorted(ends, a, "left"))
            arrived += int(np.searchsorted(sent, b, "right") - np.searchsorted(sent, a, "left"))
        if window <= 0 or completed < MIN_COMPLETIONS:
            return None
        seconds = window / NS_PER_S
        return Sustained(completed / seconds, arrived / seconds, seconds, completed, arrived)


def window_arrivals(t: Throughput) -> int | None:
    """How many requests arrived in a summary's steady window (None without one)."""
    if t.window_arrivals_per_s is None or not t.sustained_window_s:
        return None
    return round(t.window_arrivals_per_s * t.sustained_window_s)
