"""A saved run as GitHub-flavoured markdown, to paste into a PR or an issue.

Pure: a RunResult in, a string out: a title line, per benchmark the headline
table and the metric table, then SLO verdicts, warnings and the diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokspeed.reports.diagnosis_text import where
from tokspeed.reports.format import fmt
from tokspeed.reports.headline import headlines
from tokspeed.reports.summary_text import ROWS, STATS, header_lines
from tokspeed.results import Benchmark, RunResult
from tokspeed.results.findings import Finding
from tokspeed.stats.distribution import Distribution


def run_markdown(result: RunResult, title: str | None = None) -> str:
    out = [f"## {title or _title(result)}", ""]
    header = [f"- {line.split(None, 1)[0]}: {_squash(line.split(None, 1)[1])}" for line in header_lines(result) if " " in line]
    out += [*header, ""] if header else []
    for bench in result.benchmarks:
        out += _benchmark(bench, several=len(result.benchmarks) > 1)
    if result.warnings:
        out += ["### Warnings", ""] + [f"- ⚠️ {w}" for w in result.warnings] + [""]
    if result.diagnosis:
        out += ["### Diagnosis", ""] + [_finding(f, result) for f in result.diagnosis] + [""]
    if result.status != "complete":
        out += [f"**Run status: {result.status}**" + (f" ({result.error})" if result.error else ""), ""]
    return "\n".join(out)


def _finding(f: Finding, result: RunResult) -> str:
    point = where(f, result)
    return f"- **{f.severity}** `{f.rule}`{f' ({point})' if point else ''}: {f.title}. *Change:* {f.advice}"


def _title(result: RunResult) -> str:
    model = result.target.get("model") or "unknown model"
    return f"tokspeed: {model} · {result.started_at}"


def _squash(text: str) -> str:
    return " ".join(text.split())


def _benchmark(bench: Benchmark, several: bool) -> list[str]:
    s = bench.summary
    out = [f"### {bench.name}", ""] if several else []
    out += _table(("", "value", ""), [(h.label, f"**{h.value}** {h.unit}".strip(), h.detail) for h in headlines(s)], ("---", "---:", "---"))
    out.append("")
    rows = []
    for field, label, unit in ROWS:
        dist: Distribution = getattr(s, field)
        if dist.count:
            rows.append((label, unit, str(dist.count), *(fmt(getattr(dist, stat)) for stat in STATS)))
    headers = ("metric", "unit", "count", *("p99.9" if st == "p999" else st for st in STATS))
    out += _table(headers, rows, ("---", "---", *("---:",) * (len(headers) - 2)))
    out.append("")
    a = bench.across_iterations
    if a is not None and (tps := a.metrics.get("output_tokens_per_s")) is not None and tps.mean is not None:
        spread = f"CV {fmt((tps.cv or 0) * 100, 1)}%, 95% CI {fmt(tps.ci95_low)}–{fmt(tps.ci95_high)}"
        out += [f"Across {a.n} iterations: {fmt(tps.mean)} ± {fmt(tps.stdev)} output tok/s ({spread}): **{a.verdict}**", ""]
    if s.slo:
        out += [f"- {'✅ PASS' if v.met else '❌ FAIL'} `{v.slo}` (observed {_observed(v.kind, v.observed)})" for v in s.slo]
        out.append("")
    return out


def _observed(kind: str, value: float | None) -> str:
    if kind == "per_request":
        return f"{(value or 0):.1%} of requests"
    return fmt(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return lines
