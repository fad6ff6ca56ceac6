"""Records read back compactly for summaries give exactly the summaries of plain records."""

from __future__ import annotations

from array import array

from locations import RUN_V1
from tokspeed.results import REQUESTS_FILE, build_benchmark, read_records


def test_compact_chunk_times_are_int64_arrays_with_the_same_values_and_summary() -> None:
    plain = read_records(RUN_V1 / REQUESTS_FILE)
    compact = read_records(RUN_V1 / REQUESTS_FILE, compact=True)
    assert len(plain) == len(compact) > 0
    assert all(isinstance(r.chunk_ns, array) and r.chunk_ns.typecode == "q" for r in compact)
    assert all(list(c.chunk_ns) == p.chunk_ns for p, c in zip(plain, compact))
    assert any(len(r.chunk_ns) > 1 for r in compact)
    profile = {"kind": "concurrency", "concurrency": 4}
    a = build_benchmark("x", profile, plain, []).model_dump()
    b = build_benchmark("x", profile, compact, []).model_dump()
    assert a == b


def test_one_iteration_reuses_the_pooled_summary_and_equals_computing_it() -> None:
    from tokspeed.metrics import summarize_by_iteration

    records = read_records(RUN_V1 / REQUESTS_FILE)
    one = [r for r in records if r.warmup or r.iteration == 1]
    bench = build_benchmark("x", {"kind": "concurrency", "concurrency": 4}, one, [])
    assert [it.iteration for it in bench.iterations] == [1]
    assert bench.iterations[0].summary == bench.summary
    # the pooled summary also carries the steady-state window (build_benchmark adds it)
    assert bench.summary.model_copy(update={"steady_state": None}) == summarize_by_iteration(one, [])[1]
