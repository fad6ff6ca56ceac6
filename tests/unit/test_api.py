"""The public API's surface: `tokspeed.api.__all__` sorted and importable, the package root re-exporting it
lazily (`import tokspeed` loads nothing else), and the library calls that need no server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tokspeed
from tokspeed import api


def test_the_api_and_the_package_root_export_the_same_sorted_names() -> None:
    assert api.__all__ == sorted(api.__all__)
    assert all(hasattr(api, name) for name in api.__all__)
    public = set(api.__all__) - {"Backend", "build_backend", "build_workload"}  # building blocks: tokspeed.api only
    assert set(tokspeed.__all__) == public | {"__version__"}
    assert tokspeed.__all__ == sorted(tokspeed.__all__)
    assert tokspeed.run is api.run and tokspeed.Result is api.Result
    with pytest.raises(AttributeError):
        tokspeed.no_such_name  # noqa: B018


def test_importing_the_package_loads_no_layer() -> None:
    code = "import sys, tokspeed; print(sorted(m for m in sys.modules if m.startswith('tokspeed')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tokspeed', 'tokspeed.version']"


def test_config_validates_and_says_what_is_wrong() -> None:
    cfg = api.config(target="http://127.0.0.1:9/v1", concurrency=3, duration_s="2s")
    assert (cfg.profile, cfg.concurrency, cfg.duration_s) == ("concurrency", 3, 2.0)
    with pytest.raises(api.ConfigError):
        api.config(concurrency=0)


def test_load_run_of_a_missing_directory_raises_a_results_error(tmp_path: Path) -> None:
    with pytest.raises(api.ResultsError):
        api.load_run(tmp_path / "none")


def test_compare_needs_two_runs() -> None:
    with pytest.raises(api.ConfigError):
        api.compare("a")


def test_estimate_gives_one_point_per_concurrency() -> None:
    est = api.estimate("llama-3-8b", "h100-sxm", concurrency=[1, 16])
    assert [p.concurrency for p in est.points] == [1, 16]
    assert est.points[1].decode_tokens_per_s > est.points[0].decode_tokens_per_s
