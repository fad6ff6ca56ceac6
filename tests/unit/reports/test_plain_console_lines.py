"""`--plain` output is a log: each line it prints stays one line, however long.

Seen on a fresh machine: rich wrapped the hf target's note at 160 columns, so
"one request at a time" came out as "one\\nrequest at a time"; where the break
fell depended on the length of the model's path (pytest-1 vs pytest-12).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tokspeed.backends.base import TargetInfo
from tokspeed.reports.console import Console
from tokspeed.runner.loops import Phase

LONG_PATH = "/tmp/pytest-of-someone/pytest-1/" + "m" * 120 + "/tiny"
NOTE = (f"hf model {LONG_PATH} (LlamaForCausalLM, 20M parameters), in-process with transformers, CPU, fp32, "
        "1 torch thread; one request at a time, in arrival order (no batching)")


def test_plain_lines_are_never_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    note = NOTE
    console = Console(plain=True)
    console.starting(SimpleNamespace(target=f"hf:{LONG_PATH}", kernel_stamps=False), Path(LONG_PATH) / "results")  # type: ignore[arg-type]
    with console.live(None) as progress:  # type: ignore[arg-type]
        progress.target_ready(TargetInfo(kind="hf", url=None, model=LONG_PATH, api="chat", stream=True,
                                         include_usage=False, notes=(note,)))
        progress.phase_started("label " * 30, Phase(iteration=1, warmup=False, n=6, duration_s=None))
        progress.phase_finished(Phase(iteration=1, warmup=False, n=6, duration_s=None))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"tokspeed: benchmarking hf:{LONG_PATH} · results in {LONG_PATH}/results"
    assert lines[1] == f"Target ready: model {LONG_PATH} at in-process"
    assert lines[2] == f"  note: {note}"
    assert lines[3].startswith("label " * 30) and lines[3].endswith(" ms") and len(lines) == 4


def test_the_first_line_says_when_reads_are_timed_by_the_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    for kernel_stamps in (True, False):
        cfg = SimpleNamespace(target="http://127.0.0.1:8000/v1", kernel_stamps=kernel_stamps)
        Console(plain=True).starting(cfg, Path("results"))  # type: ignore[arg-type]
    stamped, default = capsys.readouterr().out.splitlines()
    assert stamped == ("tokspeed: benchmarking http://127.0.0.1:8000/v1 · reads timed by the kernel's receive stamps · "
                       "results in results")
    assert default == "tokspeed: benchmarking http://127.0.0.1:8000/v1 · results in results"
