"""Present a `Comparison` (and gate results) as console tables and as GitHub markdown.

Pure: a Comparison in, rich renderables or a markdown string out. Both show the
same rows: per metric the base and other values, the delta, the ratio with its
95% interval, the p-value and the verdict; then the hyperfine-style sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.compare.comparison import (
    BenchmarkComparison,
    Comparison,
    MetricComparison,
    RunComparison,
)
from tokspeed.compare.gates import GateResult
from tokspeed.compare.verdicts import format_p
from tokspeed.reports.format import fmt

HEADERS = ("metric", "{base}", "{other}", "Δ", "ratio (95% CI)", "adj. p", "verdict")
TEXT_COLUMNS = (0, 6)
SHORT = {"no significant difference": "n.s.", "untested": "—", "inconclusive — repeat with --iterations": "inconclusive"}
LEGEND = ("ratio = other / base · adj. p = p adjusted for the benchmark's several metrics (Benjamini–Hochberg) · "
          "n.s. = no significant difference · inconclusive = within single runs' run-to-run noise · — = not tested")
_STYLE = {"better": "bold green", "worse": "bold red", "negligible": "dim", "no significant difference": "", "untested": "dim",
          "inconclusive": "yellow"}


def value(m: MetricComparison, v: float | None) -> str:
    if v is None:
        return "—"
    if m.metric == "error_rate":
        return f"{v:.2%}"
    return fmt(v)


def delta(m: MetricComparison) -> str:
    if m.delta is None:
        return "—"
    if m.metric == "error_rate":
        return f"{m.delta * 100:+.2f} pp"
    return f"{'+' if m.delta > 0 else ''}{fmt(m.delta)}"


def ratio(m: MetricComparison) -> str:
    if m.ratio is None:
        return "—"
    text = f"{m.ratio:.3f}"
    if m.ratio_ci95 is not None:
        text += f" ({m.ratio_ci95[0]:.3f}–{m.ratio_ci95[1]:.3f})"
    return text


def row(m: MetricComparison) -> list[str]:
    shown = m.p_adjusted if m.p_adjusted is not None else m.p_value
    p = "—" if shown is None else format_p(shown).removeprefix("p ").removeprefix("= ")
    label = f"{m.label} ({m.unit})" if m.unit else m.label
    return [label, value(m, m.base), value(m, m.other), delta(m), ratio(m), p, SHORT.get(m.word, m.word)]


def bench_title(c: Comparison, run: RunComparison, b: BenchmarkComparison) -> str:
    name = b.other_name if b.other_name == b.base_name else f"{b.other_name} vs {b.base_name}"
    return f"{run.run.label} vs {c.base.label} · {name} ({b.other_requests} vs {b.base_requests} completed requests)"


def highlights(b: BenchmarkComparison) -> list[str]:
    """The sentences worth reading: real differences first, then what could not be tested."""
    decided = [m.sentence for m in b.metrics if m.verdict in ("better", "worse")]
    untested = [m.sentence for m in b.metrics if m.verdict in ("inconclusive", "untested")]
    quiet = [m.label for m in b.metrics if m.verdict in ("no significant difference", "negligible")]
    lines = decided + untested
    if quiet:
        lines.append(f"no significant (or only negligible) difference: {', '.join(quiet)}")
    return lines


def difference_warning(c: Comparison, run: RunComparison) -> str:
    return f"{run.run.label} and {c.base.label} may not be like for like (workload or load differ); check before trusting the verdicts:"


def render_comparison(c: Comparison) -> RenderableType:
    parts: list[RenderableType] = [Text(f"Baseline: {c.base.label} ({c.base.path})", style="bold")]
    for run in c.runs:
        if run.differences:
            parts.append(Text(f"WARNING: {difference_warning(c, run)}", style="bold red"))
            parts += [Text(f"  • {d}", style="red") for d in run.differences]
        for b in run.benchmarks:
            parts.append(_table(c, run, b))
            parts += [Text(line, style=_line_style(line, b)) for line in highlights(b)]
            parts.append(Text(""))
    parts.append(Text(LEGEND, style="dim"))
    return Group(*parts)


def _line_style(line: str, b: BenchmarkComparison) -> str:
    for m in b.metrics:
        if m.sentence == line:
            return _STYLE[m.verdict]
    return "dim"


def _table(c: Comparison, run: RunComparison, b: BenchmarkComparison) -> Table:
    table = Table(title=bench_title(c, run, b), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for i, h in enumerate(HEADERS):
        table.add_column(h.format(base=c.base.label, other=run.run.label), justify="left" if i in TEXT_COLUMNS else "right")
    for m in b.metrics:
        table.add_row(*row(m), style=_STYLE[m.verdict] or None)
    return table


def gate_lines(results: Sequence[GateResult]) -> list[str]:
    return [_gate_line(r) for r in results]


def _gate_line(r: GateResult) -> str:
    where = f"{r.run} · {r.benchmark}" if r.run else r.benchmark
    return f"{'FAIL' if r.breached else 'pass'}  {r.gate.text}  {where}: {r.reason}"


def comparison_markdown(c: Comparison, gates: Sequence[GateResult] = ()) -> str:
    """GitHub-flavoured markdown of the comparison, for a PR comment."""
    out = [f"## tokspeed compare: baseline `{c.base.label}`", ""]
    for run in c.runs:
        if run.differences:
            out += [f"> **Warning:** {difference_warning(c, run)}", ">"]
            out += [f"> - {d}" for d in run.differences]
            out.append("")
        for b in run.benchmarks:
            out += [f"### {bench_title(c, run, b)}", ""]
            headers = [h.format(base=c.base.label, other=run.run.label) for h in HEADERS]
            out.append("| " + " | ".join(headers) + " |")
            out.append("|" + "|".join("---" if i in TEXT_COLUMNS else "---:" for i in range(len(headers))) + "|")
            for m in b.metrics:
                cells = row(m)
                if m.verdict in ("better", "worse"):
                    cells[-1] = f"**{cells[-1]}**"
                out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
            out.append("")
            out += [f"- {line}" for line in highlights(b)]
            out += ["", f"<sub>{LEGEND}</sub>", ""]
    if gates:
        out += ["### Gates", ""] + [f"- {'❌' if r.breached else '✅'} {line}" for r, line in zip(gates, gate_lines(gates))] + [""]
    out.append(f"<sub>{method_note(c)}</sub>")
    return "\n".join(out) + "\n"


def method_note(c: Comparison) -> str:
    """How the intervals, p-values and verdicts were made, in one paragraph."""
    s = c.settings
    floors = ", ".join(f"{k} {v:.0%}" for k, v in s.single_run_noise.items())
    return (
        f"Latency rows: with ≥ 2 iterations on both sides, Welch's t test on the iterations' values of that "
        f"quantile (log scale); otherwise a bootstrap of that quantile's ratio, resampling requests "
        f"({s.resamples} resamples, seed {s.seed}), and a change within single runs' run-to-run noise "
        f"({floors}) is inconclusive. Throughput: Welch's t across iterations; error rate: Fisher's exact test. "
        f"p-values are adjusted over each benchmark's metrics (Benjamini–Hochberg); a difference needs "
        f"adj. p < {s.alpha:g} and a 95% interval excluding 1."
    )
