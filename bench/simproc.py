"""Start and stop `tokspeed sim` for the bench scripts (subprocesses on an ephemeral port)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

URL = re.compile(rb"listening on (http://\S+/v1)")


def pin(proc: subprocess.Popen[bytes], cpus: set[int] | None) -> subprocess.Popen[bytes]:
    """Pin a just-started child (and the threads it starts from now on) to `cpus`; None: leave it."""
    if cpus:
        os.sched_setaffinity(proc.pid, cpus)
    return proc


def start_sim(*args: str, cpus: set[int] | None = None, port: str = "0") -> tuple[subprocess.Popen[bytes], str]:
    """`tokspeed sim --port PORT ARGS` (pinned to `cpus` if given); returns the process and its base URL (…/v1)."""
    proc = pin(subprocess.Popen([sys.executable, "-m", "tokspeed", "sim", "--port", port, *args], stdout=subprocess.PIPE), cpus)
    assert proc.stdout is not None
    m = URL.search(proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("simulator did not start")
    return proc, m.group(1).decode()


def start_sims(n: int, *args: str) -> tuple[list[subprocess.Popen[bytes]], str]:
    """`n` simulators sharing one port (`--reuse-port`: the kernel spreads connections among them)."""
    if n == 1:
        proc, url = start_sim(*args)
        return [proc], url
    first, url = start_sim("--reuse-port", *args)
    port = url.rsplit(":", 1)[1].removesuffix("/v1")
    procs = [first]
    try:
        for _ in range(n - 1):
            procs.append(start_sim("--reuse-port", *args, port=port)[0])
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    return procs, url


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
