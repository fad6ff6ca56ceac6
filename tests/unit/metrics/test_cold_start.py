"""Cold-start figures from hand-built records: exact values, and the start phases adding up."""

from __future__ import annotations

from tokspeed.backends.inprocess import start_phases
from tokspeed.metrics.cold_start import add_cold_start, cold_start_figures
from tokspeed.records import RequestRecord, Status
from tokspeed.reports.cold_start_text import cold_start_lines

MS = 1_000_000


def rec(index: int, sent_ms: int, ttft_ms: int, e2e_ms: int, warmup: bool = False, ok: bool = True) -> RequestRecord:
    r = RequestRecord(index=index, iteration=0 if warmup else 1, warmup=warmup, scheduled_ns=sent_ms * MS, sent_ns=sent_ms * MS,
                      first_token_ns=(sent_ms + ttft_ms) * MS, end_ns=(sent_ms + e2e_ms) * MS)
    if not ok:
        r.status = Status.ERROR
    return r


def test_start_phases_add_up() -> None:
    p = start_phases(1.25, 0.05, 1.31)
    assert p == {"load_s": 1.25, "warmup_s": 0.05, "other_s": 0.01, "start_s": 1.31}
    assert start_phases(2.0, None, 2.5) == {"load_s": 2.0, "warmup_s": None, "other_s": 0.5, "start_s": 2.5}


def test_first_request_against_the_warm_ones() -> None:
    began = 1000
    records = [
        rec(3, 2600, 40, 80),  # measured, warm
        rec(1_000_000_000, 2500, 300, 400, warmup=True),  # the first one sent: cold
        rec(4, 2700, 20, 60),
        rec(5, 2800, 30, 70),
        rec(6, 2900, 999, 999, ok=False),  # failed: not a warm figure
    ]
    f = cold_start_figures(start_phases(1.2, 0.1, 1.4), records, began * MS)
    assert f["first_request"] == {"index": 1_000_000_000, "warmup": True, "ok": True, "ttft_s": 0.3, "e2e_s": 0.4, "after_start_s": 1.5}
    assert f["warm"] == {"requests": 3, "ttft_p50_s": 0.03, "e2e_p50_s": 0.07}
    assert f["first_token_after_s"] == 1.8 and f["first_ttft_excess_s"] == 0.27
    assert f["load_s"] == 1.2 and f["start_s"] == 1.4


def test_only_in_process_targets_get_figures() -> None:
    http = {"kind": "openai-http", "extra": {}}
    add_cold_start(http, [rec(0, 0, 1, 2)], 0)
    assert http == {"kind": "openai-http", "extra": {}} and cold_start_lines(http) == []
    served = {"kind": "hf", "extra": {"cold_start": start_phases(1.0, 0.1, 1.2)}}
    add_cold_start(served, [], None)
    cold = served["extra"]["cold_start"]
    assert cold["first_request"] is None and cold["warm"]["requests"] == 0 and cold["first_token_after_s"] is None
    line = "Cold start  model load 1.000 s + engine warm-up 0.100 s + imports and start-up 0.100 s = 1.200 s before the first request could be sent"
    assert cold_start_lines(served) == [line]
