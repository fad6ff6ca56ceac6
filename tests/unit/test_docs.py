"""The README cannot drift from the CLI: every flag it names exists, every `run` flag is documented."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from tokspeed.cli import app

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}


def bench_options() -> set[str]:
    """The options of the scripts under bench/ (the README documents them too)."""
    bench = Path(__file__).parents[2] / "bench"
    return {m for f in bench.glob("*.py") for m in re.findall(r'add_argument\("(--[a-z][a-z0-9-]+)"', f.read_text())}


def locust_options() -> set[str]:
    """`tokspeed locust master|worker`, the locustfile's --tokspeed-* options and Locust's own --host."""
    from tokspeed.distributed.options import LocustOptions

    group = typer.main.get_command(app).commands["locust"]  # type: ignore[attr-defined]
    cli = {opt for cmd in group.commands.values() for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}
    return cli | {flag for flag, _, _ in LocustOptions.arguments().values()} | {"--host"}


def test_every_flag_in_the_readme_exists() -> None:
    known = options("run") | options("sim") | options("report") | options("compare") | options("sweep")
    known |= options("capacity") | options("diagnose") | {"--help"} | bench_options()
    known |= options("estimate") | options("efficiency") | options("cost")
    known |= locust_options()
    known |= options("monitor")
    known |= options("check-model")
    known |= options("conformance")
    known |= options("quality") | {"--tasks", "--output"}  # lm_eval's own flags, in the quality probe recipe
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", README))
    assert mentioned - known == set()


def test_every_run_flag_is_documented() -> None:
    undocumented = {o for o in options("run") if o not in README}
    assert undocumented == set()


def test_every_diagnose_flag_is_documented() -> None:
    undocumented = {o for o in options("diagnose") if o not in README}
    assert undocumented == set()


def test_every_monitor_flag_is_documented() -> None:
    undocumented = {o for o in options("monitor") if o not in README}
    assert undocumented == set()


def test_every_estimate_efficiency_and_cost_flag_is_documented() -> None:
    for command in ("estimate", "efficiency", "cost"):
        undocumented = {o for o in options(command) if o not in README}
        assert undocumented == set(), command


def test_every_builtin_model_and_gpu_is_documented() -> None:
    from tokspeed.estimate.hardware import known_gpus
    from tokspeed.estimate.model import BUILTIN_MODELS

    assert {g for g in known_gpus() if f"`{g}`" not in README} == set()
    families = {name.rsplit("-", 1)[0] for name in BUILTIN_MODELS}
    assert {f for f in families if f"`{f}-" not in README} == set()


def test_every_diagnosis_rule_is_documented() -> None:
    from tokspeed.diagnosis.rules import RULE_IDS

    diagnosis = Path(__file__).parents[2] / "docs" / "diagnosis.md"  # the rules added since README's table
    documented = README + (diagnosis.read_text(encoding="utf-8") if diagnosis.exists() else "")
    assert {r for r in RULE_IDS if f"`{r}`" not in documented} == set()


def test_readme_names_the_test_command_ci_runs() -> None:
    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert "bash .ci/run" in README and "pytest" in ci
