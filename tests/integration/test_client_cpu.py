"""The client's CPU time counts its --workers processes, and only those children."""

from __future__ import annotations

import subprocess
import sys
import time

from tokspeed.telemetry.client import WORKER_MODULE, worker_cpu_seconds

BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\nsys.stdin.read()"


def test_worker_children_count_and_other_children_do_not() -> None:
    before = worker_cpu_seconds()
    worker = subprocess.Popen([sys.executable, "-c", BURN, WORKER_MODULE], stdin=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", BURN, "some-server"], stdin=subprocess.PIPE)
    try:
        time.sleep(1.5)  # both have burned their 0.4 s and wait on stdin
        burned = worker_cpu_seconds() - before
    finally:
        for p in (worker, other):
            p.communicate(b"", timeout=10)
    assert 0.35 <= burned < 0.75  # the worker's 0.4 s (+ start-up), not the other child's
