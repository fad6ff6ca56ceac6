"""SummaryBuilder: summarize() one record at a time, with state that does not grow with the records."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokspeed.metrics import parse_slo, summarize
from tokspeed.metrics import summary as summary_module
from tokspeed.metrics.steady_state import steady_state
from tokspeed.metrics.summary import SummaryBuilder
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource
from tokspeed.results import ResultsWriter, StoredRecords, build_benchmark
from tokspeed.stats.sketch import BoundedSample

MS = 1_000_000


def records(n: int, seed: int = 7) -> list[RequestRecord]:
    """`n` varied records: completed (a tenth without usage), errored, incomplete, warm-up, two iterations."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(n):
        sent = 1_000 * MS + i * 5 * MS + rng.randrange(MS)
        kind = rng.random()
        base: dict[str, Any] = {
            "index": i, "iteration": 1 + (i >= n // 2), "warmup": i < 3, "scheduled_ns": sent - rng.randrange(MS), "sent_ns": sent
        }
        if kind < 0.08:
            out.append(RequestRecord(**base, end_ns=sent + 3 * MS, status=Status.ERROR, error_kind=ErrorKind.HTTP, http_status=503))
        elif kind < 0.1:
            out.append(RequestRecord(**base, status=Status.INCOMPLETE))
        else:
            first = sent + rng.randrange(5 * MS, 50 * MS)
            chunk_ns = list(np.cumsum([first] + [rng.randrange(MS // 2, 30 * MS) for _ in range(rng.randrange(0, 40))]))
            usage = kind > 0.2
            out.append(
                RequestRecord(
                    **base,
                    first_token_ns=first,
                    first_content_ns=first,
                    chunk_ns=[int(t) for t in chunk_ns],
                    end_ns=int(chunk_ns[-1]) + rng.randrange(MS),
                    output_tokens=len(chunk_ns) + (rng.randrange(3) if usage else 0),
                    output_tokens_source=TokenSource.USAGE if usage else TokenSource.CHUNKS,
                    input_tokens=rng.randrange(10, 500),
                    input_tokens_source=TokenSource.TOKENIZER,
                    connect_duration_ns=rng.randrange(MS) if i % 7 == 0 else None,
                )
            )
    return out


SLOS = [parse_slo("ttft_p99_ms<=40"), parse_slo("tpot_ms<=15"), parse_slo("error_rate<=0.05")]


@pytest.mark.parametrize("rate", [None, 50.0])
def test_batches_of_any_size_give_the_same_summary(monkeypatch: pytest.MonkeyPatch, rate: float | None) -> None:
    rs = records(600)
    whole = summarize(rs, SLOS, rate).model_dump()
    monkeypatch.setattr(summary_module, "_BATCH_RECORDS", 7)  # flushed in 86 batches
    assert summarize(iter(rs), SLOS, rate).model_dump() == whole
    monkeypatch.setattr(summary_module, "_BATCH_CHUNKS", 50)  # flushed on chunk count too
    assert summarize(iter(rs), SLOS, rate).model_dump() == whole


def test_the_builder_keeps_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_module, "_BATCH_RECORDS", 64)
    builder = SummaryBuilder(SLOS, 50.0)
    for r in records(2_000):
        builder.add(r)
        assert len(builder._batch) < 64
    assert builder.summary().requests.total == 1_997


def test_past_the_exact_limit_figures_are_within_the_sketch_accuracy(monkeypatch: pytest.MonkeyPatch) -> None:
    rs = records(1_500)
    exact = summarize(rs, SLOS)
    monkeypatch.setattr(summary_module, "BoundedSample", lambda: BoundedSample(limit=500))
    approx = summarize(rs, SLOS)
    assert exact.approximate == []
    assert {"itl_ms", "chunk_gap_ms", "ttft_ms", "e2e_ms"} <= set(approx.approximate)
    assert approx.requests == exact.requests and approx.tokens == exact.tokens and approx.goodput == exact.goodput
    for field in ("ttft_ms", "itl_ms", "e2e_ms", "tpot_ms"):
        a, e = getattr(approx, field), getattr(exact, field)
        assert a.count == e.count and a.min == e.min and a.max == e.max
        assert a.mean == pytest.approx(e.mean, rel=1e-9)
        for stat in ("p50", "p90", "p99"):
            assert getattr(a, stat) == pytest.approx(getattr(e, stat), rel=2e-4), (field, stat)


def _written(tmp_path: Path, rs: list[RequestRecord]) -> StoredRecords:
    writer = ResultsWriter(tmp_path, 1_700_000_000 * 10**9)
    for r in rs:
        r.benchmark = 0
        writer.append(r)
    writer.close()
    return StoredRecords(writer.requests_path, 0, 0, writer.epoch_offset_ns)


def test_a_point_streamed_from_disk_summarises_as_the_list_does(tmp_path: Path) -> None:
    streamed = _written(tmp_path, records(400))
    listed = list(streamed)
    assert len(listed) == len(list(streamed)) == 400  # read afresh on every pass
    profile = {"kind": "rate", "rate": 50.0}
    assert build_benchmark("p", profile, streamed, SLOS).model_dump() == build_benchmark("p", profile, listed, SLOS).model_dump()


def test_steady_state_refuses_a_one_shot_iterator() -> None:
    with pytest.raises(TypeError, match="re-iterable"):
        steady_state(iter(records(50)), summarize)
