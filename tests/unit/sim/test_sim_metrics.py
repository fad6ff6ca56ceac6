"""The simulator's /metrics text: running, waiting and KV usage, readable by tokspeed's scraper."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tokspeed.sim.gate import FifoGate
from tokspeed.sim.log import LogEntry
from tokspeed.sim.metrics import SimMetrics
from tokspeed.telemetry import server as srv
from tokspeed.telemetry.engines import detect_engine


def entry(prompt: int, generated: int) -> LogEntry:
    e = LogEntry(id=f"x-{prompt}", api="chat", epoch_offset_ns=0, received_ns=0)
    e.prompt_tokens, e.completion_tokens = prompt, generated
    return e


async def test_running_waiting_kv_and_counters() -> None:
    gate = FifoGate(1)
    metrics = SimMetrics(gate, 'odd "model"', kv_capacity_tokens=1000)
    await gate.acquire()
    first = entry(300, 0)
    metrics.admitted(first)
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    first.completion_tokens = 100

    engine = detect_engine(srv.sample_values(metrics.render()))
    assert engine is not None and engine.engine == "tokspeed-sim"
    r = srv.reading(engine, srv.sample_values(metrics.render(), engine.names, engine.maxed))
    assert (r["running"], r["waiting"], r["kv_cache_usage_pct"]) == (1.0, 1.0, 40.0)

    metrics.released(first)
    gate.release()
    await waiter
    second = entry(5000, 0)  # more than the capacity: usage stops at full
    metrics.admitted(second)
    values = srv.sample_values(metrics.render())
    assert values["tokspeed_sim:kv_cache_usage_perc"] == 1.0
    assert values["tokspeed_sim:num_requests_waiting"] == 0.0
    assert values["tokspeed_sim:prompt_tokens_total"] == 5300.0
    assert values["tokspeed_sim:generation_tokens_total"] == 100.0
    assert values["tokspeed_sim:requests_total"] == 2.0


def test_observe_many_counts_as_observe_one_by_one_bucket_edges_included() -> None:
    import random

    import numpy as np

    from tokspeed.sim.metrics import ITL_BUCKETS, Histogram

    one, many = Histogram(ITL_BUCKETS), Histogram(ITL_BUCKETS)
    rng = random.Random(1)
    for _ in range(100):
        ts = [0]
        for _ in range(rng.randrange(0, 300)):  # on the edges (10 ms = le 0.01 exactly), zero gaps, anything
            ts.append(ts[-1] + rng.choice([0, 10_000_000, 25_000_000, rng.randrange(1, 10**9)]))
        for before, after in itertools.pairwise(ts):
            one.observe((after - before) / 1e9)
        many.observe_many(np.diff(np.asarray(ts, dtype=np.int64)) / 1e9)
    assert many.counts == one.counts and many.count == one.count
    assert many.sum == pytest.approx(one.sum, rel=1e-12)
