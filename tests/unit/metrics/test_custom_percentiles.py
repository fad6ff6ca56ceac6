"""--percentiles, NTPOT and --cooldown: each figure against numpy on the records (computed here, independently)."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.errors import ConfigError
from tokspeed.metrics import parse_slo, summarize
from tokspeed.metrics.cooldown import cooldown, cooldown_cut
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.distribution import parse_percentiles, percentile_name, quantile_of_name

MS = 1_000_000


def _records(n: int = 400, seed: int = 3) -> list[RequestRecord]:
    """n completed requests: sent every 10 ms, random TTFT, token gaps and lengths (integers, so exact)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = 1_000 * MS + i * 10 * MS
        ttft = int(rng.integers(20, 400)) * MS
        tokens = int(rng.integers(1, 60))
        gaps = rng.integers(5, 40, size=tokens - 1) * MS
        chunks = [sent + ttft, *(sent + ttft + np.cumsum(gaps)).tolist()]
        out.append(RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent,
                                 first_token_ns=chunks[0], first_content_ns=chunks[0], end_ns=int(chunks[-1]) + MS,
                                 chunk_ns=[int(c) for c in chunks], output_tokens=tokens, status=Status.OK))
    return out


def test_percentile_names_follow_the_p999_convention_and_never_collide() -> None:
    assert [percentile_name(q) for q in (50, 99.9, 99.99, 75, 0.1, 1.25, 12.5)] == [
        "p50", "p999", "p9999", "p75", "p0_1", "p1_25", "p125"]
    names = {percentile_name(q) for q in np.round(np.arange(0.05, 100, 0.05), 2)}
    assert len(names) == len(np.arange(0.05, 100, 0.05))


def test_parse_percentiles_sorts_dedupes_and_refuses_out_of_range() -> None:
    assert parse_percentiles("99.9, 50,90,99,50") == (50.0, 90.0, 99.0, 99.9)
    assert parse_percentiles("p75") == (75.0,)
    for bad in ("0", "100", "abc", "", "50,,x"):
        with pytest.raises(ValueError):
            parse_percentiles(bad)


def test_extra_percentiles_equal_numpy_on_the_records() -> None:
    records = _records()
    s = summarize(records, percentiles=(50, 75, 99.99, 12.5))
    ttft = np.array([(r.first_token_ns - r.sent_ns) / MS for r in records])
    e2e = np.array([(r.end_ns - r.sent_ns) / MS for r in records])
    assert set(s.percentiles["ttft_ms"]) == {"p75", "p9999", "p125"}  # p50 is a standard field already
    assert s.percentiles["ttft_ms"]["p75"] == pytest.approx(np.percentile(ttft, 75), rel=1e-12)
    assert s.percentiles["e2e_ms"]["p9999"] == pytest.approx(np.percentile(e2e, 99.99), rel=1e-12)
    flat = s.flat()
    assert flat["e2e_p125_ms"] == pytest.approx(np.percentile(e2e, 12.5), rel=1e-12)
    assert flat["output_tokens_p75"] == pytest.approx(np.percentile([r.output_tokens for r in records], 75))
    assert "ttft_p75_ms" not in summarize(records).flat()  # only when asked for


def test_ntpot_is_e2e_over_output_tokens_per_request() -> None:
    records = _records()
    s = summarize(records)
    truth = np.array([(r.end_ns - r.sent_ns) / MS / r.output_tokens for r in records])
    assert s.ntpot_ms.count == len(records)
    assert s.ntpot_ms.mean == pytest.approx(truth.mean(), rel=1e-12)
    assert s.ntpot_ms.p99 == pytest.approx(np.percentile(truth, 99), rel=1e-12)
    assert s.flat()["ntpot_p50_ms"] == pytest.approx(np.percentile(truth, 50), rel=1e-12)
    # beside TPOT: NTPOT carries the first token's wait too, so it is ≥ TPOT for every multi-token request
    tpot = np.array([(r.end_ns - r.first_token_ns) / MS / (r.output_tokens - 1) for r in records if r.output_tokens > 1])
    assert s.ntpot_ms.p50 > float(np.percentile(tpot, 50))


