"""tokspeed's numbers against the simulator's logged ground truth, over real loopback HTTP.

Every test runs the real CLI in a subprocess against a real simulator
subprocess. Both log CLOCK_MONOTONIC nanoseconds, so each request's client
view can be compared with what the server actually did and when.
Tolerances are set to catch real bugs (a role chunk counted as a token moves
TTFT by ~40 ms; a per-chunk instead of per-token ITL moves it 4x).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from harness import Pair, SimServer, load_json, pairs, records, run_cli

TTFT_MS, ITL_MS, TOKENS = 40.0, 5.0, 32
MS = 1e6


def run(sim: SimServer, out: Path, *args: str) -> dict:
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return load_json(out / "run.json")


def summary(result: dict) -> dict:
    return result["benchmarks"][0]["summary"]


def true_ttft_ms(ps: list[Pair]) -> float:
    return float(np.mean([(p.sim["first_token_ns"] - p.sim["received_ns"]) / MS for p in ps]))


def true_itl_ms(ps: list[Pair]) -> float:
    vals = []
    for p in ps:
        gaps = np.diff(p.sim_chunks) / MS
        tokens = np.asarray(p.sim["chunk_tokens"][1:], dtype=float)
        vals.extend(np.repeat(gaps / tokens, tokens.astype(int)))
    return float(np.mean(vals))


def assert_causal(ps: list[Pair]) -> None:
    """The client cannot send after the server received, nor see a chunk before it was written."""
    for p in ps:
        assert p.c("sent_ns") <= p.sim["received_ns"]
        assert len(p.client_chunks) == len(p.sim_chunks)
        assert (p.client_chunks >= p.sim_chunks).all()
        # and it saw each chunk promptly (generous: 2 cores shared by client and server)
        assert np.median(p.client_chunks - p.sim_chunks) < 5 * MS


@pytest.mark.parametrize("concurrency,requests", [(1, 20), (8, 80), (64, 256)])
def test_ttft_itl_tpot_e2e_throughput_match_truth(
    start_sim: Callable[..., SimServer], tmp_path: Path, concurrency: int, requests: int
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    result = run(sim, tmp_path / "r", "--concurrency", str(concurrency), "--requests", str(requests),
                 "--max-tokens", str(TOKENS))
    s = summary(result)
    ps = pairs(tmp_path / "r", sim)
    assert len(ps) == requests == s["requests"]["completed"]
    assert_causal(ps)

    assert s["ttft_ms"]["mean"] == pytest.approx(true_ttft_ms(ps), abs=3.0)
    if concurrency <= 8:  # at 64 streams on 2 cores the simulator itself runs late; the truth check above holds
        assert s["ttft_ms"]["mean"] == pytest.approx(TTFT_MS, abs=5.0)  # the role-only chunk is not a token
    assert s["itl_ms"]["mean"] == pytest.approx(true_itl_ms(ps), abs=1.0)
    assert s["itl_ms"]["count"] == requests * (TOKENS - 1)
    true_e2e = np.mean([(p.sim["end_ns"] - p.sim["received_ns"]) / MS for p in ps])
    # 64 streams share 2 cores with the simulator: allow the client a little more scheduling delay
    assert s["e2e_ms"]["mean"] == pytest.approx(true_e2e, abs=3.0 if concurrency <= 8 else 5.0)
    true_tpot = np.mean([(p.sim["end_ns"] - p.sim["first_token_ns"]) / MS / (TOKENS - 1) for p in ps])
    assert s["tpot_ms"]["mean"] == pytest.approx(true_tpot, abs=1.0)
    assert s["output_tokens"]["mean"] == TOKENS
    assert s["tokens"]["output_sources"] == {"usage": requests}

    # throughput: against the simulator's own timeline (tokens / its busy window)
    first = min(p.sim["received_ns"] for p in ps)
    last = max(p.sim["end_ns"] for p in ps)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(requests * TOKENS / ((last - first) / 1e9), rel=0.03)
    if concurrency <= 8:  # and against the analytic value where the server keeps its schedule
        per_request_s = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000
        analytic = concurrency * TOKENS / per_request_s
        assert s["throughput"]["output_tokens_per_s"] == pytest.approx(analytic, rel=0.03)


def test_multi_token_chunks_give_per_token_itl(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "30", "--itl-ms", "4", "--tokens-per-chunk", "4")
    s = summary(run(sim, tmp_path / "r", "--concurrency", "4", "--requests", "24", "--max-tokens", "32"))
    ps = pairs(tmp_path / "r", sim)
    assert_causal(ps)
    assert s["chunk_gap_ms"]["mean"] == pytest.approx(16.0, abs=1.5)  # 4 tokens x 4 ms
    assert s["itl_ms"]["mean"] == pytest.approx(true_itl_ms(ps), abs=1.0)
    assert s["itl_ms"]["mean"] == pytest.approx(4.0, abs=1.0)
    assert s["output_tokens"]["mean"] == 32  # usage, not the 8 chunks
    assert s["tokens"]["output_sources"] == {"usage": 24}
    # TPOT spans every token: (E2E - TTFT) / 31 = 7 chunk gaps x 16 ms / 31
    assert s["tpot_ms"]["mean"] == pytest.approx(7 * 16 / 31, abs=0.6)


def test_without_usage_tokens_are_counted_by_chunk_and_flagged(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--tokens-per-chunk", "2", "--no-usage")
    result = run(sim, tmp_path / "r", "--requests", "5", "--max-tokens", "16")
    s = summary(result)
    assert s["output_tokens"]["mean"] == 8
    assert s["tokens"]["output_sources"] == {"chunks": 5}
    # flagged once, by the diagnosis (with its evidence), not also as a plain warning
    flagged = [f for f in result["diagnosis"] if f["rule"] == "token_count"]
    assert flagged and "counted as one per chunk" in flagged[0]["title"] and flagged[0]["evidence"]["chunk_counted"] == 5
    assert not any("counted as one per chunk" in w for w in result["warnings"])


def test_server_rejecting_stream_options_falls_back(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--reject-stream-options")
    result = run(sim, tmp_path / "r", "--requests", "4", "--max-tokens", "8")
    assert result["target"]["include_usage"] is False
    assert summary(result)["requests"]["completed"] == 4
    assert summary(result)["output_tokens"]["mean"] == 8


def test_reasoning_tokens_start_ttft_and_answer_comes_later(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "30", "--itl-ms", "5", "--reasoning-tokens", "8")
    s = summary(run(sim, tmp_path / "r", "--requests", "6", "--max-tokens", "20"))
    assert s["ttft_ms"]["mean"] == pytest.approx(30, abs=4)
    assert s["ttfa_ms"]["mean"] == pytest.approx(30 + 8 * 5, abs=4)
    assert s["output_tokens"]["mean"] == 20  # reasoning and content tokens alike


def test_completions_api_sse_comments_and_crlf(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "3", "--sse-comments", "--crlf")
    s = summary(run(sim, tmp_path / "r", "--api", "completions", "--requests", "6", "--max-tokens", "16"))
    ps = pairs(tmp_path / "r", sim)
    assert_causal(ps)
    assert s["requests"]["completed"] == 6
    assert s["ttft_ms"]["mean"] == pytest.approx(true_ttft_ms(ps), abs=3)
    assert s["itl_count" if False else "itl_ms"]["count"] == 6 * 15


def test_prefill_time_scales_with_prompt_length(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--per-prompt-token-us", "100")
    s = summary(run(sim, tmp_path / "r", "--dataset", "synthetic", "--input-tokens", "200",
                    "--requests", "6", "--max-tokens", "4"))
    assert s["input_tokens"]["mean"] == 200  # server usage agrees with the synthetic length
    assert s["ttft_ms"]["mean"] == pytest.approx(10 + 200 * 0.1, abs=3)


def test_server_queueing_shows_in_ttft(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "2", "--max-concurrency", "2")
    s = summary(run(sim, tmp_path / "r", "--concurrency", "4", "--requests", "16", "--max-tokens", "10",
                    "--warmup", "0"))
    ps = pairs(tmp_path / "r", sim)
    assert_causal(ps)
    assert s["ttft_ms"]["mean"] == pytest.approx(true_ttft_ms(ps), abs=3)
    assert s["ttft_ms"]["max"] > 20 + 15  # some requests waited for a slot (20 + 9 x 2 ms)


def test_non_streaming_measures_e2e_only(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "2")
    s = summary(run(sim, tmp_path / "r", "--no-stream", "--requests", "5", "--max-tokens", "11"))
    assert s["ttft_ms"]["count"] == 0 and s["itl_ms"]["count"] == 0
    assert s["e2e_ms"]["mean"] == pytest.approx(20 + 10 * 2, abs=4)
    assert s["output_tokens"]["mean"] == 11


def test_warmup_is_recorded_but_excluded(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    s = summary(run(sim, tmp_path / "r", "--concurrency", "2", "--warmup", "5", "--requests", "10",
                    "--max-tokens", "4"))
    recs = records(tmp_path / "r")
    assert len(recs) == 15 and sum(r["warmup"] for r in recs) == 5
    assert s["requests"]["total"] == 10 and s["ttft_ms"]["count"] == 10


def test_poisson_rate_schedule_is_kept(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    s = summary(run(sim, tmp_path / "r", "--rate", "40", "--requests", "120", "--max-tokens", "4",
                    "--warmup", "0", "--seed", "3", "--exact-rate"))
    recs = sorted(records(tmp_path / "r"), key=lambda r: r["scheduled_ns"])
    gaps = np.diff([r["scheduled_ns"] for r in recs]) / 1e9
    assert np.sum(gaps) == pytest.approx(119 / 40, rel=1e-6)  # --exact-rate: the drawn gaps rescaled to 120/40 s
    assert s["schedule"]["offered_requests_per_s"] == pytest.approx(40, rel=1e-6)
    assert 0.7 < gaps.std() / gaps.mean() < 1.3  # exponential gaps (cv ~ 1), not constant
    assert s["lateness_ms"]["p99"] < 10  # the client kept the schedule
    assert s["throughput"]["requests_per_s"] == pytest.approx(40, rel=0.1)


def test_iterations_report_spread(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    result = run(sim, tmp_path / "r", "--concurrency", "4", "--requests", "20", "--max-tokens", "8",
                 "--iterations", "3")
    bench = result["benchmarks"][0]
    assert [it["iteration"] for it in bench["iterations"]] == [1, 2, 3]
    assert all(it["summary"]["requests"]["completed"] == 20 for it in bench["iterations"])
    across = bench["across_iterations"]
    assert across["n"] == 3 and across["verdict"] in ("stable", "normal")
    tps = across["metrics"]["output_tokens_per_s"]
    assert tps["ci95_low"] <= tps["mean"] <= tps["ci95_high"]
    assert bench["summary"]["requests"]["completed"] == 60
