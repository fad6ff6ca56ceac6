"""Markdown, CSV and HTML renderings of the saved v1 run; chart data reduction; output paths."""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from locations import RUN_V1
from tokspeed.cli.outputs import prepare_outputs
from tokspeed.errors import ConfigError
from tokspeed.metrics.samples import request_samples
from tokspeed.records import RequestRecord
from tokspeed.reports.csv_export import REQUEST_COLUMNS, requests_csv, summary_csv
from tokspeed.reports.markdown import run_markdown
from tokspeed.reports.plotdata import ecdf, histogram, subset
from tokspeed.reports.timeline import server_over_time, timeline
from tokspeed.results import RunResult, build_benchmark, load_run
from tokspeed.results.records import records_by_benchmark

MS = 1_000_000


@pytest.fixture(scope="module")
def saved() -> tuple[RunResult, list[RequestRecord]]:
    return load_run(RUN_V1)


def test_markdown_leads_with_headlines_then_metrics_and_warnings(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    result, _ = saved
    text = run_markdown(result)
    s = result.benchmarks[0].summary
    assert text.startswith("## tokspeed: tokspeed-sim")
    assert f"| TTFT p50 | **{s.ttft_ms.p50:.2f}** ms |" in text
    assert "| metric | unit | count | mean | p50 |" in text
    assert "### Warnings" in text and result.warnings[0] in text
    assert text.index("TTFT p50") < text.index("| metric |") < text.index("### Warnings")


def test_requests_csv_has_one_row_per_record_in_human_units(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    result, records = saved
    rows = list(csv.DictReader(io.StringIO(requests_csv(result, records))))
    assert len(rows) == len(records)
    assert list(rows[0]) == ["benchmark", *REQUEST_COLUMNS]
    first = next(r for r in records if not r.warmup)
    row = next(r for r in rows if r["warmup"] == "false")
    assert float(row["ttft_ms"]) == pytest.approx((first.first_token_ns - first.sent_ns) / MS)
    assert float(row["e2e_ms"]) == pytest.approx((first.end_ns - first.sent_ns) / MS)
    assert row["status"] == "ok" and row["error"] == "" and row["benchmark"] == result.benchmarks[0].name
    assert int(row["output_tokens"]) == first.output_tokens


def test_summary_csv_uses_flat_names(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    result, _ = saved
    rows = list(csv.DictReader(io.StringIO(summary_csv(result))))
    flat = result.benchmarks[0].summary.flat()
    assert len(rows) == 1 and rows[0]["benchmark"] == result.benchmarks[0].name
    assert float(rows[0]["ttft_p99_ms"]) == pytest.approx(flat["ttft_p99_ms"], rel=1e-6)
    assert rows[0]["ttft_count"] == str(int(flat["ttft_count"]))
    assert set(flat) <= set(rows[0])


def _requests(n: int, start: int, iteration: int = 1) -> list[RequestRecord]:
    return [
        RequestRecord(index=i, iteration=iteration, warmup=False, scheduled_ns=start + i * MS, sent_ns=start + i * MS,
                      first_token_ns=start + i * MS + 5 * MS, end_ns=start + i * MS + 10 * MS, chunk_ns=[start + i * MS + 5 * MS],
                      output_tokens=1)
        for i in range(n)
    ]


def test_records_are_split_by_benchmark_counts() -> None:
    warm = RequestRecord(index=99, iteration=0, warmup=True, scheduled_ns=0, sent_ns=0, end_ns=MS)
    a, b = _requests(3, 0), _requests(2, 10**9)
    benches = [build_benchmark("a", {}, a, []), build_benchmark("b", {}, b, [])]
    groups = records_by_benchmark(benches, [*a, warm, *b])
    assert groups == [a, [warm, *b]]
    assert records_by_benchmark(benches, a) is None  # counts do not add up: refuse to guess
    assert records_by_benchmark(benches[:1], a) == [a]


def test_ecdf_and_histogram_are_bounded_and_exact_at_the_ends() -> None:
    values = np.random.default_rng(0).lognormal(3, 0.5, 1_000_000)
    x, p = ecdf(values)
    assert x.size <= 1000 and x[0] == values.min() and x[-1] == values.max() and p[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(p) > 0)
    small_x, small_p = ecdf(np.array([3.0, 1.0, 2.0]))
    assert small_x.tolist() == [1.0, 2.0, 3.0] and small_p.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    hist = histogram(values)
    assert hist is not None and hist.counts.size <= 60 and hist.beyond == int((values > hist.hi).sum()) > 0
    assert hist.counts.sum() + hist.beyond == values.size
    assert subset(10, 20).tolist() == list(range(10)) and subset(10_000, 50).size == 50


def test_timeline_in_flight_and_tokens_by_hand() -> None:
    s = 1_000_000_000
    one = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0, first_token_ns=s // 2,
                        end_ns=2 * s, chunk_ns=[s // 2, 3 * s // 2], output_tokens=10)
    two = RequestRecord(index=1, iteration=1, warmup=False, scheduled_ns=s, sent_ns=s, first_token_ns=3 * s // 2,
                        end_ns=4 * s, chunk_ns=[3 * s // 2], output_tokens=4)
    tl = timeline([one, two], bin_s=1.0)
    assert tl is not None
    assert tl.in_flight.tolist() == pytest.approx([1.0, 2.0, 1.0, 1.0])
    assert tl.output_tokens_per_s.tolist() == pytest.approx([5.0, 9.0, 0.0, 0.0])
    assert timeline([one, two]).bin_s == 0.2  # a 4 s run gets finer bins


def test_server_running_and_waiting_over_time_by_hand() -> None:
    """The server's own gauges (telemetry.jsonl) on the timeline's bins: the mean of the samples in each bin."""
    s = 1_000_000_000
    t0 = 1_700_000_000 * s  # records and telemetry on the epoch scale, as in the files
    one = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=t0, sent_ns=t0, first_token_ns=t0 + s // 2,
                        end_ns=t0 + 3 * s, chunk_ns=[t0 + s // 2], output_tokens=1)
    tl = timeline([one], bin_s=1.0)
    assert tl is not None and tl.start_s.size == 3
    lines = [
        {"kind": "server", "ok": True, "t_ns": t0 + s // 4, "running": 4.0, "waiting": 2.0},
        {"kind": "server", "ok": True, "t_ns": t0 + 3 * s // 4, "running": 2.0, "waiting": 0.0},
        {"kind": "server", "ok": False, "t_ns": t0 + s + 1, "running": 9.0},  # a failed scrape: left out
        {"kind": "client", "t_ns": t0 + s + 2, "running": 9.0},
        {"kind": "server", "ok": True, "t_ns": t0 + 2 * s + 5, "running": 1.0, "waiting": None},
        {"kind": "server", "ok": True, "t_ns": t0 - 5, "running": 7.0, "waiting": 7.0},  # before the first send
    ]
    server = server_over_time([one], tl, lines)
    assert server is not None
    assert server.running[[0, 2]].tolist() == [3.0, 1.0] and np.isnan(server.running[1])
    assert server.waiting[0] == 1.0 and np.isnan(server.waiting[1:]).all()
    assert server_over_time([one], tl, lines[2:4]) is None  # no usable sample


def test_request_samples_keep_itl_owners(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    _, records = saved
    samples = request_samples(records)
    assert samples.count == 12 and samples.itl_ms.size == samples.itl_owner.size == 84
    assert np.allclose(samples.itl_mean_ms, [samples.itl_ms[samples.itl_owner == i].mean() for i in range(12)])


def test_html_is_self_contained_and_holds_the_headlines(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    pytest.importorskip("plotly")
    pytest.importorskip("jinja2")
    from tokspeed.reports.html import run_html

    result, records = saved
    page = run_html(result, records, "tests/data/run-v1")
    assert len(page) < 6_000_000
    assert not re.search(r"<script[^>]+src=", page) and "cdn" not in page.split("<script>", 1)[0].lower()
    assert "Plotly.newPlot" in page and f"{result.benchmarks[0].summary.ttft_ms.p50:.2f}" in page
    figures = orjson.loads(re.search(r'id="tokspeed-figures">(.*?)</script>', page, re.DOTALL).group(1))  # type: ignore[union-attr]
    assert len(figures) == 7  # 4 distributions, timeline, scatter, iterations
    for fid in figures:
        assert f'id="{fid}"' in page


def test_html_shows_the_diagnosis_and_each_points_telemetry(saved: tuple[RunResult, list[RequestRecord]]) -> None:
    pytest.importorskip("plotly")
    pytest.importorskip("jinja2")
    from tokspeed.reports.html import run_html
    from tokspeed.results.findings import Finding
    from tokspeed.telemetry.schema import ClientSummary, SeriesStats, ServerSummary, TelemetrySummary

    result, records = saved
    waiting = SeriesStats(mean=3.5, max=7.0, samples=10)
    telemetry = TelemetrySummary(
        interval_s=0.25, window_s=10.0, client=ClientSummary(cpu_seconds=1.0),
        server=ServerSummary(url="http://x/metrics", engine="vllm", scrapes=10, waiting=waiting),
    )
    bench = result.benchmarks[0].model_copy(update={"telemetry": telemetry})
    finding = Finding(rule="ttft_queueing", severity="warning", title="TTFT is mostly queueing",
                      evidence={"waiting_max": 7}, advice="lower the load or add replicas")
    shown = result.model_copy(update={"benchmarks": [bench, *result.benchmarks[1:]], "diagnosis": [finding]})
    page = run_html(shown, records, "tests/data/run-v1")
    assert "<h2>Diagnosis</h2>" in page and "ttft_queueing" in page and "lower the load or add replicas" in page
    assert "waiting_max" in page and "Server (vllm, 10 scrapes)" in page
    assert "<h2>Diagnosis</h2>" not in run_html(result, records, "tests/data/run-v1")  # nothing fired: no section


def test_a_failing_report_leaves_no_output_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report --html` that cannot render (here: plotly missing) exits 2 and writes nothing, not an empty file."""
    from tokspeed.cli import main

    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    out = tmp_path / "report.html"
    assert main(["report", str(RUN_V1), "--html", str(out)]) == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_existing_file_is_left_as_it_was_when_the_report_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tokspeed.cli import main

    monkeypatch.setitem(sys.modules, "jinja2", None)
    out = tmp_path / "report.html"
    out.write_text("yesterday's report")
    assert main(["report", str(RUN_V1), "--html", str(out)]) == 2
    assert out.read_text() == "yesterday's report"


def test_missing_html_dependencies_give_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokspeed.reports.html import require_html

    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    with pytest.raises(ConfigError) as err:
        require_html()
    assert "pip install -e ." in (err.value.hint or "")


def test_output_paths_are_checked_before_any_work(tmp_path: Path) -> None:
    outputs = prepare_outputs({"--csv": str(tmp_path / "new" / "dir" / "r.csv"), "--markdown": "-", "--html": None})
    # the folder is made and the path proven writable, but no empty file is left before the content exists
    assert (tmp_path / "new" / "dir").is_dir() and not (tmp_path / "new" / "dir" / "r.csv").exists()
    assert outputs["--markdown"].to_stdout and "--html" not in outputs
    outputs["--csv"].write("a,b\n")
    assert (tmp_path / "new" / "dir" / "r.csv").read_text() == "a,b\n"
    with pytest.raises(ConfigError, match="cannot all write to stdout"):
        prepare_outputs({"--csv": "-", "--markdown": "-"})
    with pytest.raises(ConfigError, match="is a directory"):
        prepare_outputs({"--html": str(tmp_path)})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write"):
        prepare_outputs({"--csv": str(blocker / "r.csv")})


def test_several_benchmarks_get_an_overview_sweep_curves_and_their_own_records() -> None:
    from tokspeed.reports.html_context import run_context

    a, b = _requests(3, 0), _requests(2, 10**9)
    benches = [
        build_benchmark("rate 1", {"kind": "rate", "rate": 1.0}, a, []),
        build_benchmark("rate 2", {"kind": "rate", "rate": 2.0}, b, []),
    ]
    ctx = run_context(RunResult(status="complete", started_at="now", benchmarks=benches), [*a, *b], "here")
    assert [row[0] for row in ctx["overview"]["rows"]] == ["rate 1", "rate 2"]
    assert ctx["sweep"][0]["title"] == "Throughput vs latency"
    figures = orjson.loads(ctx["figures_json"])
    ttft = [c["id"] for bench in ctx["benchmarks"] for c in bench["charts"] if c["title"] == "TTFT distribution"]
    assert [sum(figures[fid]["data"][0]["y"]) for fid in ttft] == [3, 2]  # each benchmark's own requests
    unattributable = run_context(RunResult(status="complete", started_at="now", benchmarks=benches), a, "here")
    assert all(bench["note"] for bench in unattributable["benchmarks"])


def test_itl_owners_match_per_record_values_with_and_without_chunk_tokens() -> None:
    from tokspeed.metrics.request import itl_values_ns

    def rec(i: int, chunks: list[int], tokens: list[int] | None, out: int) -> RequestRecord:
        return RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0, first_token_ns=chunks[0],
                             end_ns=chunks[-1], chunk_ns=chunks, chunk_tokens=tokens, output_tokens=out)

    records = [
        rec(0, [10 * MS, 12 * MS, 15 * MS, 19 * MS], [2, 0, 3, 1], 6),  # a zero-token chunk joins the next gap
        rec(1, [5 * MS], None, 1),  # one chunk: no ITL
        rec(2, [5 * MS, 9 * MS, 10 * MS], None, 6),  # tokens unknown per chunk: spread evenly
        rec(3, [0, 0, 4 * MS], [0, 0, 5], 5),  # only one chunk carries tokens: no ITL
    ]
    samples = request_samples(records)
    for i, r in enumerate(records):
        expected = itl_values_ns(r) / MS
        assert samples.itl_ms[samples.itl_owner == i] == pytest.approx(expected)
    assert np.isnan(samples.itl_mean_ms[1]) and samples.itl_mean_ms[0] == pytest.approx((5 / 3 * 3 + 4) / 4)
