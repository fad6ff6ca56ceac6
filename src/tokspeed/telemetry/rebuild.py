"""A run's telemetry summary rebuilt from telemetry.jsonl alone (the process died before writing it).

The `start` line says what was sampled (interval, GPUs, server and engine); the window is
the start mark to the last sample, with the client's CPU time and the GPUs' energy counters
read from the first and last samples that carry them. The output tokens come from the
rebuilt summaries, for J per token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokspeed.telemetry.engines import ENGINES
from tokspeed.telemetry.gpu import GpuInfo
from tokspeed.telemetry.log import Line, read_lines
from tokspeed.telemetry.schema import TelemetrySummary
from tokspeed.telemetry.summary import Mark, Setup, Work, summarise


def rebuild_telemetry(path: Path, output_tokens: int | None, requests: int | None) -> TelemetrySummary | None:
    """The whole-run summary of `path`, or None when it has no start line or no sample after it."""
    lines = list(read_lines(path))
    start = next((line for line in lines if line.get("kind") == "start"), None)
    samples = [line for line in lines if line.get("kind") in ("gpu", "client", "server") and isinstance(line.get("t_ns"), int)]
    if start is None or not isinstance(start.get("t_ns"), int) or not samples:
        return None
    setup = _setup(start)
    begin = _mark(start, start)
    end = _mark(samples[-1], _last_with(samples, "cpu_s") or start, _last_energies(samples))
    note = f"rebuilt from {path.name}: the run ended before its telemetry summary was written"
    summary = summarise(lines, begin, end, setup, Work(output_tokens=output_tokens, requests=requests))
    return summary.model_copy(update={"notes": [*summary.notes, note]})


def _setup(start: Line) -> Setup:
    server = start.get("server") if isinstance(start.get("server"), dict) else None
    engine = next((e for e in ENGINES if server and e.engine == server.get("engine")), None)
    gpus = [GpuInfo(index=int(g["index"]), name=g.get("name"), memory_total_mib=g.get("memory_total_mib"))
            for g in start.get("gpus") or [] if isinstance(g, dict) and "index" in g]
    return Setup(
        interval_s=float(start.get("interval_s") or 0.25),
        gpus=gpus,
        server_url=server.get("url") if server else None,
        engine=engine,
        notes=[str(n) for n in start.get("notes") or []],
    )


def _mark(at: Line, cpu_from: Line, energy: dict[int, int | None] | None = None) -> Mark:
    raw = at.get("energy_mj") if energy is None else energy
    energies = {int(k): v for k, v in (raw or {}).items()} if isinstance(raw, dict) else {}
    cpu = cpu_from.get("cpu_s")
    return Mark(t_ns=int(at["t_ns"]), cpu_s=float(cpu) if isinstance(cpu, (int, float)) else 0.0, energy_mj=energies)


def _last_with(samples: list[Line], key: str) -> Line | None:
    return next((line for line in reversed(samples) if isinstance(line.get(key), (int, float))), None)


def _last_energies(samples: list[Line]) -> dict[int, int | None]:
    """Each GPU's last cumulative energy reading (mJ)."""
    out: dict[int, Any] = {}
    for line in samples:
        if line.get("kind") == "gpu" and isinstance(line.get("gpu"), int):
            out[line["gpu"]] = line.get("energy_mj")
    return out
