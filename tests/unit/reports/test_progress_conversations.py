"""The live progress line of a multi-turn run: `--requests N` counts conversations, not requests.

Seen against vLLM: `--multi-turn 3 --requests 3` printed "iteration 1: 9/3 done".
"""

from __future__ import annotations

from tokspeed.records import RequestRecord
from tokspeed.reports.console import Progress
from tokspeed.runner.loops import Phase


def _finished(index: int, conversation: int | None) -> RequestRecord:
    return RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=1, conversation=conversation,
                         turn=None if conversation is None else index % 3 + 1)


def test_multi_turn_progress_counts_requests_of_conversations() -> None:
    progress = Progress(None)
    progress.phase_started("1 user × 3 turns", Phase(iteration=1, warmup=False, n=3, duration_s=None))
    for i in range(9):
        progress.started(_finished(i, i // 3))
        progress.record(_finished(i, i // 3))
    line = progress.line()
    assert "9 requests of 3/3 conversations done" in line and "9/3" not in line


def test_single_requests_keep_done_over_n() -> None:
    progress = Progress(None)
    progress.phase_started("4 streams", Phase(iteration=1, warmup=False, n=10, duration_s=None))
    for i in range(4):
        progress.record(_finished(i, None))
    assert "iteration 1: 4/10 done" in progress.line()
