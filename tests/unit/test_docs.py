"""The docs cannot drift from the CLI: every flag they name exists, every flag is documented in docs/,
docs/cli.md is what the CLI declares, and the README stays a short front door whose links resolve."""

from __future__ import annotations

import re

import typer.main

from locations import ROOT
from tokspeed.cli import app

README = (ROOT / "README.md").read_text(encoding="utf-8")
README_ZH = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
# the guides, without the generated reference (which names every flag by construction)
GUIDES = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "cli.md")
DOCS = GUIDES


def options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}


def bench_options() -> set[str]:
    """The options of the scripts under bench/ (the README documents them too)."""
    bench = ROOT / "bench"
    return {m for f in bench.glob("*.py") for m in re.findall(r'add_argument\("(--[a-z][a-z0-9-]+)"', f.read_text())}


def locust_options() -> set[str]:
    """`tokspeed locust master|worker`, the locustfile's --tokspeed-* options and Locust's own --host."""
    from tokspeed.distributed.options import LocustOptions

    group = typer.main.get_command(app).commands["locust"]  # type: ignore[attr-defined]
    cli = {opt for cmd in group.commands.values() for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}
    return cli | {flag for flag, _, _ in LocustOptions.arguments().values()} | {"--host"}


def history_options() -> set[str]:
    """`tokspeed history list|trend|import|check`."""
    group = typer.main.get_command(app).commands["history"]  # type: ignore[attr-defined]
    return {opt for cmd in group.commands.values() for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}


def test_every_flag_in_the_docs_and_readmes_exists() -> None:
    known = options("run") | options("sim") | options("report") | options("compare") | options("sweep")
    known |= options("capacity") | options("diagnose") | {"--help"} | bench_options()
    known |= options("estimate") | options("efficiency") | options("cost")
    known |= locust_options()
    known |= options("monitor")
    known |= options("check-model")
    known |= options("conformance")
    known |= history_options()
    known |= {"--silent", "--fail", "--retry", "--retry-delay", "--retry-all-errors"}  # curl's, in the CI example
    known |= options("quality") | {"--tasks", "--output"}  # lm_eval's own flags, in the quality probe recipe
    known |= {"--extra-index-url"}  # pip's, in the install notes
    known |= {"--profiler-config"}  # vllm serve's, in the --profile notes
    for text in (DOCS, README, README_ZH):
        mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text))
        assert mentioned - known == set()


def test_every_run_flag_is_documented() -> None:
    undocumented = {o for o in options("run") if o not in DOCS}
    assert undocumented == set()


def test_every_history_flag_is_documented() -> None:
    undocumented = {o for o in history_options() if o not in DOCS}
    assert undocumented == set()


def test_every_diagnose_flag_is_documented() -> None:
    undocumented = {o for o in options("diagnose") if o not in DOCS}
    assert undocumented == set()


def test_every_monitor_flag_is_documented() -> None:
    undocumented = {o for o in options("monitor") if o not in DOCS}
    assert undocumented == set()


def test_every_estimate_efficiency_and_cost_flag_is_documented() -> None:
    for command in ("estimate", "efficiency", "cost"):
        undocumented = {o for o in options(command) if o not in DOCS}
        assert undocumented == set(), command


def test_every_builtin_model_and_gpu_is_documented() -> None:
    from tokspeed.estimate.hardware import known_gpus
    from tokspeed.estimate.model import BUILTIN_MODELS

    assert {g for g in known_gpus() if f"`{g}`" not in DOCS} == set()
    families = {name.rsplit("-", 1)[0] for name in BUILTIN_MODELS}
    assert {f for f in families if f"`{f}-" not in DOCS} == set()


def test_every_diagnosis_rule_is_documented() -> None:
    from tokspeed.diagnosis.rules import RULE_IDS

    assert {r for r in RULE_IDS if f"`{r}`" not in DOCS} == set()


def test_readme_names_the_test_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/run" in README and "bash .ci/run" in README_ZH and "pytest" in ci


def test_cli_reference_is_generated_from_the_cli() -> None:
    from tokspeed.cli.reference import render

    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: python -m tokspeed.cli.reference > docs/cli.md")


def test_the_cli_reference_names_every_option_of_every_command() -> None:
    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)

    def walk(cmd: object, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():  # type: ignore[attr-defined]
                walk(sub, [*path, name])
            return
        section = reference.split(f"## `{' '.join(path)}`", 1)[1].split("\n## ", 1)[0]
        for p in cmd.params:  # type: ignore[attr-defined]
            for opt in p.opts:
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}`" in section, (path, opt)

    walk(group, ["tokspeed"])


def test_the_readmes_are_short_and_their_links_resolve() -> None:
    assert len(README.splitlines()) <= 260 and len(README_ZH.splitlines()) <= 260
    assert "README.zh-CN.md" in README.split("\n## ", 1)[0]  # linked from the top
    for text in (README, README_ZH):
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" not in link:
                assert (ROOT / link).exists(), link


def test_no_user_facing_text_says_the_seed() -> None:
    """The article tokspeed grew from is no reference a user can resolve."""
    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for text in (README, README_ZH, DOCS, reference):
        assert not re.search(r"\bthe seed\b|seed article|seed's", text, re.IGNORECASE)


def test_every_option_says_its_default_in_help() -> None:
    """`--help` shows each option's default: typer prints a non-empty one, the help text says the rest."""
    missing = []

    def walk(cmd: object, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():  # type: ignore[attr-defined]
                walk(sub, [*path, name])
            return
        for p in cmd.params:  # type: ignore[attr-defined]
            if p.param_type_name != "option" or p.is_flag or "--help" in p.opts:
                continue
            if "[default" not in (p.help or "") and p.default in (None, (), []):
                missing.append(f"{' '.join(path)} {p.opts[0]}")

    walk(typer.main.get_command(app), ["tokspeed"])
    assert missing == []
