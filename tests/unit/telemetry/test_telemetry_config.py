"""Telemetry options: defaults, scenario keys, flags, and what run.json's environment says."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import pytest

from tokspeed.cli import main
from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.runner.run import target_headers
from tokspeed.telemetry.environment import capture_environment, package_versions


def test_defaults_sample_four_times_a_second_with_the_targets_metrics() -> None:
    cfg = RunConfig()
    assert (cfg.telemetry, cfg.telemetry_interval_s, cfg.server_metrics) == (True, 0.25, None)


def test_scenario_sets_interval_as_a_duration_and_can_turn_things_off(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("telemetry_interval: 500ms\nserver_metrics: 'OFF'\ntelemetry: false\n")
    cfg = config_from_sources(scenario, {})
    assert (cfg.telemetry_interval_s, cfg.server_metrics, cfg.telemetry) == (0.5, "off", False)
    flags = config_from_sources(scenario, {"server_metrics": "http://h:9400/metrics", "telemetry_interval_s": 2.0})
    assert (flags.server_metrics, flags.telemetry_interval_s) == ("http://h:9400/metrics", 2.0)


@pytest.mark.parametrize("bad", [{"server_metrics": "h:9400/metrics"}, {"telemetry_interval_s": 0}, {"telemetry_interval_s": 120}])
def test_bad_values_are_config_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        config_from_sources(None, bad)


def test_a_bad_flag_is_a_usage_error_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    code = main(["run", "--target", "http://127.0.0.1:9/v1", "--server-metrics", "ftp://x", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "--server-metrics" in capsys.readouterr().err
    assert main(["run", "--telemetry-interval", "soon", "--out", str(out)]) == 2


def test_credentials_go_with_the_target_headers() -> None:
    cfg = RunConfig(api_key="sk-1", headers={"X-Team": "a"})
    assert target_headers(cfg) == {"X-Team": "a", "Authorization": "Bearer sk-1"}
    assert target_headers(RunConfig()) == {}


def test_environment_lists_packages_without_importing_them() -> None:
    with mock.patch.dict(sys.modules):
        sys.modules.pop("torch", None)
        env = capture_environment(nvml=None)
        assert "torch" not in sys.modules
    assert env["packages"]["pydantic"] == package_versions(("pydantic",))["pydantic"]
    assert "definitely-not-installed" not in package_versions(("definitely-not-installed",))
    assert env["gpu"] is None and "nvidia-ml-py is not installed" in env["gpu_reason"]
    assert env["cpu_count"] >= 1 and env["python"].count(".") == 2
