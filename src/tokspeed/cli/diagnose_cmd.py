"""`tokspeed diagnose DIR`: is a saved run's measurement valid, and why is it slow?

Re-runs every diagnosis rule over the saved result (run.json, or requests.jsonl
alone) and prints each finding with its evidence and what to change; `--json`
prints them as schema tokspeed.diagnosis/1. Exit 0, or 3 with `--fail-on` when a
finding of that severity or worse exists.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import orjson
import typer

EXIT_OK, EXIT_FINDING = 0, 3

HELP = """Diagnose a saved run: is the measurement valid, and why is it slow?

Checks the run for a saturated client, idle GPUs under load, unstable iterations,
cold starts, queueing or prefill in TTFT, responses shorter than max_tokens,
errors by cause, too few samples for p99 and token counts that disagree; each
finding comes with its numbers and what to change.

  tokspeed diagnose runs/a

  tokspeed diagnose runs/a --json

  tokspeed diagnose runs/a --fail-on critical     # exit 3 when a critical finding exists (CI)
"""


class FailOn(str, Enum):
    critical = "critical"
    warning = "warning"


_BREACHES = {FailOn.critical: {"critical"}, FailOn.warning: {"critical", "warning"}}


def diagnose(
    directory: Annotated[Path, typer.Argument(help="A results directory written by `tokspeed run --out`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the findings as JSON (schema tokspeed.diagnosis/1).")] = False,
    fail_on: Annotated[FailOn | None, typer.Option("--fail-on", help="Exit 3 when a finding of this severity or worse exists: critical, or warning (warning or critical). Without it, exit 0 whatever is found. [default: never: exit 0 whatever is found]")] = None,
) -> int:
    from rich.console import Console

    from tokspeed.diagnosis.rules import diagnose as run_rules
    from tokspeed.reports.diagnosis_text import findings_json, render_findings
    from tokspeed.results import REQUESTS_FILE, StoredRecords, load_run

    result, records = load_run(directory, with_records=False)  # streamed below: memory flat however big the run
    requests = directory / REQUESTS_FILE
    findings = run_rules(result, records or (StoredRecords(requests) if requests.exists() else []))
    if json_out:
        print(orjson.dumps(findings_json(findings, result, directory), option=orjson.OPT_INDENT_2).decode())
    else:
        wide = None if sys.stdout.isatty() else 160
        Console(highlight=False, width=wide).print(render_findings(findings, result, directory))
    if fail_on is not None and any(f.severity in _BREACHES[fail_on] for f in findings):
        return EXIT_FINDING
    return EXIT_OK
