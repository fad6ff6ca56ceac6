"""Reading the kernel's receive stamp out of recvmsg's ancillary data onto the log's clock."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tokspeed.backends.kernel_stamps import SCM_TIMESTAMPNS, stamp_of
from tokspeed.errors import ConfigError
from tokspeed.sim import SimConfig


def _timespec(ns: int) -> bytes:
    return struct.pack("qq", ns // 1_000_000_000, ns % 1_000_000_000)


def test_a_real_time_stamp_lands_on_the_monotonic_clock_at_the_same_instant() -> None:
    ago_ns = 3_000_000  # the packet arrived 3 ms ago
    before = time.perf_counter_ns()
    stamp = stamp_of([(socket.SOL_SOCKET, SCM_TIMESTAMPNS, _timespec(time.time_ns() - ago_ns))])
    after = time.perf_counter_ns()
    assert stamp is not None
    assert before - ago_ns - 1_000_000 <= stamp <= after - ago_ns  # 1 ms for the clocks read apart


def test_no_stamp_without_the_timestamp_message() -> None:
    assert stamp_of([]) is None
    assert stamp_of([(socket.SOL_SOCKET, SCM_TIMESTAMPNS + 1, _timespec(1))]) is None
    assert stamp_of([(socket.IPPROTO_TCP, SCM_TIMESTAMPNS, _timespec(1))]) is None


def test_kernel_stamps_are_refused_with_a_reason_where_the_kernel_cannot_give_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tokspeed.sim import server

    monkeypatch.setattr(server, "kernel_stamps_supported", lambda: False)
    with pytest.raises(ConfigError, match="--kernel-stamps needs Linux"):
        server.run_server(SimConfig(), port=0, kernel_stamps=True)
