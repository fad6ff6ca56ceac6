"""The accuracy tests' tolerance (`test_accuracy.assert_explained`) on made-up runs: it forgives
the scheduling delay a run measured in itself, however large, and nothing more.

The lags drawn are those seen on 2 cores (harness.Noise): idle, a send lag of ~0.2 ms and a
chunk delivery lag of ~0.2 ms; loaded (64 streams, load average 5), ~20 ms and ~3 ms.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import Pair
from test_accuracy import MS, assert_explained, end, first_token

QUIET, LOADED = (0.2, 0.2), (20.0, 3.0)  # (send lag, delivery lag) means, ms


def made_up_run(send_ms: float, delivery_ms: float, *, first_token_late_ms: float = 0.0, end_late_ms: float = 0.0,
                n: int = 256, seed: int = 0) -> tuple[float, float, list[Pair]]:
    """n requests of 32 one-token chunks, 40 ms TTFT and 5 ms ITL, through exponential lags; their mean TTFT and E2E."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = 10**12 + i * 200 * int(MS)
        received = sent + int(rng.exponential(send_ms) * MS)
        start = received + int(rng.exponential(send_ms) * MS)  # the server's own queue: part of the truth
        sim_chunks = start + 40 * int(MS) + np.arange(32) * 5 * int(MS) + (rng.exponential(delivery_ms, 32) * MS).astype(int)
        client_chunks = sim_chunks + (rng.exponential(delivery_ms, 32) * MS).astype(int)
        client_chunks[0] += int(first_token_late_ms * MS)
        sim = {"received_ns": received, "start_ns": start, "first_token_ns": int(sim_chunks[0]) + 10_000,
               "end_ns": int(sim_chunks[-1]) + 100_000, "chunk_ns": sim_chunks.tolist(), "chunk_tokens": [1] * 32,
               "prefill_ns": 40 * int(MS), "itl_ns": 5 * int(MS)}
        client = {"sent_ns": sent, "chunk_offsets_ns": (client_chunks - sent).tolist(),
                  "end_ns": int(client_chunks[-1]) + int(end_late_ms * MS)}  # [DONE] comes with the last chunk
        out.append(Pair(client=client, sim=sim, offset=0))
    ttft = float(np.mean([(p.client_chunks[0] - p.c("sent_ns")) / MS for p in out]))
    e2e = float(np.mean([(p.c("end_ns") - p.c("sent_ns")) / MS for p in out]))
    return ttft, e2e, out


def truth(p: Pair) -> int:
    return int(p.sim["first_token_ns"])


def true_end(p: Pair) -> int:
    return int(p.sim["end_ns"])


@pytest.mark.parametrize("send_ms,delivery_ms", [QUIET, LOADED], ids=["idle", "loaded"])
def test_the_lag_a_run_measured_is_forgiven(send_ms: float, delivery_ms: float) -> None:
    for seed in range(20):
        ttft, e2e, ps = made_up_run(send_ms, delivery_ms, seed=seed)
        assert_explained("TTFT", ttft, ps, first_token, truth)
        assert_explained("E2E", e2e, ps, end, true_end, back="last")


@pytest.mark.parametrize("send_ms,delivery_ms", [QUIET, LOADED], ids=["idle", "loaded"])
def test_a_first_token_or_end_stamped_3_ms_late_is_not(send_ms: float, delivery_ms: float) -> None:
    for seed in range(20):
        ttft, e2e, ps = made_up_run(send_ms, delivery_ms, first_token_late_ms=3.0, end_late_ms=3.0, seed=seed)
        with pytest.raises(AssertionError, match="beyond what this run's lag explains"):
            assert_explained("TTFT", ttft, ps, first_token, truth)
        with pytest.raises(AssertionError, match="beyond what this run's lag explains"):
            assert_explained("E2E", e2e, ps, end, true_end, back="last")


def test_a_summary_that_is_not_what_the_records_hold_fails() -> None:
    ttft, _, ps = made_up_run(*QUIET)
    with pytest.raises(AssertionError, match="not what the records hold"):
        assert_explained("TTFT", ttft + 0.5, ps, first_token, truth)
