"""`tokspeed compare BASE OTHER...`: saved runs side by side, with uncertainty, verdicts and gates."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from tokspeed.errors import ConfigError

if TYPE_CHECKING:
    from tokspeed.cli.outputs import Output
    from tokspeed.cli.report_exports import ReportPlan
    from tokspeed.compare.comparison import Comparison
    from tokspeed.compare.evidence import RunData
    from tokspeed.compare.gates import GateResult

HELP = """Compare saved runs with a baseline: ratios with 95% intervals, significance, verdicts, gates.

Per metric (TTFT, ITL, TPOT, E2E percentiles, throughput, error rate): both
values, the change, the ratio other/base with a 95% interval, a p-value and a
verdict (faster, slower, no significant difference). Runs whose workload or
load differ are flagged.

Examples:

  tokspeed compare runs/fp16 runs/awq

  tokspeed compare runs/main runs/pr --fail-if 'ttft_p99_ms>+10%' --fail-if 'output_tokens_per_s<-5%'

  tokspeed compare runs/main runs/pr --fail-if 'ttft_p99_ms>+10%!'   (fails only on a significant regression)

  tokspeed compare runs/main runs/pr --markdown - --html compare.html

Exit codes: 0 ok, 1 unreadable results, 2 bad arguments, 3 a --fail-if gate was breached.
"""


def compare(
    base: Annotated[Path, typer.Argument(help="The baseline results directory.", show_default=False)],
    others: Annotated[list[Path], typer.Argument(help="Results directories to compare with the baseline.", show_default=False)],
    fail_if: Annotated[Optional[list[str]], typer.Option("--fail-if", metavar="EXPR", help="Exit 3 when a run breaches it: 'ttft_p99_ms>+10%' (relative to the baseline), 'ttft_p99_ms>+10%!' (relative, and only when compare calls the change significant), 'error_rate>0.01' (absolute). Repeatable; names as in run.json. [default: none]")] = None,
    markdown: Annotated[Optional[str], typer.Option("--markdown", metavar="FILE|-", help="Write the comparison as markdown (- for stdout). [default: none]")] = None,
    json_out: Annotated[Optional[str], typer.Option("--json", metavar="FILE|-", help="Write the comparison as JSON (- for stdout). [default: none]")] = None,
    html: Annotated[Optional[str], typer.Option("--html", metavar="FILE", help="Write a self-contained HTML comparison with overlaid CDFs. [default: none]")] = None,
    min_effect: Annotated[str, typer.Option("--min-effect", metavar="PCT", help="Significant changes smaller than this are called negligible.")] = "1%",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap resampling.")] = 0,
    noise_ms: Annotated[float, typer.Option("--single-run-noise-ms", metavar="MS", min=0, help="Between single runs, latency changes smaller than this are inconclusive (also smaller than 3% at p50, 10% at p99 — at least 25% and 50 ms when either run saturated its host's CPU — or the runs' client lag). Lower it on an idle, dedicated client; --iterations measures the noise instead.")] = 20.0,
    percentiles: Annotated[Optional[str], typer.Option("--percentiles", help="Latency percentiles to compare, e.g. 50,90,99,99.9: TTFT, ITL, TPOT and E2E at each (a run saved without one has it computed from its requests). [default: p50 and p99 of TTFT, ITL, E2E, p50 of TPOT]")] = None,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples per run and metric (the smallest p-value is 2/(N + 1)).", min=500)] = 2000,
) -> int:
    from tokspeed.cli.report_exports import EXIT_GATE, EXIT_OK, print_gates
    from tokspeed.compare.comparison import CompareSettings
    from tokspeed.compare.evidence import compare_runs, judge_gates

    qs = _percentiles(percentiles)
    plan = _prepare(markdown, json_out, html, fail_if or (), qs)
    settings = CompareSettings(seed=seed, resamples=resamples, min_effect=_fraction(min_effect), single_run_noise_ms=noise_ms,
                               percentiles=qs)
    runs = load_runs([base, *others])
    comparison = compare_runs(runs[0], runs[1:], settings)
    gates = judge_gates(runs[0], runs[1:], plan.gates, comparison) if plan.gates else []
    to_stdout = any(o.to_stdout for o in plan.outputs.values())
    if not to_stdout:
        _print_console(comparison)
    _write(plan.outputs, comparison, runs, gates)
    if gates:
        print_gates(gates, sys.stderr if to_stdout else sys.stdout)
    return EXIT_GATE if any(g.breached for g in gates) else EXIT_OK


def _percentiles(text: str | None) -> tuple[float, ...]:
    if text is None:
        return ()
    from tokspeed.stats.distribution import parse_percentiles

    try:
        return parse_percentiles(text)
    except ValueError as exc:
        raise ConfigError(f"--percentiles: {exc}", hint="e.g. --percentiles 50,90,99,99.9") from None


def _prepare(markdown: str | None, json_out: str | None, html: str | None, fail_if: Sequence[str],
             percentiles: Sequence[float] = ()) -> ReportPlan:
    """Check every destination and gate before any run is loaded."""
    from tokspeed.cli.outputs import prepare_outputs
    from tokspeed.cli.report_exports import ReportPlan, known_metrics
    from tokspeed.compare.comparison import compared_metrics
    from tokspeed.compare.gates import parse_gate

    outputs = prepare_outputs({"--markdown": markdown, "--json": json_out, "--html": html})
    if "--html" in outputs:
        from tokspeed.reports.html import require_html

        require_html()
    tested = [m.name for m in compared_metrics(percentiles)]
    return ReportPlan(outputs=outputs, gates=[parse_gate(text, [*known_metrics(), *tested], tested=tested) for text in fail_if])


def load_runs(paths: Sequence[Path]) -> list[RunData]:
    """Load each directory, labelled by its name (its path where names repeat)."""
    from tokspeed.compare.evidence import RunData, run_labels
    from tokspeed.results import load_run

    labels = run_labels(paths)
    return [RunData(label, str(p), *load_run(p)) for label, p in zip(labels, paths)]



def _fraction(text: str) -> float:
    raw = text.strip().removesuffix("%")
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"--min-effect {text!r} is not a percentage", hint="e.g. --min-effect 2%") from exc
    if value < 0:
        raise ConfigError(f"--min-effect {text!r} must not be negative")
    return value / 100.0 if text.strip().endswith("%") else value


def _print_console(comparison: Comparison) -> None:
    from rich.console import Console

    from tokspeed.reports.compare_text import render_comparison

    wide = None if sys.stdout.isatty() else 160  # CI logs and pipes: no wrapping at 80 columns
    Console(highlight=False, width=wide).print(render_comparison(comparison))


def _write(outputs: dict[str, Output], comparison: Comparison, runs: list[RunData], gates: list[GateResult]) -> None:
    import orjson

    for flag, output in outputs.items():
        if flag == "--markdown":
            from tokspeed.reports.compare_text import comparison_markdown

            text = comparison_markdown(comparison, gates)
        elif flag == "--json":
            text = orjson.dumps(comparison.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2).decode() + "\n"
        else:
            from tokspeed.reports.html import comparison_html

            text = comparison_html(comparison, runs)
        output.write(text)
        if not output.to_stdout:
            print(f"Wrote {flag.lstrip('-')}: {output.path}", file=sys.stderr)
