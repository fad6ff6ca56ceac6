"""The command line: the only place that prints errors and chooses exit codes.

Exit codes: 0 ok, 1 failure (target unreachable, every request failed, bad
results dir), 2 usage or configuration error, 3 an SLO was breached (or a
`diagnose --fail-on` finding exists, or `history check` found a regression), 130 interrupted (results so far are saved).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from tokspeed.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE
from tokspeed.errors import TokspeedError

# typer re-exports click's exceptions (vendored in newer typer): find their common base
_ClickError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app = typer.Typer(
    name="tokspeed",
    help="Measure how fast an LLM deployment really is: TTFT, ITL, TPOT, throughput, goodput.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _register() -> None:
    from tokspeed.cli import (
        compare_cmd,
        conformance_cmd,
        cost_cmd,
        diagnose_cmd,
        estimate_cmd,
        monitor_cmd,
        report_cmd,
        run_cmd,
        sim_cmd,
        sweep_cmd,
    )

    app.command("run", help=run_cmd.HELP, no_args_is_help=False)(run_cmd.run)
    app.command("sweep", help=sweep_cmd.SWEEP_HELP)(sweep_cmd.sweep)
    app.command("capacity", help=sweep_cmd.CAPACITY_HELP)(sweep_cmd.capacity)
    app.command("report", help=report_cmd.HELP)(report_cmd.report)
    app.command("sim", help=sim_cmd.HELP)(sim_cmd.sim)
    app.command("compare", help=compare_cmd.HELP)(compare_cmd.compare)
    app.command("diagnose", help=diagnose_cmd.HELP)(diagnose_cmd.diagnose)
    app.command("estimate", help=estimate_cmd.HELP)(estimate_cmd.estimate)
    app.command("efficiency", help=cost_cmd.EFFICIENCY_HELP)(cost_cmd.efficiency)
    app.command("cost", help=cost_cmd.COST_HELP)(cost_cmd.cost)
    from tokspeed.cli import quality_cmd

    app.command("quality", help=quality_cmd.HELP)(quality_cmd.quality)
    from tokspeed.cli import check_model_cmd
    app.command("check-model", help=check_model_cmd.HELP)(check_model_cmd.check_model)
    from tokspeed.cli import locust_cmd

    app.add_typer(locust_cmd.app, name="locust", help=locust_cmd.HELP)
    app.command("conformance", help=conformance_cmd.HELP)(conformance_cmd.conformance)
    app.command("monitor", help=monitor_cmd.HELP)(monitor_cmd.monitor)
    from tokspeed.cli import history_cmd

    app.add_typer(history_cmd.app, name="history", help=history_cmd.HELP)


_register()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse `argv`, run the command, turn errors into a message and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rc = app(args=args, prog_name="tokspeed", standalone_mode=False)
    except TokspeedError as exc:
        return _error(str(exc), exc.hint, exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return _error("interrupted", None, EXIT_INTERRUPTED)
    except _ClickError as exc:
        exc.show()  # type: ignore[attr-defined]
        return EXIT_USAGE
    except KeyboardInterrupt:
        return _error("interrupted", None, EXIT_INTERRUPTED)
    return int(rc or 0)


def _error(message: str, hint: str | None, code: int) -> int:
    print(f"Error: {message}", file=sys.stderr)
    if hint:
        print(f"Hint: {hint}", file=sys.stderr)
    return code
