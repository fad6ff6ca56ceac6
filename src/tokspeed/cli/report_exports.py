"""The export side of `tokspeed report` and `tokspeed run --html`: check first, write last.

`ReportPlan.prepare` validates every destination and `--fail-if` expression
before the run is loaded (or, for `run --html`, before the benchmark starts);
`ReportPlan.finish` renders and writes each export, then judges the gates.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tokspeed.cli.outputs import Output, prepare_outputs
from tokspeed.compare.gates import Gate, GateResult, judge, parse_gate
from tokspeed.metrics.schema import Summary
from tokspeed.records import RequestRecord
from tokspeed.results import RunResult

EXIT_OK, EXIT_GATE = 0, 3
LABELS = {"--html": "HTML report", "--markdown": "markdown", "--csv": "per-request CSV", "--csv-summary": "summary CSV"}


def known_metrics() -> list[str]:
    """The names `--fail-if` accepts: every `Summary.flat()` name."""
    return list(Summary().flat())


@dataclass(frozen=True)
class ReportPlan:
    outputs: dict[str, Output]
    gates: list[Gate] = field(default_factory=list)

    @classmethod
    def prepare(
        cls, requested: dict[str, str | None], fail_if: Sequence[str], stdout_taken: bool = False, stdout_ok: bool = True
    ) -> ReportPlan:
        """Check destinations (`stdout_taken`: --json already prints to stdout) and parse the gates."""
        if stdout_taken:
            requested = {**requested, "--json": "-"}
        outputs = prepare_outputs(requested, stdout_ok=stdout_ok)
        outputs.pop("--json", None)
        if "--html" in outputs:
            from tokspeed.reports.html import require_html

            require_html()
        gates = [parse_gate(text, known_metrics(), allow_relative=False) for text in fail_if]
        return cls(outputs=outputs, gates=gates)

    @property
    def exporting(self) -> bool:
        return bool(self.outputs)

    @property
    def uses_stdout(self) -> bool:
        return any(o.to_stdout for o in self.outputs.values())

    def finish(self, result: RunResult, records: Sequence[RequestRecord], source: Path, stdout_taken: bool = False) -> int:
        """Write every export, then judge the gates; 3 when one is breached."""
        info = sys.stderr if self.uses_stdout or stdout_taken else sys.stdout
        for flag, output in self.outputs.items():
            output.write(_renderer(flag)(result, records, str(source)))
            if not output.to_stdout:
                print(f"Wrote {LABELS[flag]}: {output.path}", file=sys.stderr)
        if not self.gates:
            return EXIT_OK
        results = judge_run(result, self.gates)
        print_gates(results, info)
        return EXIT_GATE if any(r.breached for r in results) else EXIT_OK


def judge_run(result: RunResult, gates: Sequence[Gate]) -> list[GateResult]:
    """Absolute gates on every benchmark of one run."""
    out = []
    for bench in result.benchmarks:
        flat = bench.summary.flat()
        out += [judge(g, flat.get(g.metric), None, "", bench.name) for g in gates]
    if not result.benchmarks:
        out += [judge(g, None, None, "", "no benchmark") for g in gates]
    return out


def print_gates(results: Sequence[GateResult], stream: TextIO) -> None:
    from tokspeed.reports.compare_text import gate_lines

    for line in gate_lines(results):
        print(line, file=stream)
    failed = [r for r in results if r.breached]
    if failed:
        print(f"{len(failed)} of {len(results)} gates failed: {', '.join(dict.fromkeys(r.gate.text for r in failed))}", file=stream)
    else:
        print(f"All {len(results)} gates passed", file=stream)


def _renderer(flag: str) -> Callable[[RunResult, Sequence[RequestRecord], str], str]:
    def html(result: RunResult, records: Sequence[RequestRecord], source: str) -> str:
        from tokspeed.reports.html import run_html

        return run_html(result, records, source, telemetry_lines(Path(source)))

    def markdown(result: RunResult, records: Sequence[RequestRecord], source: str) -> str:
        from tokspeed.reports.markdown import run_markdown

        return run_markdown(result)

    def per_request(result: RunResult, records: Sequence[RequestRecord], source: str) -> str:
        from tokspeed.reports.csv_export import requests_csv

        return requests_csv(result, records)

    def summary(result: RunResult, records: Sequence[RequestRecord], source: str) -> str:
        from tokspeed.reports.csv_export import summary_csv

        return summary_csv(result)

    return {"--html": html, "--markdown": markdown, "--csv": per_request, "--csv-summary": summary}[flag]


def prepare_run_html(path: Path | None) -> ReportPlan | None:
    """For `tokspeed run --html FILE`: check the path and the dependencies before the run."""
    if path is None:
        return None
    return ReportPlan.prepare({"--html": str(path)}, (), stdout_ok=False)


def write_run_html(plan: ReportPlan | None, result: RunResult, records: Sequence[RequestRecord], directory: Path) -> None:
    """Write the run's HTML report at the end of `tokspeed run` (complete or interrupted)."""
    if plan is not None:
        plan.finish(result, records, directory)


def telemetry_lines(directory: Path) -> list[dict[str, Any]]:
    """The server samples of a results directory's telemetry.jsonl (none when it has none)."""
    from tokspeed.telemetry.log import read_lines
    from tokspeed.telemetry.schema import TELEMETRY_FILE

    return [line for line in read_lines(directory / TELEMETRY_FILE) if line.get("kind") == "server"]
