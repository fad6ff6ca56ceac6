"""`tokspeed run --kernel-stamps`: the client's reads timed by the kernel, on real loopback sockets.

The check that matters: while the client's event loop is blocked (as when the OS runs another
process, or the loop is busy with other streams), a token that reaches its socket is stamped with
when it arrived, not when the loop got to it: within milliseconds of the simulator's own write
stamp (its log, the truth), and before the block ended. The loop's stamp, the default, is late by
the block. Then the stamped connection must behave as the default one: keep-alive across
requests, refusals counted as refusals, and the whole CLI run giving every token's time.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from tests.integration.harness import ClockDrift, SimServer, load_json, records

from tokspeed.backends.http1 import Endpoint, Pool, request_bytes, request_head
from tokspeed.backends.kernel_stamps import StampedTransport, supported

pytestmark = pytest.mark.skipif(not supported(), reason="kernel receive stamps on TCP are Linux's")

MS = 1_000_000
TTFT_MS, ITL_MS, BLOCK_MS = 60, 600, 400  # the first token arrives during the block, the second after it
STOP_MS = 400  # how long the CLI run's process is stopped


class Reads:
    """A response sink that keeps each body piece with the stamp it came with."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.pieces: list[tuple[int, bytes]] = []

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def on_body(self, data: bytes, now: int) -> None:
        self.pieces.append((now, data))

    def first_token_ns(self) -> int:
        return next(now for now, data in self.pieces if b'"text"' in data)


def _completion(pool: Pool, max_tokens: int) -> bytes:
    body = orjson.dumps({"model": "tokspeed-sim", "prompt": "x", "max_tokens": max_tokens, "stream": True})
    head = request_head("POST", "/v1/completions", pool.endpoint, {"Content-Type": "application/json"})
    return request_bytes(head, body)


async def _read_through_a_block(url: str, kernel_stamps: bool) -> tuple[Reads, int, int]:
    """One streamed completion whose client loop is blocked BLOCK_MS right after sending; (reads, sent, unblocked)."""
    pool = Pool(Endpoint(url), 1, kernel_stamps=kernel_stamps)
    try:
        conn, _ = await pool.acquire()
        reads = Reads()
        sent_ns = time.perf_counter_ns()
        done = conn.exchange(_completion(pool, 2), reads)
        time.sleep(BLOCK_MS / 1000)  # nothing in this loop runs: the first token waits in the socket
        unblocked_ns = time.perf_counter_ns()
        await asyncio.wait_for(done, 10)
        pool.release(conn)
    finally:
        pool.close()
    return reads, sent_ns, unblocked_ns


