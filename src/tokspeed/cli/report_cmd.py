"""`tokspeed report DIR`: re-render a saved run from disk (run.json, or requests.jsonl alone)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

HELP = """Re-render the summary of a saved run.

Reads DIR/run.json; if it is missing (a crashed run), rebuilds the summary
from DIR/requests.jsonl alone.
"""


def report(
    directory: Annotated[Path, typer.Argument(help="A results directory written by `tokspeed run --out`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the run's summaries as JSON instead of tables.")] = False,
) -> int:
    from rich.console import Console

    from tokspeed.reports.summary_text import render_result
    from tokspeed.results import load_run

    result, _records = load_run(directory)
    if json_out:
        data = [{"name": b.name, "profile": b.profile, "summary": b.summary.model_dump(mode="json")} for b in result.benchmarks]
        print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return 0
    Console(highlight=False).print(render_result(result))
    return 0
