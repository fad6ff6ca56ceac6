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
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
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


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _in_chain(nodeid: str) -> bool:
    return PurePosixPath(_file_of(nodeid)).name in SERIAL_FILES


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
