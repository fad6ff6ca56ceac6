"""The command line: the only place that prints errors and chooses exit codes.

Exit codes: 0 ok, 1 failure (target unreachable, every request failed, bad
results dir), 2 usage or configuration error, 3 an SLO was breached (or a
`diagnose --fail-on` finding exists, or `history check` found a regression), 130 interrupted (results so far are saved).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from tokspeed.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE
from tokspeed.errors import TokspeedError

# typer re-exports click's exceptions (vendored in newer typer): find their common base
_ClickError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

HELP = "Measure how fast an LLM deployment really is: TTFT, ITL, TPOT, throughput, goodput."


@dataclass(frozen=True)
class _Entry:
    """Where a command lives: its module in tokspeed.cli, its function (None: the module's `app`, a group)."""

    module: str
    function: str | None
    help: str = "HELP"


# every command, in the order `tokspeed --help` lists them (Typer lists groups after commands)
_COMMANDS: dict[str, _Entry] = {
    "run": _Entry("run_cmd", "run"),
    "sweep": _Entry("sweep_cmd", "sweep", "SWEEP_HELP"),
    "capacity": _Entry("sweep_cmd", "capacity", "CAPACITY_HELP"),
    "report": _Entry("report_cmd", "report"),
    "sim": _Entry("sim_cmd", "sim"),
    "compare": _Entry("compare_cmd", "compare"),
    "diagnose": _Entry("diagnose_cmd", "diagnose"),
    "estimate": _Entry("estimate_cmd", "estimate"),
    "efficiency": _Entry("cost_cmd", "efficiency", "EFFICIENCY_HELP"),
    "cost": _Entry("cost_cmd", "cost", "COST_HELP"),
    "quality": _Entry("quality_cmd", "quality"),
    "check-model": _Entry("check_model_cmd", "check_model"),
    "conformance": _Entry("conformance_cmd", "conformance"),
    "monitor": _Entry("monitor_cmd", "monitor"),
    "locust": _Entry("locust_cmd", None),
    "history": _Entry("history_cmd", None),
}


def _typer(cls: type[TyperGroup] | None = None) -> typer.Typer:
    return typer.Typer(cls=cls, name="tokspeed", help=HELP, no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False, rich_markup_mode="rich")


def _add(app: typer.Typer, name: str) -> None:
    """Register command `name` on `app`, importing its module."""
    entry = _COMMANDS[name]
    module = importlib.import_module(f"tokspeed.cli.{entry.module}")
    help_text = getattr(module, entry.help)
    if entry.function is None:
        app.add_typer(module.app, name=name, help=help_text)
        return
    app.command(name, help=help_text)(getattr(module, entry.function))


class _Commands(TyperGroup):
    """`tokspeed`'s group, importing a command's module only when that command is asked for.

    Building every command imports the whole package (~1 s of a CLI start, most of it for `run`'s
    stack); `tokspeed sim` or `tokspeed compare` need a small part of it. `--help` asks for every
    command (their short help), so it imports them all, as before.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in _COMMANDS:
            return None
        one = _typer()
        _add(one, cmd_name)
        return typer.main.get_group(one).commands[cmd_name]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """An unknown command's error suggests the close names, as Typer's does from the commands it built."""
        try:
            return super().resolve_command(ctx, args)
        except _UsageError as exc:
            matches = difflib.get_close_matches(args[0], list(_COMMANDS)) if args else []
            if matches:
                suggestions = ", ".join(f"{m!r}" for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"  # type: ignore[attr-defined]
            raise


def _root() -> TyperGroup:
    """The group with no command built yet: Typer makes it from the same settings as the whole app."""
    return typer.main.get_group(_typer(_Commands))


@functools.cache
def _whole_app() -> typer.Typer:
    app = _typer()
    for command in _COMMANDS:
        _add(app, command)
    return app


def __getattr__(name: str) -> Any:
    """`app`: the whole Typer app with every command registered (the reference and the tests walk it)."""
    if name == "app":
        return _whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse `argv`, run the command, turn errors into a message and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rc = _root().main(args=args, prog_name="tokspeed", standalone_mode=False)
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
