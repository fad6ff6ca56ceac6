"""Trace replay timing: which rows of a trace are sent, and when.

    --trace FILE --trace-speed S --trace-window START:END

The window is in the trace's own time (seconds from its first request): rows
with START ≤ t < END are kept (either bound may be left out: `60s:`, `:180s`).
Row j of the kept rows is sent at offset (t_j − START) / S from the phase start
(START = 0 without a window), so a speed of 2 replays the trace twice as fast,
and the gaps between requests are the trace's gaps divided by S. Request index j
(0-based, in time order) is row j, whose input and output lengths the workload
uses (`tokspeed.workload.trace_source`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tokspeed.errors import ConfigError, WorkloadError
from tokspeed.load.timeline import NS, Timeline
from tokspeed.units import parse_duration
from tokspeed.workload.trace_formats import TraceFile, TraceRow, read_trace

WINDOW_HINT = "use START:END in trace time, e.g. 60s:180s, 0:5m, 120s: (to the end)"


@dataclass(frozen=True)
class TraceWindow:
    """[start_s, end_s) of trace time; end None = to the trace's end."""

    start_s: float = 0.0
    end_s: float | None = None

    def __str__(self) -> str:
        return f"{self.start_s:g}s:{'' if self.end_s is None else f'{self.end_s:g}s'}"


def parse_window(text: str | None) -> TraceWindow:
    """`START:END` (durations; either may be empty) -> TraceWindow."""
    if text is None or not text.strip():
        return TraceWindow()
    start, sep, end = text.partition(":")
    if not sep:
        raise ConfigError(f"--trace-window {text!r} is not START:END", hint=WINDOW_HINT)
    s = parse_duration(start) if start.strip() else 0.0
    e = parse_duration(end) if end.strip() else None
    if e is not None and e <= s:
        raise ConfigError(f"--trace-window {text!r}: END must come after START", hint=WINDOW_HINT)
    return TraceWindow(s, e)


@dataclass(frozen=True)
class Replay:
    """The rows of a trace to replay, and how: the window and speed applied."""

    trace: TraceFile
    rows: tuple[TraceRow, ...]
    window: TraceWindow
    speed: float

    def offsets_ns(self) -> np.ndarray:
        """Row j's send offset: round((t_j − START) / speed × 10^9) ns."""
        t = np.asarray([r.time_s for r in self.rows], dtype=np.float64)
        return np.round((t - self.window.start_s) / self.speed * NS).astype(np.int64)

    def timeline(self) -> Timeline:
        details = {
            "trace": self.trace.path,
            "trace_format": self.trace.format,
            "trace_speed": self.speed,
            "trace_window": str(self.window),
            "trace_rows": len(self.trace.rows),
            "trace_skipped": self.trace.skipped,
        }
        return Timeline("trace", self.offsets_ns(), details=details)


def load_replay(path: str, fmt: str = "auto", speed: float = 1.0, window: str | None = None) -> Replay:
    """Read the trace and keep the rows inside the window.

    The parsed trace is memoised per (path, size, modification time, format): a run asks for it
    several times (config, workload, plan) and a public trace has millions of rows. The result is
    immutable, so sharing it is safe; a changed file is read again.
    """
    if speed <= 0:
        raise ConfigError(f"--trace-speed must be positive, not {speed:g}")
    w = parse_window(window)
    try:
        st = os.stat(path)
        trace = _read_cached(path, st.st_size, st.st_mtime_ns, fmt)
    except OSError:
        trace = read_trace(path, fmt)  # says why it cannot be read
    rows = select(trace.rows, w)
    if not rows:
        raise WorkloadError(
            f"trace {path} has no request inside --trace-window {w}",
            hint=f"it spans 0s to {trace.rows[-1].time_s:g}s of trace time",
        )
    return Replay(trace, rows, w, speed)


def select(rows: tuple[TraceRow, ...], window: TraceWindow) -> tuple[TraceRow, ...]:
    """The rows with start ≤ time < end."""
    end = float("inf") if window.end_s is None else window.end_s
    return tuple(r for r in rows if window.start_s <= r.time_s < end)


@lru_cache(maxsize=4)
def _read_cached(path: str, size: int, mtime_ns: int, fmt: str) -> TraceFile:
    """`read_trace`, keyed by the file's identity as well (see `load_replay`)."""
    return read_trace(path, fmt)
