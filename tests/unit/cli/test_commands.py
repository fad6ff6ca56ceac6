"""`tokspeed`'s group builds a command only when it is asked for, and answers exactly as the whole app would."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main

from tokspeed import cli

# what each command prints for --help, and a few usage errors, through both ways of building the group
ARGS = [
    ["--help"],
    [],
    ["rn"],
    ["hist"],
    ["history", "lst"],
    ["run", "--no-such-option"],
    *[[name, "--help"] for name in ("run", "sweep", "capacity", "report", "sim", "compare", "diagnose", "estimate",
                                     "efficiency", "cost", "quality", "check-model", "conformance", "monitor",
                                     "locust", "history")],
]


def _whole(args: list[str]) -> int:
    """What Typer's own group, with every command built, answers (the CLI before commands were built lazily)."""
    try:
        rc = typer.main.get_command(cli.app).main(args=args, prog_name="tokspeed", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except cli._ClickError as exc:
        exc.show()  # type: ignore[attr-defined]
        return 2
    return int(rc or 0)


@pytest.mark.parametrize("args", ARGS, ids=[" ".join(a) or "no-args" for a in ARGS])
def test_the_lazy_group_answers_as_the_whole_app(args: list[str], capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    lazy_rc = cli.main(args)
    lazy = capsys.readouterr()
    whole_rc = _whole(args)
    whole = capsys.readouterr()
    assert (lazy_rc, lazy.out, lazy.err) == (whole_rc, whole.out, whole.err)
    assert lazy.out or lazy.err  # each of these prints help or an error


def test_a_command_imports_only_its_own_module() -> None:
    """`tokspeed sim` (started by every integration test) no longer imports the run stack: ~0.7 s a start."""
    probe = ("import sys; from tokspeed.cli import main; rc = main(['sim', '--help']); "
             "print(sorted(m for m in sys.modules if m.startswith(('tokspeed.cli.', 'tokspeed.runner'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = out.strip().splitlines()[-1]
    assert "tokspeed.cli.sim_cmd" in loaded
    assert "tokspeed.cli.run_cmd" not in loaded and "tokspeed.runner" not in loaded, loaded
