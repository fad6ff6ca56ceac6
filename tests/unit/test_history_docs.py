"""The CI example of docs/history.md is the file in docs/examples, and every tokspeed command in it parses."""

from __future__ import annotations

import shlex

import typer.main
import yaml

from locations import ROOT
from tokspeed.cli import app

WORKFLOW = ROOT / "docs" / "examples" / "benchmark-history.yml"


def test_the_page_shows_the_example_file_verbatim() -> None:
    page = (ROOT / "docs" / "history.md").read_text(encoding="utf-8")
    assert "```yaml\n" + WORKFLOW.read_text(encoding="utf-8") + "```" in page


def _commands() -> list[list[str]]:
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["benchmark"]["steps"]
    out = []
    for step in steps:
        for line in str(step.get("run", "")).splitlines():
            words = shlex.split(line.split("#", 1)[0].replace("${{", "'${{").replace("}}", "}}'"))
            if words[:1] == ["tokspeed"]:
                out.append(words)
    return out


def test_every_tokspeed_command_in_the_workflow_names_real_options() -> None:
    commands = _commands()
    assert [c[:3] for c in commands] == [["tokspeed", "run", "--target"], ["tokspeed", "history", "check"],
                                         ["tokspeed", "history", "trend"]]
    root = typer.main.get_command(app)
    for words in commands:
        cmd = root.commands[words[1]]  # type: ignore[attr-defined]
        rest = words[2:]
        if hasattr(cmd, "commands"):
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        known = {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]}
        flags = {w for w in rest if w.startswith("--")}
        assert flags <= known, (words[:3], flags - known)
