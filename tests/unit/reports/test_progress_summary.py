"""A long point says it is being summarised once its load is over, rather than falling silent."""

from __future__ import annotations

from io import StringIO

from rich.console import Console as RichConsole

from tokspeed.reports.console import SUMMARY_NOTICE_REQUESTS, Progress
from tokspeed.runner.loops import Phase


def test_a_large_point_announces_its_summary_on_the_plain_console_and_the_live_line() -> None:
    out = StringIO()
    progress = Progress(RichConsole(file=out, width=200))
    progress.phase_started("64 streams", Phase(iteration=1, warmup=False, n=None, duration_s=60.0))
    progress.summarising("64 streams", 20_000)
    assert "64 streams: summarising 20,000 requests…" in out.getvalue()
    assert progress.line().endswith("· summarising 20,000 requests…")
    progress.phase_started("128 streams", Phase(iteration=1, warmup=False, n=None, duration_s=60.0))
    assert "summarising" not in progress.line()  # the next point starts afresh


def test_a_small_point_says_nothing() -> None:
    out = StringIO()
    progress = Progress(RichConsole(file=out, width=200))
    progress.summarising("4 streams", SUMMARY_NOTICE_REQUESTS - 1)
    assert out.getvalue() == "" and "summarising" not in progress.line()
