"""Raising the open-file limit for many streams, or saying how."""

from __future__ import annotations

import pytest

from tokspeed.errors import ConfigError
from tokspeed.runner.fdlimit import FD_HEADROOM, ensure_fd_limit, fds_needed


class Limits:
    def __init__(self, soft: int, hard: int, fail: bool = False) -> None:
        self.soft, self.hard, self.fail = soft, hard, fail
        self.sets: list[tuple[int, int]] = []

    def get(self) -> tuple[int, int]:
        return self.soft, self.hard

    def set(self, limits: tuple[int, int]) -> None:
        if self.fail:
            raise ValueError("not allowed")
        self.sets.append(limits)
        self.soft, self.hard = limits


def test_enough_already_changes_nothing() -> None:
    lim = Limits(4096, 4096)
    ensure_fd_limit(1000, lim.get, lim.set)
    assert lim.sets == []


def test_soft_limit_is_raised_to_the_hard_limit() -> None:
    lim = Limits(1024, 65536)
    ensure_fd_limit(1000, lim.get, lim.set)
    assert lim.sets == [(65536, 65536)] and fds_needed(1000) == 1000 + FD_HEADROOM


def test_hard_limit_too_low_is_explained() -> None:
    lim = Limits(1024, 1024)
    with pytest.raises(ConfigError, match="1000 concurrent streams need about 1128 open files") as exc:
        ensure_fd_limit(1000, lim.get, lim.set)
    assert exc.value.hint is not None and "ulimit -n 1128" in exc.value.hint


def test_refused_raise_is_explained() -> None:
    lim = Limits(256, 8192, fail=True)
    with pytest.raises(ConfigError, match="raising it failed"):
        ensure_fd_limit(1000, lim.get, lim.set)
