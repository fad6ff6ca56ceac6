"""Render diagnosis findings: a short form under a run's summary, the full form for `tokspeed diagnose`.

Pure: findings (and the result they are about) in, rich renderables or a JSON-ready dict out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from tokspeed.results import RunResult
from tokspeed.results.findings import Finding

DIAGNOSIS_SCHEMA = "tokspeed.diagnosis/1"
STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
SEVERITIES = ("critical", "warning", "info")


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}


def where(f: Finding, result: RunResult) -> str:
    """The load point a finding is about, named; empty for the run or a single-point run."""
    if f.benchmark is None or len(result.benchmarks) <= 1 or f.benchmark >= len(result.benchmarks):
        return ""
    return result.benchmarks[f.benchmark].name


def short_lines(result: RunResult, directory: Path | None = None) -> list[Text]:
    """One line per (rule, severity), the first finding's title, how many more points share it; then a hint."""
    findings = result.diagnosis
    if not findings:
        return []
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.rule, f.severity), []).append(f)
    lines = [Text("Diagnosis", style="bold")]
    for (rule, severity), group in groups.items():
        first = group[0]
        point = where(first, result)
        more = f" (and {len(group) - 1} more)" if len(group) > 1 else ""
        line = Text(f"  {severity.upper() if severity == 'critical' else severity:<8} ", style=STYLES.get(severity, ""))
        line.append(f"{rule}{' · ' + point if point else ''}: {first.title}{more}")
        lines.append(line)
    target = str(directory) if directory is not None else "DIR"
    lines.append(Text(f"  evidence and what to change: tokspeed diagnose {target}", style="dim"))
    return lines


def render_findings(findings: Sequence[Finding], result: RunResult, directory: Path) -> RenderableType:
    """The full form: a count line, then each finding with its evidence and advice."""
    c = counts(findings)
    points = len(result.benchmarks)
    head = (
        f"tokspeed diagnose {directory}: {c['critical']} critical, {_plural(c['warning'], 'warning')}, {c['info']} info "
        f"(run {result.status}, {points} load point{'s' if points != 1 else ''})"
    )
    parts: list[RenderableType] = [Text(head, style="bold")]
    if not findings:
        parts.append(Text("No findings: nothing in this run looks suspect to the rules tokspeed knows."))
    for f in findings:
        parts += [Text("")] + _finding(f, result)
    return Group(*parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _finding(f: Finding, result: RunResult) -> list[RenderableType]:
    point = where(f, result)
    head = Text(f"{f.severity.upper():<8} ", style=STYLES.get(f.severity, ""))
    head.append(f"{f.rule}" + (f"  [{point}]" if point else ""), style="bold")
    lines: list[RenderableType] = [head, Text(f"  {f.title}")]
    evidence = evidence_text(f.evidence)
    if evidence:
        lines.append(Text(f"  evidence: {evidence}", style="dim"))
    lines.append(Text(f"  change:   {f.advice}"))
    return lines


def evidence_text(evidence: dict[str, Any]) -> str:
    return " · ".join(f"{k}={_value(v)}" for k, v in evidence.items() if v is not None)


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def findings_json(findings: Sequence[Finding], result: RunResult, directory: Path) -> dict[str, Any]:
    """`tokspeed diagnose --json`: schema tokspeed.diagnosis/1."""
    return {
        "schema": DIAGNOSIS_SCHEMA,
        "directory": str(directory),
        "status": result.status,
        "counts": counts(findings),
        "findings": [{**f.model_dump(mode="json"), "point": where(f, result) or None} for f in findings],
    }