def test_ntpot_skips_requests_without_output_tokens_or_not_completed() -> None:
    r = _records(3)
    s = summarize([*r[:2], RequestRecord(index=9, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0, end_ns=5 * MS,
                                         status=Status.ERROR)])
    assert s.ntpot_ms.count == 2


def test_cooldown_by_requests_drops_those_sent_after_the_last_kept_completion() -> None:
    records = _records()
    share = 0.1
    found = cooldown(records, share, lambda rs: summarize(rs))
    assert found is not None and found.mode == "requests" and found.summary is not None
    ends = np.sort([r.end_ns for r in records])
    k = int(share * len(records))
    cut = ends[len(records) - k - 1]
    kept = [r for r in records if r.sent_ns <= cut]
    assert found.requests == len(kept) and found.dropped == len(records) - len(kept)
    e2e = np.array([(r.end_ns - r.sent_ns) / MS for r in kept])
    assert found.summary.e2e_ms.p99 == pytest.approx(np.percentile(e2e, 99), rel=1e-12)
    assert found.cut_s == pytest.approx((cut - min(r.sent_ns for r in records)) / 1e9)


def test_cooldown_by_duration_cuts_share_of_the_planned_duration() -> None:
    records = _records()
    found = cooldown(records, 0.25, lambda rs: summarize(rs), planned_duration_s=4.0)
    assert found is not None and found.mode == "duration"
    start = min(r.sent_ns for r in records)
    assert found.cut_s == pytest.approx(3.0)
    assert found.requests == sum(1 for r in records if r.sent_ns <= start + 3_000 * MS)


def test_cooldown_zero_share_keeps_everything_and_a_bad_share_is_refused() -> None:
    records = _records(50)
    found = cooldown(records, 0.0, lambda rs: summarize(rs))
    assert found is not None and found.dropped == 0 and found.requests == 50
    with pytest.raises(ValueError):
        cooldown_cut(np.array([0]), np.array([1]), 1.0)


def test_cooldown_needs_one_iteration() -> None:
    records = _records(40)
    two = records[:20] + [RequestRecord(index=r.index, iteration=2, warmup=False, scheduled_ns=r.scheduled_ns,
                                      sent_ns=r.sent_ns, first_token_ns=r.first_token_ns, end_ns=r.end_ns,
                                      chunk_ns=r.chunk_ns, output_tokens=r.output_tokens) for r in records[20:]]
    assert cooldown(two, 0.1, lambda rs: summarize(rs)) is None


def test_percentile_names_map_back_to_their_percentile() -> None:
    qs = np.round(np.arange(0.01, 100, 0.01), 2)
    assert all(quantile_of_name(percentile_name(float(q))) == float(q) for q in qs)
    assert [quantile_of_name(x) for x in ("mean", "max", "p", "p0", "p100", "p05", "pabc")] == [None] * 7


def test_an_slo_on_any_percentile_is_held_by_that_percentile_of_the_records() -> None:
    """`itl_p75_ms<=20` computes p75 without --percentiles and judges the run on it (numpy on the records)."""
    records = _records()
    ttft = np.array([(r.first_token_ns - r.sent_ns) / MS for r in records])
    p75 = float(np.percentile(ttft, 75))
    slos = [parse_slo(f"ttft_p75_ms<={p75 + 0.5}"), parse_slo(f"ttft_p75_ms<={p75 - 0.5}"), parse_slo("e2e_p9999_ms<=1e9")]
    s = summarize(records, slos)
    assert [r.met for r in s.slo] == [True, False, True]
    assert s.slo[0].observed == pytest.approx(p75, rel=1e-12) and s.slo[0].kind == "percentile"
    assert slos[0].quantile == 75.0 and slos[0].per_request_form() == parse_slo(f"ttft_ms<={p75 + 0.5}")
    with pytest.raises(ConfigError) as refused:
        parse_slo("ttft_p100_ms<=5")
    assert "any percentile" in (refused.value.hint or "")
