"""Run configuration: parsing, validation, defaults, secrets, scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokspeed.cli.run_cmd import _normalise_target, _profile
from tokspeed.cli.run_options import _headers, _json_object
from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.units import parse_duration


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("5m", 300), ("1.5h", 5400), ("250ms", 0.25), ("12", 12)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_bad_duration() -> None:
    with pytest.raises(ConfigError, match="cannot parse duration"):
        parse_duration("soon")


def test_secrets_never_in_the_dump() -> None:
    cfg = RunConfig(api_key="sk-very-secret", headers={"Authorization": "Bearer sk-very-secret", "X-Team": "a"})
    dump = repr(cfg.redacted_dump())
    assert "sk-very-secret" not in dump
    assert cfg.redacted_dump()["headers"] == {"Authorization": "***", "X-Team": "a"}
    assert cfg.redacted_dump()["api_key_set"] is True


def test_defaults() -> None:
    cfg = RunConfig()
    assert cfg.profile == "synchronous" and cfg.streams == 1
    assert cfg.measured_requests == 100 and cfg.warmup_requests == 1
    assert RunConfig(duration_s="10s").measured_requests is None
    assert RunConfig(profile="concurrency", concurrency=64).warmup_requests == 64
    assert RunConfig(profile="concurrency", concurrency=1000).warmup_requests == 256


def test_scenario_file_and_flags_win(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("target: http://127.0.0.1:9/v1\nconcurrency: 4\nduration: 2m\nslo: ['ttft_p99_ms<=500']\nmax-concurrency: 3\n")
    cfg = config_from_sources(f, {"concurrency": 8})
    assert cfg.profile == "concurrency" and cfg.concurrency == 8
    assert cfg.duration_s == 120 and cfg.max_concurrency == 3
    assert str(cfg.slos[0]) == "ttft_p99_ms<=500"


def test_scenario_unknown_key_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("concurrncy: 4\n")
    with pytest.raises(ConfigError, match="concurrncy"):
        config_from_sources(f, {})


def test_bad_slo_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        config_from_sources(None, {"slo": ["latency<=5"]})


def test_profile_conflicts() -> None:
    with pytest.raises(ConfigError, match="cannot be combined"):
        _profile(False, 4, 2.0, None)
    with pytest.raises(ConfigError, match="only applies to --rate"):
        _profile(False, 4, None, 2)
    assert _profile(False, None, 2.0, 8) == "rate"


def test_target_normalisation() -> None:
    assert _normalise_target("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert _normalise_target("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    with pytest.raises(ConfigError):
        _normalise_target("127.0.0.1:8000")


def test_headers_and_extra_body() -> None:
    assert _headers(["X-A: 1", "X-B:two:three"]) == {"X-A": "1", "X-B": "two:three"}
    with pytest.raises(ConfigError):
        _headers(["nocolon"])
    assert _json_object('{"ignore_eos": true}') == {"ignore_eos": True}
    with pytest.raises(ConfigError):
        _json_object("[1]")


def test_rate_inf_needs_a_request_count() -> None:
    with pytest.raises(ValueError, match="--rate inf sends a request count"):
        RunConfig(profile="rate", rate=float("inf"), duration_s=5.0)
    cfg = RunConfig(profile="rate", rate=float("inf"), requests=40, max_concurrency=8)
    assert cfg.streams == 8 and RunConfig(profile="rate", rate=float("inf"), requests=40).streams == 40
    assert cfg.redacted_dump()["rate"] == "inf"  # JSON has no infinity; "inf" validates back


def test_kernel_stamps_are_refused_where_no_socket_carries_them() -> None:
    for target in ("https://example.com/v1", "embedded", "hf:/models/x", None):
        with pytest.raises(ValueError, match=r"--kernel-stamps\) needs a plain http:// target"):
            RunConfig(target=target, kernel_stamps=True)
    assert RunConfig(target="http://127.0.0.1:1/v1", kernel_stamps=True).kernel_stamps
    assert RunConfig(target="HTTP://127.0.0.1:1/v1", kernel_stamps=True).kernel_stamps


def test_kernel_stamps_are_refused_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokspeed.backends import kernel_stamps

    monkeypatch.setattr(kernel_stamps, "supported", lambda: False)
    with pytest.raises(ValueError, match=r"--kernel-stamps\) needs Linux"):
        RunConfig(target="http://127.0.0.1:1/v1", kernel_stamps=True)
    assert not RunConfig(target="http://127.0.0.1:1/v1").kernel_stamps  # off, nothing is checked


def test_a_pool_refuses_kernel_stamps_over_tls() -> None:
    from tokspeed.backends.http1 import Endpoint, Pool

    with pytest.raises(ValueError, match="plain http:// connection"):
        Pool(Endpoint("https://127.0.0.1:1/v1"), 1, kernel_stamps=True)
