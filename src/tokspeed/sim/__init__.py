"""A simulated OpenAI-compatible streaming server with known, logged timings (tests, demos).

Blocking, from a script: `run_server(SimConfig(ttft_ms=30, itl_ms=5, log_path=Path("sim.jsonl")))`.
Inside an event loop: run `make_app(cfg)` with aiohttp's `AppRunner` and `TCPSite`.
With faults: `SimConfig(faults={Fault.HTTP_429: 0.1, Fault.DISCONNECT: 0.05}, seed=7)`.
"""

from __future__ import annotations

from tokspeed.sim.config import SimConfig
from tokspeed.sim.faults import Fault
from tokspeed.sim.log import LogEntry, SimStatus
from tokspeed.sim.server import make_app, run_server

__all__ = ["Fault", "LogEntry", "SimConfig", "SimStatus", "make_app", "run_server"]
