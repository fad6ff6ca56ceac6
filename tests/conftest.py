"""How the suite splits over pytest-xdist workers (`-n 2`, set in pyproject.toml's addopts).

One unit of work per test file, except the files that start a real inference server or engine
(vLLM, transformers, the embedded model), which are one unit: one worker runs them one after
another, so each module-scoped server starts once and two engines never compete for the cores,
while the other worker takes everything else. That unit goes first, so the longest chain
(~13 min) starts at once and the rest of the suite fills the other worker around it.

A scheduler of our own because `--dist loadgroup` cannot group here: pytest-xdist 3.8 tags a
grouped test by rewriting `item._nodeid`, which pytest 9 no longer reads.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

REAL_SERVER_FILES = frozenset({
    "test_real_servers.py", "test_real_workloads.py", "test_vllm_offline.py", "test_hf_backend.py",
    "test_llamacpp.py", "test_embedded.py",
})
REAL_SERVERS = "real-servers"


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _is_real_server(nodeid: str) -> bool:
    return PurePosixPath(_file_of(nodeid)).name in REAL_SERVER_FILES


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        """Work units are files, the real-server files one unit together."""

        def _split_scope(self, nodeid: str) -> str:
            return REAL_SERVERS if _is_real_server(nodeid) else _file_of(nodeid)

    return FileScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not _is_real_server(item.nodeid))  # stable: the order is kept otherwise