@pytest.mark.parametrize("kernel_stamps", [True, False], ids=["kernel", "loop"])
async def test_a_token_that_arrives_while_the_client_is_blocked_is_stamped_when_it_arrived(
    tmp_path: Path, kernel_stamps: bool
) -> None:
    sim = SimServer(tmp_path, "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    drift = ClockDrift()
    try:
        reads, sent_ns, unblocked_ns = await _read_through_a_block(f"{sim.url}/completions", kernel_stamps)
    finally:
        sim.stop()
    early_ms = drift.allowance_ms()
    assert reads.status == 200
    [truth] = sim.entries().values()
    written_ns = truth["chunk_ns"][0]  # the simulator's stamp, just before it wrote the first token
    assert sent_ns < written_ns < unblocked_ns - 100 * MS  # the token did wait in the socket during the block
    late_ms = (reads.first_token_ns() - written_ns) / MS
    if kernel_stamps:  # the kernel's stamp: the write's delivery on loopback (µs; 20 ms for a preempted sender)
        assert -early_ms < late_ms < 20 and reads.first_token_ns() < unblocked_ns, (late_ms, early_ms)
    else:  # the loop's stamp, the default: not before the loop was free to read
        assert reads.first_token_ns() >= unblocked_ns, late_ms
    second_ms = (reads.pieces[-1][0] - truth["chunk_ns"][-1]) / MS  # after the block: both stamps see it at once
    assert -early_ms < second_ms < 20, (second_ms, early_ms)


async def test_stamped_connections_are_kept_alive_and_count_refusals(tmp_path: Path) -> None:
    sim = SimServer(tmp_path, "--ttft-ms", "0", "--itl-ms", "0")
    pool = Pool(Endpoint(f"{sim.url}/completions"), 2, kernel_stamps=True)
    try:
        async def one() -> tuple[Reads, int | None, object]:
            conn, connect_ns = await pool.acquire()
            reads = Reads()
            try:
                await asyncio.wait_for(conn.exchange(_completion(pool, 5), reads), 10)
            finally:
                pool.release(conn)
            return reads, connect_ns, conn.transport

        results = await asyncio.gather(*(one() for _ in range(12)))
    finally:
        pool.close()
        sim.stop()
    assert all(r.status == 200 and b"data: [DONE]" in b"".join(p for _, p in r.pieces) for r, _, _ in results)
    assert all(isinstance(t, StampedTransport) for _, _, t in results)
    assert sum(c is not None for _, c, _ in results) == 2 and len({id(t) for _, _, t in results}) == 2  # 2 carried 12

    refused = Pool(Endpoint(sim.url), 1, kernel_stamps=True)  # the simulator is gone: its port refuses
    with pytest.raises(ConnectionRefusedError):
        await refused.acquire()
    assert refused.refusals.total == 1


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_a_run_with_kernel_stamps_times_every_token_as_the_simulator_wrote_it_though_the_client_was_stopped(
    tmp_path: Path,
) -> None:
    """The whole CLI path: the client process is stopped (SIGSTOP) for STOP_MS mid-run; every read still gets
    the time its last token reached the socket (the loop's stamps would put the reads of the stop at its end)."""
    sim = SimServer(tmp_path, "--ttft-ms", "30", "--itl-ms", "20", "--kernel-stamps")
    out = tmp_path / "out"
    drift = ClockDrift()
    try:
        client = subprocess.Popen(
            [sys.executable, "-m", "tokspeed", "run", "--target", sim.url, "--api", "completions", "--concurrency", "4",
             "--requests", "64", "--max-tokens", "8", "--kernel-stamps", "--out", str(out), "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while _lines(sim.log) < 8 and time.monotonic() < deadline:
            time.sleep(0.005)  # the probe, the warm-up and some measured requests have ended: the load is under way
        time.sleep(0.06)  # mid-request (the 4 streams end together; each takes ~170 ms): tokens are still to come
        stopped_ns = time.perf_counter_ns()
        client.send_signal(signal.SIGSTOP)
        time.sleep(STOP_MS / 1000)
        resumed_ns = time.perf_counter_ns()
        client.send_signal(signal.SIGCONT)
        _, err = client.communicate(timeout=60)
    finally:
        sim.stop()
    assert client.returncode == 0, err
    early_ms = drift.allowance_ms()
    run = load_json(out / "run.json")
    assert run["config"]["kernel_stamps"] is True
    offset, truth = run["epoch_offset_ns"], sim.entries()
    measured = [r for r in records(out) if not r["warmup"]]
    assert len(measured) == 64 and all(r["status"] == "ok" for r in measured)
    during = [ns for t in truth.values() for ns in t["chunk_ns"] if stopped_ns + 20 * MS < ns < resumed_ns]
    assert during, "no token was written while the client was stopped"
    for r in measured:
        t = truth[r["response_id"]]
        chunks = [r["sent_ns"] - offset + c for c in r["chunk_offsets_ns"]]
        assert len(chunks) == len(t["chunk_ns"]) == 8
        # tokens that waited in the socket together are read (and stamped) together: a read carries the stamp of
        # its last packet (TCP merges queued packets), so each read's stamp is when its last token arrived
        for stamp, wrote in _reads(chunks, t["chunk_ns"]):
            late_ms = (stamp - max(wrote)) / MS
            assert all(stamp > w - early_ms * MS for w in wrote) and late_ms < 20, (late_ms, early_ms, [(stamp - w) / MS for w in wrote])


def _reads(stamps: list[int], written: list[int]) -> list[tuple[int, list[int]]]:
    """The tokens grouped by the read that carried them (one stamp per read): (the read's stamp, their writes)."""
    groups: dict[int, list[int]] = {}
    for stamp, wrote in zip(stamps, written):
        groups.setdefault(stamp, []).append(wrote)
    return list(groups.items())
