"""The command-line reference (docs/cli.md), generated from the CLI's own declarations.

Every option's name, value, default, environment variable and help come from the Typer app, so the
reference cannot drift from `--help`: `python -m tokspeed.cli.reference > docs/cli.md` rewrites it,
and a test fails when the checked-in file differs from what this prints.
"""

from __future__ import annotations

import enum
import re
import typing
from pathlib import Path
from typing import Any

DEFAULT = re.compile(r"\s*\[default: ((?:[^\[\]]|\[[^\[\]]*\])*)\]")
HEADER = """# Command-line reference

Generated from the CLI itself (`python -m tokspeed.cli.reference > docs/cli.md`; a test fails when
this page differs from what the commands declare). Each command's `--help` prints the same. Guides:
[targets](targets.md), [`tokspeed run` by group](run.md), [workloads](workloads.md),
[sweeps and capacity](sweeps-capacity.md), [reports and compare](reports-compare.md).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _value(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    if param.metavar:
        return str(param.metavar)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    inner = typing.get_args(annotation) or (annotation,)
    kind = next((a for a in inner if a is not type(None)), annotation)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "|".join(str(m.value) for m in kind)
    names = {int: "INT", float: "FLOAT", str: "TEXT", bool: "BOOL", Path: "PATH"}
    return names.get(kind, "TEXT") if isinstance(kind, type) else "TEXT"


def _default(param: Any, help_text: str) -> tuple[str, str]:
    """(the default to show, the help without its [default: …] note)."""
    found = DEFAULT.search(help_text)
    if found:
        return found.group(1), (help_text[: found.start()] + help_text[found.end():]).strip()
    value = param.default
    if value is None or value is False or value == () or value == [] or getattr(param, "is_flag", False):
        return "", help_text
    return str(getattr(value, "value", value)), help_text


def _options_table(params: list[Any]) -> list[str]:
    rows = ["| option | value | default | description |", "|---|---|---|---|"]
    for p in params:
        names = ", ".join(f"`{n}`" for n in [*p.opts, *p.secondary_opts])
        help_text = p.help or ""
        default, help_text = _default(p, help_text)
        if p.envvar:
            help_text += f" Env: `{p.envvar}`."
        rows.append(f"| {names} | {_cell(_value(p))} | {_cell(default)} | {_cell(help_text)} |")
    return rows


def _command(cmd: Any, path: list[str]) -> list[str]:
    out = [f"## `{' '.join(path)}`", ""]
    text = (cmd.help or "").strip()
    head, _, examples = text.partition("\nExamples:")
    out += [head.strip(), ""]
    if examples.strip():
        out += ["```bash", *[ln.strip() for ln in examples.strip().splitlines() if ln.strip()], "```", ""]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    if args:
        out += ["Arguments: " + ", ".join(f"`{(a.metavar or a.name).upper()}`" + (f" ({a.help})" if getattr(a, "help", None) else "") for a in args), ""]
    options = [p for p in cmd.params if p.param_type_name == "option" and "--help" not in p.opts]
    panels: dict[str, list[Any]] = {}
    for p in options:
        panels.setdefault(getattr(p, "rich_help_panel", None) or "Options", []).append(p)
    for panel, params in panels.items():
        if len(panels) > 1:
            out += [f"### {panel}", ""]
        out += [*_options_table(params), ""]
    return out


def render() -> str:
    """The whole reference, as markdown."""
    import typer.main

    from tokspeed.cli import app

    lines = [HEADER]

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            lines.extend(_command(cmd, path))

    walk(typer.main.get_command(app), ["tokspeed"])
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
