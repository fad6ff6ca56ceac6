"""Compatibility views (`tokspeed report --as`): each peer's formulas on crafted records, hand-computed."""

from __future__ import annotations

import pytest

from tokspeed.metrics import compat
from tokspeed.records import RequestRecord, Status

MS = 1_000_000
T0 = 10_000 * MS  # an arbitrary clock origin


def rec(chunks_ms: list[float], tokens: int, end_ms: float, *, first_ms: float | None = None, chunk_tokens: list[int] | None = None,
        reasoning: int = 0, warmup: bool = False, status: Status = Status.OK, benchmark: int = 0) -> RequestRecord:
    chunk_ns = [T0 + int(c * MS) for c in chunks_ms]
    return RequestRecord(
        index=0, iteration=0 if warmup else 1, warmup=warmup, scheduled_ns=T0, sent_ns=T0,
        first_token_ns=T0 + int((first_ms if first_ms is not None else chunks_ms[0]) * MS) if chunks_ms else None,
        first_content_ns=None, end_ns=T0 + int(end_ms * MS), chunk_ns=chunk_ns, chunk_tokens=chunk_tokens,
        reasoning_chunks=reasoning, input_tokens=10, output_tokens=tokens, status=status, benchmark=benchmark,
    )


# A: multi-token chunks 1+3+2 at 100, 120, 160 ms; last byte (usage trailer, [DONE]) at 170 ms
A = rec([100, 120, 160], 6, 170, chunk_tokens=[1, 3, 2])
# B: a one-token response at 50 ms, last byte at 55 ms
B = rec([50], 1, 55, chunk_tokens=[1])
# C: reasoning first: a reasoning chunk at 30 ms, content at 80 and 90 ms, last byte at 100 ms
C = rec([30, 80, 90], 3, 100, reasoning=1)
C.first_content_ns = T0 + 80 * MS
# excluded: a warm-up and a failed request
W = rec([1, 2], 2, 3, warmup=True)
E = rec([5], 1, 500, status=Status.ERROR)
RECORDS = [A, B, C, W, E]


def test_vllm_per_request_formulas() -> None:
    assert [compat.vllm_ttft_ms(r) for r in (A, B, C)] == pytest.approx([100, 50, 30])
    assert [compat.vllm_e2el_ms(r) for r in (A, B, C)] == pytest.approx([160, 50, 90])  # last chunk, not the last byte
    assert compat.vllm_tpot_ms(A) == pytest.approx((160 - 100) / 5)  # 12
    assert compat.vllm_tpot_ms(B) is None  # N = 1: no TPOT
    assert compat.vllm_tpot_ms(C) == pytest.approx((90 - 30) / 2)  # 30: the reasoning chunk starts the clock
    assert compat.vllm_itls_ms(A) == pytest.approx([20, 40])  # per chunk gap, not spread over the 3 tokens
    assert compat.vllm_itls_ms(B) == []
    assert compat.vllm_itls_ms(C) == pytest.approx([50, 10])


def test_aiperf_per_request_formulas() -> None:
    assert [compat.aiperf_ttft_ms(r) for r in (A, B, C)] == pytest.approx([100, 50, 30])
    assert [compat.aiperf_request_latency_ms(r) for r in (A, B, C)] == pytest.approx([160, 50, 90])
    assert compat.aiperf_itl_ms(A) == pytest.approx(12)  # AIPerf's "ITL" is (latency − TTFT)/(OSL − 1)
    assert compat.aiperf_itl_ms(B) is None
    assert compat.aiperf_itl_ms(C) == pytest.approx(30)
    assert compat.aiperf_icls_ms(A) == pytest.approx([20, 40])  # ICL: the chunk gaps


def test_guidellm_per_request_formulas() -> None:
    assert [compat.guidellm_ttft_ms(r) for r in (A, B, C)] == pytest.approx([100, 50, 30])
    assert compat.guidellm_tpot_ms(A) == pytest.approx(160 / 6)  # first token included: (last − start)/N
    assert compat.guidellm_tpot_ms(B) == pytest.approx(50)  # defined for one token, = TTFT
    assert compat.guidellm_tpot_ms(C) == pytest.approx(90 / 3)
    assert compat.guidellm_itl_ms(A) == pytest.approx((160 - 100) / 5)
    assert compat.guidellm_itl_ms(B) is None
    assert compat.guidellm_itl_ms(C) == pytest.approx((90 - 30) / 2)
    assert [compat.guidellm_request_latency_ms(r) for r in (A, B, C)] == pytest.approx([170, 55, 100])  # to the last byte


def by_name(view: compat.CompatView) -> dict[str, compat.CompatMetric]:
    return {m.name: m for m in view.metrics}


def test_vllm_view_pools_and_excludes_warmup_and_errors() -> None:
    v = compat.vllm_view(RECORDS, 0, "p0")
    assert v.requests == 3
    # duration: first send (0) to last end among measured requests (the failed one ends at 500 ms)
    assert v.duration_s == pytest.approx(0.5)
    m = by_name(v)
    assert m["TTFT"].stats["mean"] == pytest.approx(60)
    assert m["TPOT"].stats["mean"] == pytest.approx((12 + 30) / 2)  # B has no TPOT
    itl = m["ITL"].stats  # pooled chunk gaps 20, 40, 50, 10
    assert itl["mean"] == pytest.approx(30) and itl["p50"] == pytest.approx(30)
    assert itl["p90"] == pytest.approx(47) and itl["p99"] == pytest.approx(49.7)
    assert m["Request throughput"].stats["value"] == pytest.approx(3 / 0.5)
    assert m["Output token throughput"].stats["value"] == pytest.approx(10 / 0.5)
    assert m["Total token throughput"].stats["value"] == pytest.approx(40 / 0.5)
    assert any("role-only" in a for a in v.approximations)


def test_aiperf_view_names_tokspeeds_tpot_itl() -> None:
    m = by_name(compat.aiperf_view(RECORDS))
    assert m["Inter Token Latency"].tokspeed_metric == "tpot_ms"
    assert m["Inter Token Latency"].stats["mean"] == pytest.approx(21)
    assert m["Inter Chunk Latency"].tokspeed_metric == "itl_ms"
    assert m["Inter Chunk Latency"].stats["mean"] == pytest.approx(30)


def test_guidellm_view_tpot_includes_first_token() -> None:
    m = by_name(compat.guidellm_view(RECORDS))
    assert m["TPOT"].stats["mean"] == pytest.approx((160 / 6 + 50 + 30) / 3)
    assert m["ITL"].stats["mean"] == pytest.approx((12 + 30) / 2)
    assert m["Request Latency"].stats["mean"] == pytest.approx((170 + 55 + 100) / 3)


def test_json_schema_and_empty_point() -> None:
    v = compat.vllm_view(RECORDS, 1, "empty")  # no records for load point 1
    assert v.requests == 0 and v.duration_s is None
    assert by_name(v)["TTFT"].stats == {"mean": None, "p50": None, "p90": None, "p99": None}
    data = compat.to_json("vllm", [v])
    assert data["schema"] == "tokspeed.compat/1" and data["benchmarks"][0]["tool"] == "vllm"
    assert {t.value for t in compat.CompatTool} == set(compat.TOOLS) == set(compat.VIEWS)
