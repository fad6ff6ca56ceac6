"""The metric table is the one place a distribution is declared: everything that lists metrics agrees with it."""

from __future__ import annotations

import pytest

from tokspeed.errors import ConfigError
from tokspeed.metrics.compat import VIEWS
from tokspeed.metrics.schema import Summary
from tokspeed.metrics.slo import parse_slo
from tokspeed.metrics.summary import summarize
from tokspeed.metrics.table import METRICS, WITH_INTERVALS, peer_metric
from tokspeed.records import RequestRecord, Status
from tokspeed.reports.html_context import DISTRIBUTIONS as HTML_DISTRIBUTIONS
from tokspeed.reports.summary_text import CI_ROWS, ROWS
from tokspeed.stats.distribution import Distribution

MS = 1_000_000


def _record(i: int, *, status: Status = Status.OK, sent: int = 0) -> RequestRecord:
    """A completed streamed request: 20 ms + i to the first token (after 5 ms of reasoning), 4 tokens 10 ms apart."""
    start = i * 100 * MS
    r = RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=start - 2 * MS)
    r.sent_ns = start
    r.connect_duration_ns = 3 * MS
    r.status = status
    r.input_tokens, r.output_tokens, r.max_tokens = 16, 4, 4
    if status is Status.OK:
        first = start + (20 + i) * MS
        r.first_token_ns, r.first_content_ns = first, first + 5 * MS
        r.chunk_ns = [first + k * 10 * MS for k in range(4)]
        r.chunk_tokens = [1, 1, 1, 1]
        r.end_ns = first + 31 * MS
    else:
        r.end_ns = start + 7 * MS
    return r


def test_the_summary_holds_one_distribution_per_table_row_in_its_order() -> None:
    fields = [name for name, f in Summary.model_fields.items() if f.annotation in (Distribution, "Distribution")]
    assert fields == [m.field for m in METRICS]


def test_flat_names_and_report_rows_are_the_tables() -> None:
    flat = Summary().flat()
    for m in METRICS:
        assert (f"{m.name}_p99_{m.unit}" if m.unit else f"{m.name}_p99") in flat, m.field
        assert (f"{m.name}_count") in flat, m.field
    assert ROWS == tuple((m.field, m.label, m.display_unit) for m in METRICS)
    assert [field for field, _ in CI_ROWS] == ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"]
    assert [family for family, _, _ in HTML_DISTRIBUTIONS] == ["ttft", "itl", "tpot", "e2e"]
    assert [per for _, _, per in HTML_DISTRIBUTIONS] == ["requests", "tokens", "requests", "requests"]


def test_exactly_the_tables_per_request_metrics_are_slo_metrics() -> None:
    for m in METRICS:
        if m.slo is None:
            with pytest.raises(ConfigError):
                parse_slo(f"{m.name}_{m.unit}<=5")
        else:
            assert parse_slo(f"{m.name}_{m.unit}<=5").kind == "per_request", m.name
            assert parse_slo(f"{m.name}_p99_{m.unit}<=5").kind == "percentile", m.name


def test_the_summary_fills_each_metric_over_the_requests_the_table_names() -> None:
    """3 completed requests and 1 errored: `completed` rows count 3, `measured` rows 4, ITL 3 per request."""
    records = [_record(i) for i in range(3)] + [_record(3, status=Status.ERROR)]
    s = summarize(records, target_rate=10.0)
    counts = {m.field: getattr(s, m.field).count for m in METRICS}
    assert counts == {m.field: {"completed": 3, "measured": 4, "tokens": 9, "chunks": 9}[m.over] for m in METRICS}
    assert s.ttft_ms.mean == pytest.approx(21) and s.ttfa_ms.mean == pytest.approx(26)
    assert s.lateness_ms.mean == pytest.approx(2) and s.connect_ms.mean == pytest.approx(3)
    assert s.ttft_from_scheduled_ms.mean == pytest.approx(23) and s.decode_tokens_per_s.mean == pytest.approx(3 / 0.031)
    assert set(s.percentile_ci) == {m.field for m in WITH_INTERVALS}
    closed = summarize(records)  # no schedule: the open-loop rows stay empty
    assert {m.field for m in METRICS if not getattr(closed, m.field).count} == {m.field for m in METRICS if m.open_loop}


def test_a_per_request_slo_judges_each_requests_value_or_its_worst_token() -> None:
    """ITL's per-request value is the request's largest ITL (10 ms here); TTFT's its own (20, 21, 22 ms)."""
    records = [_record(i) for i in range(3)]
    s = summarize(records, slos=[parse_slo("itl_ms<=10"), parse_slo("ttft_ms<=21")])
    assert [(r.slo, r.observed) for r in s.slo] == [("itl_ms<=10", 1.0), ("ttft_ms<=21", pytest.approx(2 / 3))]


def test_every_peer_name_the_views_print_is_paired_in_the_table() -> None:
    records = [_record(i) for i in range(3)]
    for tool, view in VIEWS.items():
        shown = [m for m in view(records).metrics if m.unit == "ms"]
        assert shown and all(m.tokspeed_metric == peer_metric(tool, m.name).field for m in shown)
        paired = {name for m in METRICS for name in m.peers.get(tool, ())}
        assert paired == {m.name for m in shown}, tool
    with pytest.raises(KeyError):
        peer_metric("vllm", "no such metric")
