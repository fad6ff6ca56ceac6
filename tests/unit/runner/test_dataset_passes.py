"""An iteration over a prompt file is one pass over it, for every target; --offline submits it at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokspeed.cli import main
from tokspeed.config import RunConfig, config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.runner.passes import check_offline, dataset_passes, embedded_defaults

FILE = {"kind": "file", "items": 8}
HTTP = "http://127.0.0.1:8000/v1"


def _cfg(**given: object) -> RunConfig:
    return config_from_sources(None, {"target": HTTP, "iterations": 3, **given})


def _passes(cfg: RunConfig, workload: dict[str, object] = FILE, offline: bool = False) -> RunConfig:
    return dataset_passes(cfg, workload, cfg.model_fields_set, offline=offline)


def test_a_server_gets_one_pass_over_the_file_per_iteration() -> None:
    cfg = _passes(_cfg())
    assert (cfg.measured_requests, cfg.profile, cfg.iterations) == (8, "synchronous", 3)
    cfg = _passes(_cfg(profile="concurrency", concurrency=4))
    assert (cfg.measured_requests, cfg.concurrency) == (8, 4)


def test_an_explicit_limit_or_a_set_without_a_size_keeps_its_count() -> None:
    assert _passes(_cfg(requests=20)).measured_requests == 20
    assert _passes(_cfg(duration_s=30)).measured_requests is None
    assert _passes(_cfg(), {"kind": "builtin", "items": 52}).measured_requests == 100
    assert _passes(_cfg(), {"kind": "synthetic", "items": None}).measured_requests == 100
    assert _passes(_cfg(multi_turn=3)).measured_requests == 100  # --requests counts conversations there


def test_the_embedded_models_default_count_gives_way_to_the_file() -> None:
    user = config_from_sources(None, {"iterations": 2})
    cfg = embedded_defaults(user)
    assert cfg.measured_requests == 100
    assert dataset_passes(cfg, FILE, user.model_fields_set, offline=False).measured_requests == 8


def test_offline_submits_the_pass_at_once_after_one_warmup_request_on_a_server_too() -> None:
    cfg = _passes(_cfg(offline=True), offline=True)
    assert (cfg.profile, cfg.concurrency, cfg.measured_requests, cfg.warmup_requests) == ("concurrency", 8, 8, 1)
    cfg = _passes(_cfg(offline=True, requests=16), offline=True)
    assert (cfg.concurrency, cfg.measured_requests) == (16, 16)


def test_offline_refuses_a_load_profile_of_its_own() -> None:
    cfg = _cfg(offline=True, profile="concurrency", concurrency=4)
    with pytest.raises(ConfigError, match="--offline sets the load itself"):
        check_offline(cfg, cfg.model_fields_set)
    with pytest.raises(ConfigError, match="cannot be combined"):
        _passes(_cfg(offline=True, multi_turn=2), offline=True)


def test_the_cli_names_offline_and_refuses_it_beside_concurrency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(["a", "b"]), encoding="utf-8")
    rc = main(["run", "--target", HTTP, "--dataset", str(prompts), "--offline", "--concurrency", "4", "--out", str(tmp_path / "r")])
    assert rc == 2 and "--offline sets the load itself" in capsys.readouterr().err
