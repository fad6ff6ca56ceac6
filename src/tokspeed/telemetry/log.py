"""telemetry.jsonl: one JSON object per line, appended and flushed as each sample is taken.

Every line has `kind` and `t_ns` (Unix-epoch nanoseconds, the scale of requests.jsonl):

* `start`  — what is sampled: `interval_s`, `gpus` (index, name, memory_total_mib),
  `server` (url, engine), `notes`; and `cpu_s`, `energy_mj` as a `window` line
* `gpu`    — one GPU: `gpu` (index), `utilization_pct`, `memory_used_mib`, `power_w`,
  `energy_mj` (NVML's total-energy counter), `sm_clock_mhz`, `temperature_c`
* `client` — tokspeed's process and host: `process_cpu_pct`, `host_cpu_pct`, `rss_mib`,
  `loop_lag_ms`, `cpu_s` (process user+sys CPU seconds so far)
* `server` — one scrape: `ok`, `running`, `waiting`, `kv_cache_usage_pct`, `values`
  (the engine's known metrics, summed over label sets), or `error`
* `window` — a load point's measured window opening or closing: `event` (begin/end),
  `benchmark`, `cpu_s`, `energy_mj` (by GPU index): exact snapshots for the deltas
* `stop`   — sampling ended (`cpu_s`, `energy_mj` as a `window` line)

A value a source could not give is null. A write error stops the log (noted), never the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

Line = dict[str, Any]


class TelemetryLog:
    """Appends lines to one telemetry.jsonl; reads them back from a byte offset."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._file: IO[bytes] | None = None
        try:
            self._file = open(path, "wb")  # noqa: SIM115
        except OSError as exc:
            self.error = f"cannot write {path}: {exc.strerror}"

    def append(self, line: Line) -> None:
        """Write one line and flush it (one write: a kill leaves whole lines)."""
        if self._file is None:
            return
        try:
            self._file.write(orjson.dumps(line) + b"\n")
            self._file.flush()
        except (OSError, ValueError) as exc:
            self.error = f"cannot append to {self.path}: {exc}"
            self.close()

    def position(self) -> int:
        """Bytes written so far: where the next line will start."""
        return self._file.tell() if self._file is not None else 0

    def close(self) -> None:
        """Close the file; on a full disk its close (a flush of what is buffered) fails too: the file is let go."""
        if self._file is not None:
            f, self._file = self._file, None
            try:
                f.close()
            except OSError as exc:
                self.error = self.error or f"cannot append to {self.path}: {exc}"


def read_lines(path: Path, offset: int = 0) -> Iterator[Line]:
    """The lines of a telemetry.jsonl from byte `offset`; a torn or bad line is skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            for raw in f:
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(line, dict):
                    yield line
    except OSError:
        return
