"""The worker's side of moving records to the master: finished records, batched, with worker facts.

A Locust worker keeps its own monotonic clock. Each record is serialised on the worker with
that worker's epoch offset (`to_json_dict(epoch_offset_ns)`), so every time in a batch is Unix-
epoch nanoseconds and every duration (TTFT, ITL, E2E) was computed from one worker's monotonic
clock; the batch header carries the worker's wall anchor so the master can say how each
worker's clock was placed. A batch is due every `interval_s` or at `max_records`, and at stop.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from tokspeed.records import RequestRecord

MESSAGE_TYPE = "tokspeed_records"  # the Locust custom message that carries a batch
BATCH_INTERVAL_S = 0.5
BATCH_MAX_RECORDS = 500


@dataclass(frozen=True)
class ClockAnchor:
    """One worker's clock: wall time and monotonic time read together, at the worker's start."""

    wall_ns: int
    mono_ns: int

    @property
    def epoch_offset_ns(self) -> int:
        return self.wall_ns - self.mono_ns

    @classmethod
    def now(cls) -> ClockAnchor:
        mono0 = time.perf_counter_ns()
        wall = time.time_ns()
        mono1 = time.perf_counter_ns()
        return cls(wall_ns=wall, mono_ns=(mono0 + mono1) // 2)


@dataclass
class RecordBatcher:
    """Collects one worker's finished records and hands them out as message payloads."""

    worker_id: str
    anchor: ClockAnchor
    interval_s: float = BATCH_INTERVAL_S
    max_records: int = BATCH_MAX_RECORDS
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    _pending: list[dict[str, Any]] = field(default_factory=list)
    _last_sent: float = field(default_factory=time.monotonic)
    _sequence: int = 0
    sent_records: int = 0

    def add(self, record: RequestRecord) -> None:
        self._pending.append(record.to_json_dict(self.anchor.epoch_offset_ns))

    def due(self, now: float | None = None) -> bool:
        """Whether a batch should go now (records waiting, and the interval passed or the batch is full)."""
        if not self._pending:
            return False
        elapsed = (time.monotonic() if now is None else now) - self._last_sent
        return elapsed >= self.interval_s or len(self._pending) >= self.max_records

    def take(self, worker_index: int, cpu_percent: float | None, final: bool = False) -> dict[str, Any]:
        """The pending records as one payload (possibly empty when `final`), and forget them."""
        records, self._pending = self._pending, []
        self._last_sent = time.monotonic()
        self._sequence += 1
        self.sent_records += len(records)
        return {
            "worker": self.worker_id,
            "index": worker_index,
            "host": self.host,
            "pid": self.pid,
            "sequence": self._sequence,
            "final": final,
            "wall_anchor_ns": self.anchor.wall_ns,
            "mono_anchor_ns": self.anchor.mono_ns,
            "epoch_offset_ns": self.anchor.epoch_offset_ns,
            "cpu_percent": cpu_percent,
            "records": records,
        }

    @property
    def pending(self) -> int:
        return len(self._pending)
