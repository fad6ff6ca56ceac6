"""`tokspeed report DIR`: re-render a saved run from disk (run.json, or requests.jsonl alone).

Also exports it (`--html`, `--markdown`, `--csv`, `--csv-summary`; see
`tokspeed.cli.report_exports`) and gates it (`--fail-if`, exit 3 when breached).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import orjson
import typer

from tokspeed.errors import ConfigError
from tokspeed.metrics.compat import CompatTool

HELP = """Re-render the summary of a saved run.

Reads DIR/run.json; if it is missing (a crashed run), rebuilds the summary
from DIR/requests.jsonl alone.

Examples:

  tokspeed report runs/a --html runs/a/report.html

  tokspeed report runs/a --markdown -

  tokspeed report runs/a --csv runs/a/requests.csv --fail-if 'ttft_p99_ms>500'

  tokspeed report runs/a --as vllm
"""


def report(
    directory: Annotated[Path, typer.Argument(help="A results directory written by `tokspeed run --out`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the run's summaries as JSON instead of tables.")] = False,
    html: Annotated[Optional[str], typer.Option("--html", metavar="FILE", help="Write a self-contained HTML report (charts work offline). [default: none]")] = None,
    markdown: Annotated[Optional[str], typer.Option("--markdown", metavar="FILE|-", help="Write a markdown summary for PRs and issues (- for stdout). [default: none]")] = None,
    csv: Annotated[Optional[str], typer.Option("--csv", metavar="FILE|-", help="Write one CSV row per request, in ms and tokens (- for stdout). [default: none]")] = None,
    csv_summary: Annotated[Optional[str], typer.Option("--csv-summary", metavar="FILE|-", help="Write one CSV row per benchmark, the run.json metric names as columns (- for stdout). [default: none]")] = None,
    fail_if: Annotated[Optional[list[str]], typer.Option("--fail-if", metavar="EXPR", help="Exit 3 when the run breaches a limit, e.g. 'ttft_p99_ms>500' or 'error_rate>0.01' (repeatable; absolute). [default: none]")] = None,
    as_tool: Annotated[Optional[CompatTool], typer.Option("--as", help="Show the metrics under a peer tool's names and formulas (vllm, aiperf, guidellm), beside tokspeed's; with --json, as JSON (tokspeed.compat/1). [default: tokspeed's own metrics]")] = None,
    token_audit: Annotated[bool, typer.Option("--token-audit", help="Also print the token audit: count sources, usage vs --tokenizer on kept texts, tokens per chunk, requests stopped before max_tokens.")] = False,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json (or model dir) that recounts kept output texts for --token-audit. [default: the counts saved in the run]")] = None,
    figures: Annotated[Optional[Path], typer.Option("--figures", metavar="DIR", help="Write every chart of the HTML report as an image file into DIR, for slides (drawn offline by headless Chromium: TOKSPEED_CHROMIUM or chromium on PATH). [default: none]")] = None,
    figure_format: Annotated[str, typer.Option("--figure-format", metavar="png|svg|both", help="Image format of --figures.")] = "both",
    stats: Annotated[bool, typer.Option("--stats", help="Also print the measurement statistics: bootstrap beside order-statistic CIs, requests needed for p99 within ±10%, the steady-state window, latency from the scheduled start.")] = False,
) -> int:
    from rich.console import Console

    from tokspeed.cli.report_exports import ReportPlan
    from tokspeed.reports.summary_text import render_result
    from tokspeed.results import load_run

    plan = ReportPlan.prepare(
        {"--html": html, "--markdown": markdown, "--csv": csv, "--csv-summary": csv_summary}, fail_if or (), stdout_taken=json_out
    )
    formats = _figure_formats(figure_format, figures)
    per_request = as_tool is not None or token_audit or stats or html is not None or csv is not None or figures is not None
    result, records = load_run(directory, with_records=per_request)  # the summaries alone need run.json only
    if as_tool is not None:
        from tokspeed.metrics.compat import to_json, views
        from tokspeed.reports.compat_text import render_views

        tool = as_tool.value
        compat = views(tool, result, records)
        if json_out:
            print(orjson.dumps(to_json(tool, compat), option=orjson.OPT_INDENT_2).decode())
        elif not plan.exporting:
            Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(render_views(tool, compat))
    elif json_out:
        data = [{"name": b.name, "profile": b.profile, "summary": b.summary.model_dump(mode="json")} for b in result.benchmarks]
        print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    elif not plan.exporting:
        wide = None if sys.stdout.isatty() else 160  # CI logs and pipes: no wrapping at 80 columns
        Console(highlight=False, width=wide).print(render_result(result, directory))
    if (token_audit or stats) and not json_out:
        from tokspeed.cli.report_sections import print_measurement_sections

        print_measurement_sections(result, records, token_audit=token_audit, tokenizer=tokenizer, stats=stats)
    if figures is not None:
        from tokspeed.cli.report_exports import telemetry_lines
        from tokspeed.reports.figure_export import export_figures
        from tokspeed.reports.html import run_html

        written = export_figures(run_html(result, records, str(directory), telemetry_lines(directory)), figures, formats)
        print(f"Wrote {len(written)} chart files ({', '.join(formats)}) to {figures}", file=sys.stderr)
    return plan.finish(result, records, directory, stdout_taken=json_out)


def _figure_formats(text: str, figures: Path | None) -> tuple[str, ...]:
    """--figure-format as formats; with --figures, the browser is looked for before anything is loaded."""
    formats = {"png": ("png",), "svg": ("svg",), "both": ("png", "svg")}.get(text.strip().lower())
    if formats is None:
        raise ConfigError(f"--figure-format {text!r}: give png, svg or both")
    if figures is not None:
        from tokspeed.reports.figure_export import require_chromium
        from tokspeed.reports.html import require_html

        require_html()
        require_chromium()
    return formats
