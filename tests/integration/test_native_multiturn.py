"""Multi-turn conversations over native protocols (Ollama chat, llama.cpp) against `tokspeed sim`.

Regression test from the review: the native backend dropped the answer text of every request past
the first few samples (it ignored `RequestSpec.keep_text`), so `--multi-turn` over `--api ollama-chat`
or `llamacpp` stopped at once ("this backend did not return it"). The simulator's log gives each
request's true prompt length, which must grow by exactly the previous answer plus the new user text.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

from harness import SimServer, load_json, records, run_cli, start_run, wait_for_records

USER_TOKENS = 20


@pytest.mark.parametrize("api", ["ollama-chat", "llamacpp"])
def test_native_conversations_carry_the_real_answers(
    api: str, start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "r"
    proc = run_cli("run", "--target", sim.url, "--api", api, "--out", str(out), "--plain", "--no-telemetry",
                   "--multi-turn", "3", "--concurrency", "2", "--requests", "3", "--dataset", "synthetic",
                   "--input-tokens", str(USER_TOKENS), "--max-tokens", "6", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    measured = [r for r in records(out) if not r["warmup"]]
    truth = sim.entries()
    assert len(measured) == 9 and all(r["status"] == "ok" for r in measured)
    for c in range(3):
        turns = sorted((r for r in measured if r["conversation"] == c), key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [1, 2, 3]
        assert all(r["output_tokens"] == 6 and r["output_tokens_source"] == "usage" for r in turns)
        prompts = [truth[r["response_id"]]["prompt_tokens"] for r in turns]
        assert [r["input_tokens"] for r in turns] == prompts  # the server's own prompt counts
        assert prompts[0] == USER_TOKENS
        for prev, cur in pairwise(turns):
            assert cur["input_tokens"] == prev["input_tokens"] + prev["output_tokens"] + USER_TOKENS
    assert load_json(out / "run.json")["benchmarks"][0]["summary"]["requests"]["completed"] == 9


def test_ctrl_c_mid_conversations_keeps_every_turn_sent(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """Open-loop conversations interrupted mid-turn: every request the server saw has its record, in-flight
    turns are marked incomplete, and each conversation's turns up to the interruption are there in order."""
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--plain", "--no-telemetry", "--multi-turn", "50",
                     "--conversation-rate", "10", "--arrival", "constant", "--requests", "4",
                     "--think-time", "0.02s", "--max-tokens", "10", "--warmup", "0")
    try:
        wait_for_records(out, 8, proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    recs = records(out)
    assert load_json(out / "run.json")["status"] == "interrupted"
    assert any(r["status"] == "incomplete" for r in recs)  # the turns in flight, marked, not lost
    served = [e for e in sim.entries().values() if e["planned_tokens"] != 1]  # not the start-up probe
    ids = {r["response_id"] for r in recs}
    assert {r["response_id"] for r in recs if r["status"] == "ok"} <= {e["id"] for e in served}
    assert all(e["id"] in ids or e["status"] != "ok" for e in served), served  # each answered request has its record
    for c in range(4):
        turns = sorted(r["turn"] for r in recs if r["conversation"] == c)
        assert turns == list(range(1, len(turns) + 1))  # no turn lost in the middle


def test_concurrency_stages_with_client_workers(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """`--workers` client processes rebuild the config from its dump and send back each record: concurrency
    stages used to fail there at start, and then lost their stage labels (0 requests per stage)."""
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    out = tmp_path / "r"
    proc = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", "--no-telemetry", "--workers", "2",
                   "--stages", "one:concurrency=1:0.6s,three:concurrency=3:0.6s", "--max-tokens", "5", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    measured = [r for r in records(out) if not r["warmup"]]
    assert measured and all(r["status"] == "ok" for r in measured)
    counts = {name: sum(r["stage"] == name for r in measured) for name in ("one", "three")}
    assert counts["one"] + counts["three"] == len(measured)  # every request labelled
    assert counts["three"] > 2 * counts["one"] > 0  # three workers send about three times as many
    stages = load_json(out / "run.json")["benchmarks"][0]["stages"]
    assert {k: v["summary"]["requests"]["completed"] for k, v in stages.items()} == counts
