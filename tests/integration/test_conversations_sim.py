"""Multi-turn conversations and shared prefixes against `tokspeed sim` with its prefix cache.

The simulator's prefill costs `--per-prompt-token-us` per prompt token not found in its prefix
cache, so a cached prefix lowers TTFT by exactly cached_tokens × that cost; its log records the
cached tokens and the scheduled prefill of every request, the ground truth checked here.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import SimServer, load_json, records, run_cli

BLOCK = 16
PER_TOKEN_MS = 0.1  # --per-prompt-token-us 100


def _run(sim: SimServer, out: Path, *args: str) -> dict[str, Any]:
    proc = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", "--no-telemetry", *args, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return load_json(out / "run.json")


def _ttft_ms(r: dict[str, Any]) -> float:
    return (r["first_token_ns"] - r["sent_ns"]) / 1e6


def _by_conversation(recs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    convs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        if not r["warmup"]:
            convs[r["conversation"]].append(r)
    return {c: sorted(rs, key=lambda r: r["turn"]) for c, rs in convs.items()}


def test_history_grows_by_answer_and_user_text_and_the_cache_cuts_prefill(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "1", "--per-prompt-token-us", "100", "--prefix-cache-tokens", "100000")
    run = _run(sim, tmp_path / "r", "--multi-turn", "4", "--think-time", "0.1s", "--concurrency", "2",
               "--requests", "3", "--dataset", "synthetic", "--input-tokens", "40", "--max-tokens", "20")
    recs = records(tmp_path / "r")
    truth = sim.entries()
    convs = _by_conversation(recs)
    assert sorted(convs) == [0, 1, 2]
    for turns in convs.values():
        assert [r["turn"] for r in turns] == [1, 2, 3, 4]
        assert all(r["status"] == "ok" and r["output_tokens"] == 20 for r in turns)
        assert turns[0]["input_tokens"] == 40
        for prev, cur in pairwise(turns):
            # the history: the previous prompt, the model's answer, the new user text (40 tokens), exactly
            assert cur["input_tokens"] == prev["input_tokens"] + prev["output_tokens"] + 40
            # the previous prompt's whole blocks are cached, and the simulator charged only the rest
            assert cur["cached_tokens"] == prev["input_tokens"] // BLOCK * BLOCK
            # the user's think time passed between the answer and the next turn
            assert 100 <= (cur["sent_ns"] - prev["end_ns"]) / 1e6 < 100 + 40
        assert turns[0]["cached_tokens"] == 0  # warm-up conversations used other prompts
        for r in turns:
            entry = truth[r["response_id"]]
            assert entry["cached_tokens"] == r["cached_tokens"] and entry["prompt_tokens"] == r["input_tokens"]
            assert entry["prefill_ns"] == round(10e6 + (r["input_tokens"] - r["cached_tokens"]) * 100_000)
            assert _ttft_ms(r) >= entry["prefill_ns"] / 1e6  # never before the scheduled prefill ends
    measured = [(r, truth[r["response_id"]]) for turns in convs.values() for r in turns]
    # the median client TTFT exceeds the server's own (its log: first chunk written - request received) by no more
    # than loopback and scheduling noise; against the scheduled prefill it also held the simulator's timer lateness
    # (4.81 ms > 4 on a fresh-clone CI beside a CPU hog)
    overhead_ms = sorted(_ttft_ms(r) - (e["chunk_ns"][0] - e["received_ns"]) / 1e6 for r, e in measured)[len(measured) // 2]
    assert overhead_ms < 4
    bench = run["benchmarks"][0]
    assert bench["profile"] == {"kind": "conversations", "turns": 4, "users": 2}
    summary = bench["summary"]
    by_turn = summary["by_turn"]
    assert [t["turn"] for t in by_turn] == [1, 2, 3, 4] and all(t["requests"] == 3 for t in by_turn)
    for t in by_turn:
        ttfts = [_ttft_ms(turns[t["turn"] - 1]) for turns in convs.values()]
        assert t["ttft_ms"]["mean"] == pytest.approx(sum(ttfts) / 3, abs=1e-6)
        assert t["input_tokens"]["mean"] == 40 + (t["turn"] - 1) * 60
    # prompts grow by 60 tokens a turn (turn 4 has 120 more than turn 2: +12 ms without a cache), but
    # only what the cache lacks is prefilled: 220 − 160 cached at turn 4, 100 − 32 cached at turn 2
    assert by_turn[3]["ttft_ms"]["mean"] - by_turn[1]["ttft_ms"]["mean"] == pytest.approx(
        ((220 - 160) - (100 - 32)) * PER_TOKEN_MS, abs=3
    )
    conv = summary["conversations"]
    assert conv["conversations"] == 3 and conv["completed"] == 3 and conv["turns"]["mean"] == 4
    assert conv["duration_s"]["min"] > 3 * 0.1  # three think times
    assert summary["requests"]["completed"] == 12 and summary["ttft_ms"]["count"] == 12


def test_cached_prefix_ttft_is_lower_by_cached_tokens_times_prefill_cost(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "1", "--per-prompt-token-us", "100", "--prefix-cache-tokens", "100000")
    run = _run(sim, tmp_path / "r", "--shared-prefix-groups", "2", "--shared-prefix-tokens", "512",
               "--prefix-reuse", "0.5", "--dataset", "synthetic", "--input-tokens", "32", "--requests", "40",
               "--concurrency", "2", "--max-tokens", "4", "--warmup", "2")
    recs = [r for r in records(tmp_path / "r") if not r["warmup"]]
    truth = sim.entries()
    assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
    assert all(r["input_tokens"] == 512 + 32 for r in recs)  # same length, shared or not
    for r in recs:
        assert truth[r["response_id"]]["cached_tokens"] == r["cached_tokens"]
    unique = [r for r in recs if r["prefix_group"] == -1]
    shared = [r for r in recs if r["prefix_group"] in (0, 1)]
    assert len(unique) + len(shared) == 40 and unique and len(shared) > 2
    assert all(r["cached_tokens"] == 0 for r in unique)
    hits = [r for r in shared if r["cached_tokens"]]
    assert all(r["cached_tokens"] == 512 for r in hits)
    assert len(hits) >= len(shared) - 2  # only each group's first request (or two at once) can miss
    misses = [r for r in recs if r["cached_tokens"] == 0]
    # medians: a few requests slowed by the machine's other work must not decide it
    median_saved = float(np.median([_ttft_ms(r) for r in misses]) - np.median([_ttft_ms(r) for r in hits]))
    assert median_saved == pytest.approx(512 * PER_TOKEN_MS, abs=3)
    for r in recs:
        entry = truth[r["response_id"]]
        assert entry["prefill_ns"] == round(10e6 + (544 - r["cached_tokens"]) * 100_000)
    pc = run["benchmarks"][0]["summary"]["prefix_cache"]
    saved = sum(map(_ttft_ms, misses)) / len(misses) - sum(map(_ttft_ms, hits)) / len(hits)
    assert pc["ttft_saved_ms"] == pytest.approx(saved, abs=1e-6)
    assert pc["cached"]["requests"] == len(hits) and pc["uncached"]["requests"] == len(misses)
    assert pc["shared"]["requests"] == len(shared) and pc["unique"]["requests"] == len(unique)
    assert pc["hit_rate"] == pytest.approx(512 * len(hits) / (544 * 40))
    # the simulator's /metrics counts what its log says (vLLM-style prefix_cache_queries / _hits, in tokens)
    logged = [e for e in sim.entries().values() if e["cached_tokens"] is not None]
    metrics = urllib.request.urlopen(sim.url.removesuffix("/v1") + "/metrics", timeout=5).read().decode()
    counters = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tokspeed_sim:prefix_cache")
    }
    assert counters["tokspeed_sim:prefix_cache_queries_total"] == sum(e["prompt_tokens"] for e in logged)
    assert counters["tokspeed_sim:prefix_cache_hits_total"] == sum(e["cached_tokens"] for e in logged) > 0


def test_conversation_rate_open_loop_with_completions_and_a_shared_system_prefix(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--prefix-cache-tokens", "100000")
    run = _run(sim, tmp_path / "r", "--api", "completions", "--multi-turn", "3", "--conversation-rate", "20",
               "--arrival", "constant", "--think-time", "uniform:20ms,40ms", "--requests", "4",
               "--dataset", "synthetic", "--input-tokens", "24", "--max-tokens", "8", "--warmup", "1",
               "--shared-prefix-groups", "1", "--shared-prefix-tokens", "64")
    bench = run["benchmarks"][0]
    assert bench["profile"]["kind"] == "conversations" and bench["profile"]["conversation_rate"] == 20
    recs = records(tmp_path / "r")
    assert sum(r["warmup"] for r in recs) == 1
    convs = _by_conversation(recs)
    assert sorted(convs) == [0, 1, 2, 3]
    firsts = sorted(turns[0]["scheduled_ns"] for turns in convs.values())
    gaps_ms = [(b - a) / 1e6 for a, b in pairwise(firsts)]
    assert gaps_ms == pytest.approx([50, 50, 50], abs=0.01)  # constant arrivals at 20 conversations/s
    for turns in convs.values():
        assert [r["turn"] for r in turns] == [1, 2, 3] and all(r["prefix_group"] == 0 for r in turns)
        assert turns[0]["input_tokens"] == 64 + 24
        for prev, cur in pairwise(turns):
            assert cur["input_tokens"] == prev["input_tokens"] + 8 + 24
            assert 20 <= (cur["scheduled_ns"] - prev["end_ns"]) / 1e6 <= 40 + 5
            assert cur["sent_ns"] >= cur["scheduled_ns"]
        assert turns[0]["cached_tokens"] == 64  # the warm-up put the group's prefix in the cache
    summary = bench["summary"]
    assert summary["requests"]["completed"] == 12 and summary["schedule"] is None
    assert [t["requests"] for t in summary["by_turn"]] == [4, 4, 4]
