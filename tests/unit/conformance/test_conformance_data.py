"""The conformance scenarios are consistent data, and docs/conformance.md is generated from them."""

from __future__ import annotations

import pytest

from locations import DOCS
from tokspeed.conformance import SCENARIOS, Expected, compare
from tokspeed.conformance.checker import DEFAULT_TOLERANCE_MS
from tokspeed.conformance.doc import BEGIN, END, scenarios_markdown

DOC = DOCS / "conformance.md"


def test_the_doc_holds_the_generated_tables() -> None:
    text = DOC.read_text(encoding="utf-8")
    generated = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert generated == scenarios_markdown(), "regenerate: python -m tokspeed.conformance.doc"


def test_names_are_unique_and_writes_in_time_order() -> None:
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
    for s in SCENARIOS:
        times = [w.at_ms for w in s.writes]
        assert times == sorted(times), s.name


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_expected_values_agree_with_each_other(s: object) -> None:
    e: Expected = s.expected  # type: ignore[attr-defined]
    if e.tpot_ms is not None:  # TPOT = (E2E − TTFT) / (n − 1)
        assert e.e2e_ms is not None and e.ttft_ms is not None and e.output_tokens is not None
        assert e.tpot_ms == pytest.approx((e.e2e_ms - e.ttft_ms) / (e.output_tokens - 1))
    if e.chunk_tokens is not None:
        assert sum(e.chunk_tokens) == e.output_tokens
        assert len(e.itl_ms) == sum(e.chunk_tokens[1:])
    if e.ttft_ms is not None:  # no token before the script's first write
        assert e.ttft_ms >= s.writes[0].at_ms  # type: ignore[attr-defined]


def _values(e: Expected) -> dict[str, object]:
    return {f: getattr(e, f) for f in Expected.__dataclass_fields__}


def test_compare_accepts_late_latencies_within_t_and_rejects_early_ones() -> None:
    e = Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(50, 50), tpot_ms=55, e2e_ms=210, output_tokens=3,
                 output_tokens_source="usage", finish_reason="stop")
    got = _values(e) | {"ttft_ms": 100 + DEFAULT_TOLERANCE_MS, "itl_ms": (50 - DEFAULT_TOLERANCE_MS, 50.0)}
    assert all(c.ok for c in compare(e, got))
    early = compare(e, got | {"ttft_ms": 99.9})
    assert [c.metric for c in early if not c.ok] == ["ttft_ms"]
    late = compare(e, got | {"e2e_ms": 210 + DEFAULT_TOLERANCE_MS + 0.01})
    assert [c.metric for c in late if not c.ok] == ["e2e_ms"]


def test_compare_wants_none_where_a_metric_does_not_apply() -> None:
    e = Expected(status="error", error_kind="http", http_status=500)
    got = _values(e) | {"e2e_ms": 0.0}
    assert [c.metric for c in compare(e, got) if not c.ok] == ["e2e_ms"]


def test_itl_tolerance_is_divided_by_the_chunks_tokens() -> None:
    e = Expected(ttft_ms=100, ttfa_ms=100, itl_ms=(100 / 3,) * 3, tpot_ms=50, e2e_ms=200, output_tokens=4,
                 output_tokens_source="usage", chunk_tokens=(1, 3))
    ok = _values(e) | {"itl_ms": (100 / 3 + 4.9,) * 3}
    assert all(c.ok for c in compare(e, ok))
    bad = _values(e) | {"itl_ms": (100 / 3 + 5.1,) * 3}
    assert {c.metric for c in compare(e, bad) if not c.ok} == {"itl_ms[0]", "itl_ms[1]", "itl_ms[2]"}
