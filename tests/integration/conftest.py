"""Fixtures for integration tests: simulator subprocesses that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import SimServer


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., SimServer]]:
    started: list[SimServer] = []

    def start(*args: str) -> SimServer:
        sim = SimServer(tmp_path, *args)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
