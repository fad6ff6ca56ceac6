"""Running the rules: ordering, a crashing rule, the runner storing findings, the renderers and `tokspeed diagnose`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson
import pytest

from diagnosis_builders import bench, failed, many, result
from tokspeed.backends.base import TargetInfo
from tokspeed.cli import main
from tokspeed.config import RunConfig
from tokspeed.diagnosis import rules
from tokspeed.diagnosis.rules import diagnose, diagnose_point, diagnose_result, ordered
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec
from tokspeed.reports.diagnosis_text import findings_json, render_findings, short_lines
from tokspeed.results import ResultsWriter, load_run
from tokspeed.results.findings import Finding
from tokspeed.runner.run import execute_run


def finding(severity: str, benchmark: int | None = None, rule: str = "r") -> Finding:
    return Finding(rule=rule, severity=severity, title="t", advice="a", benchmark=benchmark)  # type: ignore[arg-type]


def test_ordered_puts_critical_first_then_the_run_before_its_points() -> None:
    found = ordered([finding("info"), finding("warning", 1), finding("critical", 2), finding("warning", None)])
    assert [(f.severity, f.benchmark) for f in found] == [("critical", 2), ("warning", None), ("warning", 1), ("info", None)]


def test_a_crashing_rule_becomes_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> list[Finding]:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(rules, "POINT_RULES", (("broken", broken), *rules.POINT_RULES))
    records = [*many(3), failed(9, ErrorKind.CONNECT, "refused")]
    found = diagnose_point(0, bench(records), records, {})
    assert found[0].rule == rules.FAILED_RULE and "broken" in found[0].title and "boom" in found[0].title
    assert [f.rule for f in found[1:]] == ["errors"]  # the other rules still ran


def test_diagnose_is_the_point_rules_plus_the_result_rules() -> None:
    records = [*many(40), *(failed(100 + i, ErrorKind.HTTP, "HTTP 503: busy", 503) for i in range(5))]
    res = result(bench(records))
    offline = diagnose(res, records)
    assert offline == ordered([*diagnose_point(0, res.benchmarks[0], records, {}), *diagnose_result(res)])
    assert [f.rule for f in offline] == ["errors", "too_few_samples"]


# the runner -------------------------------------------------------------------------------------
class Workload:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"prompt {index}", max_tokens=8)

    def describe(self) -> dict[str, object]:
        return {"kind": "fake"}


class ShortBackend:
    """Answers at once with 2 of the 8 tokens asked, finish_reason stop: an early stop."""

    async def start(self) -> TargetInfo:
        return TargetInfo(kind="fake", url=None, model="m", api="chat", stream=True, include_usage=True)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = perf_counter_ns()
        await asyncio.sleep(0)
        record.chunk_ns = [perf_counter_ns(), perf_counter_ns() + 1000]
        record.first_token_ns = record.first_content_ns = record.chunk_ns[0]
        record.end_ns = record.chunk_ns[-1]
        record.output_tokens, record.max_tokens, record.finish_reason = 2, spec.max_tokens, "stop"

    async def close(self) -> None:
        pass


async def test_the_runner_stores_findings_in_run_json(tmp_path: Path) -> None:
    cfg = RunConfig(profile="concurrency", concurrency=2, requests=20, warmup=0)
    outcome = await execute_run(cfg, ShortBackend(), Workload(), tmp_path / "run")
    rules_fired = {f.rule for f in outcome.result.diagnosis}
    assert {"output_length", "too_few_samples"} <= rules_fired
    saved, records = load_run(tmp_path / "run")
    assert saved.diagnosis == outcome.result.diagnosis
    assert diagnose(saved, records) == saved.diagnosis  # offline and at the end of the run agree


async def test_a_diagnosis_crash_never_loses_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tokspeed.runner.run as run_module

    def broken(*_: Any, **__: Any) -> list[Finding]:
        raise RuntimeError("diagnosis bug")

    monkeypatch.setattr(run_module, "diagnose_point", broken)
    monkeypatch.setattr(run_module, "diagnose_result", broken)
    cfg = RunConfig(profile="concurrency", concurrency=2, requests=10, warmup=0)
    outcome = await execute_run(cfg, ShortBackend(), Workload(), tmp_path / "run")
    saved, records = load_run(tmp_path / "run")
    assert saved.status == "complete" and saved.benchmarks[0].summary.requests.completed == 10 and len(records) == 10
    assert saved.diagnosis == []
    assert sum("diagnosis" in w and "diagnosis bug" in w for w in saved.warnings) == 2
    assert outcome.result.status == "complete"


# rendering -------------------------------------------------------------------------------------------
def test_short_lines_group_a_rule_over_several_points() -> None:
    res = result(bench(many(5), name="c1"), bench(many(5), name="c2"))
    res.diagnosis = diagnose_result(res)
    text = "\n".join(line.plain for line in short_lines(res, Path("runs/x")))
    assert "too_few_samples · c1: only 5 completed requests" in text and "(and 1 more)" in text
    assert "tokspeed diagnose runs/x" in text
    assert short_lines(result(bench(many(5)))) == []  # nothing stored, nothing printed


def test_full_form_and_json() -> None:
    records = [*many(10), *(failed(100 + i, ErrorKind.HTTP, "HTTP 503: busy", 503) for i in range(2))]
    res = result(bench(records))
    found = diagnose(res, records)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_findings(found, res, Path("runs/x")))
    text = console.export_text()
    assert "1 critical, 1 warning, 0 info" in text and "evidence: count=2" in text and "change:" in text
    data = findings_json(found, res, Path("runs/x"))
    assert data["schema"] == "tokspeed.diagnosis/1" and data["counts"] == {"critical": 1, "warning": 1, "info": 0}
    assert data["findings"][0]["rule"] == "errors" and data["findings"][0]["evidence"]["http_status"] == 503


def test_markdown_lists_the_findings() -> None:
    from tokspeed.reports.markdown import run_markdown

    res = result(bench(many(5), name="c1"), bench(many(5), name="c2"))
    res.diagnosis = diagnose_result(res)
    text = run_markdown(res)
    assert "### Diagnosis" in text and "- **warning** `too_few_samples` (c2): only 5 completed" in text
    assert "### Diagnosis" not in run_markdown(result(bench(many(5))))


# the CLI ---------------------------------------------------------------------------------------------------
def saved_run(directory: Path, records: list[RequestRecord]) -> Path:
    writer = ResultsWriter(directory, epoch_offset_ns=0)
    for r in records:
        writer.append(r)
    writer.write_run(result(bench(records)).model_copy(update={"status": "complete"}))
    writer.close()
    return directory


def test_diagnose_command_json_and_fail_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = saved_run(tmp_path / "r", [*many(30), failed(99, ErrorKind.TIMEOUT, "no complete response within 30 s")])
    assert main(["diagnose", str(run), "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert {f["rule"] for f in data["findings"]} == {"errors", "too_few_samples"}
    assert data["counts"]["critical"] == 0 and data["counts"]["warning"] == 2  # 1 timeout of 31 < 5%
    assert main(["diagnose", str(run), "--fail-on", "critical"]) == 0
    assert main(["diagnose", str(run), "--fail-on", "warning"]) == 3
    out = capsys.readouterr().out
    assert "WARNING" in out and "--timeout" in out


def test_diagnose_command_on_a_clean_run_and_a_bad_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = saved_run(tmp_path / "r", many(120))
    assert main(["diagnose", str(run), "--fail-on", "warning"]) == 0
    assert "No findings" in capsys.readouterr().out
    assert main(["diagnose", str(tmp_path / "missing")]) == 1
    assert main(["diagnose", str(run), "--fail-on", "bogus"]) == 2


def test_fail_on_critical_fails_on_19_percent_over_9_causes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24: 19% of requests failing over 9 causes gave only warnings, and `--fail-on critical` exited 0."""
    bad = [failed(200 + 10 * c + k, ErrorKind.HTTP, f"HTTP {500 + c}: cause {c}", 500 + c)
           for c in range(9) for k in range(3 if c == 0 else 2)]
    run = saved_run(tmp_path / "r", [*many(81), *bad])
    assert main(["diagnose", str(run), "--fail-on", "critical"]) == 3
    assert "19 of 100 requests (19.0%) failed, over 9 causes" in capsys.readouterr().out
