"""`run`'s options are declared once (cli/run_options.py): the commands' signatures and the config fields come from it."""

from __future__ import annotations

import inspect

import pytest
import typer
from typer.testing import CliRunner

from tokspeed.cli import run_cmd, sweep_cmd
from tokspeed.cli import run_options as ro
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError


def _flags(**given: object) -> dict[str, object]:
    """Every option at its default, `given` set."""
    flags = {o.name: o.default for o in ro.RUN_OPTIONS}
    assert set(given) <= set(flags)
    return {**flags, **given}


def test_run_sweep_and_capacity_take_exactly_the_tables_options() -> None:
    names = [o.name for o in ro.RUN_OPTIONS]
    assert len(set(names)) == len(names)
    assert list(inspect.signature(run_cmd.run).parameters) == names
    assert list(inspect.signature(sweep_cmd.sweep).parameters) == [*names, "auto"]
    assert list(inspect.signature(sweep_cmd.capacity).parameters)[: len(names)] == names
    flags = [opt for o in ro.RUN_OPTIONS for opt in o.annotation.__metadata__[0].param_decls]
    assert len(set(flags)) == len(flags), "a flag spelled by two options"


def test_each_option_sets_only_config_fields_and_no_field_is_set_by_two() -> None:
    fields: dict[str, str] = {}
    for o in ro.RUN_OPTIONS:
        if o.sets is None or o.name == "warmup":  # --warmup sets warmup or warmup_s (below)
            continue
        for field in o.sets(o.default):
            assert field in RunConfig.model_fields, (o.name, field)
            assert field not in fields, (o.name, fields.get(field))
            fields[field] = o.name
    assert set(ro.warmup_fields("16")) | set(ro.warmup_fields("10s")) == {"warmup", "warmup_s"}


def test_options_not_given_set_nothing() -> None:
    assert {k: v for k, v in ro.config_overrides(_flags()).items() if v is not None} == {}


def test_given_options_become_the_fields_they_declare() -> None:
    flags = _flags(no_stream=True, no_usage=True, no_telemetry=True, header=["X-A: 1"], extra_body='{"a": 1}',
                   timeout="30s", cancel_after="200ms", warmup="10s", tag=["a=1"], deployment_commit=" abc ",
                   percentiles="50,75", stop=[], slo=["ttft_p99_ms<=5"], insecure=True, workers="auto")
    got = {k: v for k, v in ro.config_overrides(flags).items() if v is not None}
    assert got == {"stream": False, "include_usage": False, "telemetry": False, "headers": {"X-A": "1"},
                   "extra_body": {"a": 1}, "timeout_s": 30.0, "cancel_after_s": 0.2, "warmup_s": 10.0, "tags": {"a": "1"},
                   "deployment_commit": "abc", "percentiles": [50.0, 75.0], "slo": ["ttft_p99_ms<=5"], "insecure": True,
                   "client_workers": "auto"}


@pytest.mark.parametrize(("flags", "message"), [
    ({"warmup": "abc"}, "not a request count nor a duration"),
    ({"header": ["nocolon"]}, "is not 'Name: value'"),
    ({"extra_body": "[1]"}, "must be a JSON object"),
    ({"percentiles": "200"}, "--percentiles"),
])
def test_a_bad_value_is_a_usage_error_naming_its_option(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        ro.config_overrides(_flags(**flags))


def test_the_parsed_command_line_reaches_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through Typer: what `tokspeed run ...` hands to the config (captured before anything runs)."""
    seen: dict[str, object] = {}

    def capture(scenario: object, overrides: dict[str, object]) -> RunConfig:
        seen.update(overrides)
        raise SystemExit(0)

    monkeypatch.setattr(run_cmd, "config_from_sources", capture)
    app = typer.Typer()
    app.command()(run_cmd.run)
    result = CliRunner().invoke(app, ["--target", "http://127.0.0.1:9/v1/", "--rate", "4", "--duration", "1m",
                                      "--max-tokens", "64,256", "--no-stream"])
    assert result.exit_code == 0, result.output
    assert {k: v for k, v in seen.items() if v is not None} == {
        "target": "http://127.0.0.1:9/v1", "rate": 4.0, "profile": "rate", "duration_s": 60.0, "output_tokens": "64",
        "stream": False}


def test_every_option_that_takes_a_value_says_its_default_in_its_help() -> None:
    """`--help` and docs/cli.md show each default (units in the help's own words: 30s, req/s, tokens)."""
    for p in inspect.signature(sweep_cmd.capacity).parameters.values():
        info = p.annotation.__metadata__[0]
        if not isinstance(p.default, bool):
            assert "[default:" in (info.help or ""), p.name
