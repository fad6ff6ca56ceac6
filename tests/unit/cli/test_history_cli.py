"""`tokspeed history`'s input checks: dates and ages, tags, metric names — each a usage error (exit 2) with a hint."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from tokspeed.cli import main
from tokspeed.cli.history_cmd import _fraction, checked_metrics, moment
from tokspeed.errors import ConfigError

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)


def test_since_takes_dates_date_times_and_ages() -> None:
    assert moment("2026-01-31", "--since") == "2026-01-31T00:00:00+00:00"
    assert moment("2026-01-31T08:30+02:00", "--since") == "2026-01-31T06:30:00+00:00"
    assert moment("7d", "--since", now=NOW) == "2026-03-03T12:00:00+00:00"
    assert moment("12h", "--until", now=NOW) == "2026-03-10T00:00:00+00:00"
    with pytest.raises(ConfigError, match="neither a date nor an age"):
        moment("yesterday", "--since")


def test_unknown_metrics_suggest_the_closest() -> None:
    assert checked_metrics(["ttft_p99_ms", "ttft_p99_ms", "capacity_requests_per_s"]) == ["ttft_p99_ms", "capacity_requests_per_s"]
    with pytest.raises(ConfigError) as err:
        checked_metrics(["ttft_p99"])
    assert "ttft_p99_ms" in (err.value.hint or "")


def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cat = str(tmp_path / "c.sqlite")
    assert main(["history", "list", "--catalog", cat, "--since", "yesterday"]) == 2
    assert main(["history", "list", "--catalog", cat, "--tag", "novalue"]) == 2
    assert main(["history", "trend", "tft_p50_ms", "--catalog", cat]) == 2
    assert main(["history", "list", "--catalog", "off"]) == 2
    assert main(["run", "--target", "http://127.0.0.1:9/v1", "--tag", "=x"]) == 2  # refused before any connection
    err = capsys.readouterr().err
    assert "--tag '=x' is not KEY=VALUE" in err and "unknown metric 'tft_p50_ms'" in err


def test_an_empty_catalogue_lists_nothing_and_check_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cat = str(tmp_path / "c.sqlite")
    assert main(["history", "--help"]) == 0
    assert main(["history", "list", "--catalog", cat]) == 0
    assert "No runs in the catalogue" in capsys.readouterr().out
    assert main(["history", "check", "ttft_p99_ms", "--catalog", cat]) == 1
    assert "no catalogued run" in capsys.readouterr().err


def test_min_change_takes_a_percentage_or_a_fraction_and_says_so_when_out_of_range() -> None:
    assert _fraction("50%") == 0.5 and _fraction("0.05") == 0.05
    with pytest.raises(ConfigError, match="between 0% and 1000%, not 50") as err:
        _fraction("50")  # 5000%: a bare number is a fraction (it said "must be at least 0%")
    assert "0.5 or 50%" in (err.value.hint or "")
