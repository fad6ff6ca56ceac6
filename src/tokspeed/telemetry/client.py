"""tokspeed's own process and the host it runs on: CPU, memory, CPU time (psutil and os.times).

`process_cpu_seconds()` is exact (the kernel's user+system time of this process and all its
threads, children excluded; getrusage's microseconds where there is one, os.times' clock ticks
elsewhere), so a window's CPU cost is the difference of two calls, not an integral of samples.
`client_cpu_seconds()` adds the live `--workers` client processes (by psutil), for the window
marks: with workers, most of the client's CPU is theirs.
The percentages are psutil's, each since the previous `read()`: process CPU in units of one
core (100 = one core busy, can exceed 100 with threads), host CPU over all cores (100 = every
core busy).
"""

from __future__ import annotations

import os
from typing import Any

MIB = 2**20
WORKER_MODULE = "tokspeed.cli.client_worker"  # the --workers client processes (see cli/workers.py)


def process_cpu_seconds() -> float:
    """User + system CPU seconds this process has used so far."""
    try:
        import resource
    except ImportError:  # Windows: os.times, in clock ticks
        t = os.times()
        return t.user + t.system
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_cpu_seconds() -> float:
    """User + system CPU seconds used so far by this process's live `--workers` client processes.

    Only those children count: a server tokspeed started for a local target is not the client.
    """
    import psutil

    total = 0.0
    for child in psutil.Process().children():
        try:
            if WORKER_MODULE in child.cmdline():
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.Error:  # exited between the listing and the reading
            continue
    return total


def client_cpu_seconds() -> float:
    """The client's CPU seconds so far: this process and its `--workers` processes."""
    return process_cpu_seconds() + worker_cpu_seconds()


class ClientProbe:
    """Reads the process and host figures; the first `read()` measures from construction."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # prime: each call measures since the previous one
        psutil.cpu_percent(None)
        self.cpu_count: int | None = psutil.cpu_count()

    def read(self) -> dict[str, Any]:
        """One sample (loop lag is added by the sampler, which knows when it meant to wake)."""
        return {
            "process_cpu_pct": self._process.cpu_percent(None),
            "host_cpu_pct": self._psutil.cpu_percent(None),
            "rss_mib": self._process.memory_info().rss / MIB,
            "cpu_s": process_cpu_seconds(),
        }
