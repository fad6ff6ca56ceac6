"""Sustained throughput at steady state, against queues whose departure rate is known."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from tokspeed.metrics.summary import summarize
from tokspeed.metrics.sustained import SustainedWindow
from tokspeed.records import RequestRecord, Status

NS = 1_000_000_000


def fifo_records(arrivals_s: np.ndarray, service_s: float, slots: int | None, warm: int = 0) -> list[RequestRecord]:
    """Requests through `slots` servers (None: unlimited) of a fixed service time, FIFO: an independent queue."""
    free = [0.0] * (slots or 1)
    out = []
    for i, t in enumerate(arrivals_s):
        if slots is None:
            start = t
        else:
            start = max(t, heapq.heappop(free))
            heapq.heappush(free, start + service_s)
        end = start + service_s
        out.append(RequestRecord(index=i, iteration=0 if i < warm else 1, warmup=i < warm,
                                 scheduled_ns=int(t * NS), sent_ns=int(t * NS), first_token_ns=int((start + 0.01) * NS),
                                 end_ns=int(end * NS), chunk_ns=[int((start + 0.01) * NS), int(end * NS)],
                                 output_tokens=2, input_tokens=8, status=Status.OK))
    return out


def test_a_short_probe_that_keeps_up_is_not_read_as_falling_behind() -> None:
    """100 requests of 2.6 s at 8 req/s on a server that never queues: completions over the whole window
    (drain included) read 6.6 req/s, as the capacity search used to; at steady state it is 8."""
    rate, e2e = 8.0, 2.6
    records = fifo_records(np.arange(100) / rate, e2e, None)
    s = summarize(records)
    assert s.throughput.requests_per_s == pytest.approx(100 / (99 / rate + e2e), rel=1e-3)  # the drain-diluted figure
    assert s.throughput.sustained_requests_per_s == pytest.approx(rate, rel=0.03)
    assert s.throughput.window_arrivals_per_s == pytest.approx(rate, rel=0.03)


def test_an_overloaded_server_sustains_its_service_rate() -> None:
    """4 slots of 50 ms serve 80 req/s: offered 100 req/s, the window completes 80 and arrivals run at 100."""
    records = fifo_records(np.arange(2000) / 100.0, 0.05, 4)
    t = summarize(records).throughput
    assert t.sustained_requests_per_s == pytest.approx(80.0, rel=0.01)
    assert t.window_arrivals_per_s == pytest.approx(100.0, rel=0.01)


def test_warm_up_held_at_the_load_completes_into_the_window() -> None:
    """Warm-up requests that end inside the measured window count: the server was completing them."""
    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(1 / 50.0, 3000))
    records = fifo_records(arrivals, 0.2, None, warm=500)
    t = summarize(records).throughput
    measured = arrivals[500:]
    assert t.sustained_requests_per_s == pytest.approx(2499 / (measured[-1] - measured[0]), rel=0.03)
    lone = SustainedWindow()
    for r in records[500:]:  # the same without the warm-up: the first 0.2 s of the window completes nothing
        lone.add(r)
    res = lone.result()
    assert res is not None and res.window_s < (measured[-1] - measured[0])


def test_too_few_completions_give_no_figure() -> None:
    assert summarize(fifo_records(np.arange(5) / 10.0, 0.01, 1)).throughput.sustained_requests_per_s is None
