"""How the suite splits over pytest-xdist workers when asked for (`python -m pytest -n 2`).

One unit of work per test file, except one serial chain: the files that start a real inference
server or engine (vLLM, transformers, the embedded model), the Locust fleets, and the capacity
searches. One worker runs them one after another, so each module-scoped server starts once, two
engines never compete for the cores, and the capacity searches (whose p99 verdicts a CPU-bound
engine beside them broke: 38.75 found against a true 76.5 req/s) never run beside an engine or
a fleet, while the other worker takes everything else (simulator tests, unit tests). The chain
goes first, so it (~20 min) starts at once and the rest of the suite fills the other worker.

A scheduler of our own because `--dist loadgroup` cannot group here: pytest-xdist 3.8 tags a
grouped test by rewriting `item._nodeid`, which pytest 9 no longer reads.

The timing files (ALONE_FILES: tests that judge a latency, a rate or a capacity against a truth
with tolerances of a few ms or per cent), and tests marked `alone` elsewhere, run with the
machine to themselves: each of their tests
takes a lock that no test on the other worker holds at the same time. On a shared 2-core CI
machine a neighbour (an engine, a Locust fleet, another simulator run) had broken them in ways no
measured-noise allowance covered: a constant 100 req/s reached the server with gaps of 4.4-15.6 ms,
a cancelled stream left three unread chunks behind, a capacity search wandered for 20 probes. It
is a readers-writer lock on two files (flock, so a crashed worker releases it): every other test
takes it shared, a timing test exclusive, and a waiting timing test holds a turnstile that keeps
new shared holders out, so it is not starved. A whole test's protocol runs under the lock: the
module-scoped servers a file's first test starts are set up inside it too.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

# The results catalogue is off for the suite: no test may write to the user's data dir, and every
# `tokspeed run` subprocess inherits this (the history tests give --catalog / TOKSPEED_CATALOG a tmp path).
os.environ["TOKSPEED_CATALOG"] = "off"

SERIAL_FILES = frozenset({
    "test_real_servers.py", "test_real_workloads.py", "test_vllm_offline.py", "test_hf_backend.py",
    "test_llamacpp.py", "test_llama_server.py", "test_embedded.py", "test_locust.py", "test_capacity_truth.py",
})
SERIAL = "serial-chain"
ALONE_FILES = frozenset({
    "test_accuracy.py", "test_capacity_truth.py", "test_compare_truth.py", "test_conversations_sim.py",
    "test_locust.py", "test_locust_pacing_sim.py", "test_measurement.py", "test_mix_cancel_sim.py",
    "test_monitor_live.py", "test_percentiles_sim.py", "test_request_kinds_sim.py", "test_schedule.py",
    "test_sweeps.py",
})


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _in_chain(nodeid: str) -> bool:
    return PurePosixPath(_file_of(nodeid)).name in SERIAL_FILES


def _alone(item: pytest.Item) -> bool:
    """A test of ALONE_FILES, or one marked `alone` in a file that shares the machine otherwise."""
    return PurePosixPath(_file_of(item.nodeid)).name in ALONE_FILES or item.get_closest_marker("alone") is not None


def _lock_dir() -> Path | None:
    """A folder all workers of this run share (xdist's run id names it); None when not under xdist."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not run_id:
        return None
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"tokspeed-test-locks-{run_id}"
    d.mkdir(exist_ok=True)
    return d


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    d = _lock_dir()
    if d is None:
        yield
        return
    asked = time.time()
    with open(d / "turnstile", "a") as turnstile, open(d / "machine", "a") as machine:
        if _alone(item):
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # new shared holders wait behind this one
            fcntl.flock(machine, fcntl.LOCK_EX)  # until the other worker's test is done
        else:
            fcntl.flock(turnstile, fcntl.LOCK_SH)  # not while a timing test waits or runs
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(machine, fcntl.LOCK_SH)
        held = time.time()
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            _log_timeline(item, asked, held, time.time())


def _log_timeline(item: pytest.Item, asked: float, held: float, done: float) -> None:
    """$TOKSPEED_TEST_TIMELINE: one JSON line per test (worker, when it asked for the lock, got it, ended), to see
    where a run's time goes (`python tests/timeline.py FILE`)."""
    path = os.environ.get("TOKSPEED_TEST_TIMELINE")
    if path:
        line = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "test": item.nodeid, "alone": _alone(item),
                "asked": asked, "held": held, "done": done}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        """Work units are files, the serial chain's files one unit together."""

        def _split_scope(self, nodeid: str) -> str:
            return SERIAL if _in_chain(nodeid) else _file_of(nodeid)

    return FileScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # under xdist only: a serial run keeps the files' order
        items.sort(key=lambda item: not _in_chain(item.nodeid))  # stable: the order is kept otherwise
