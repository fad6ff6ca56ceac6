"""Model mixes and client-side cancellation against the simulator, judged on its own log.

The simulator serves several names (`--served-model`) and logs the `model` each request asked
for, and `disconnected` for a request whose client went away; records and log share the id
of each response and CLOCK_MONOTONIC. The truths:
* round-robin: each model's count is exactly its weight's share (the measured indices are whole
  cycles), and the model of request i is the smooth weighted round-robin's i-th pick;
* random: request i asked for the model of the documented draw (recomputed here from its formula),
  the counts within a binomial bound; per-model figures equal what the log says of each model;
* cancellation: exactly the requests of the documented draw were cancelled, the simulator saw
  exactly those go away, each ended the delay after it was sent (never earlier, no later than this
  run's own stalls explain), none counts as an error.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import SimServer, load_json, records, run_cli, sim_late_ns

MS = 1_000_000


def _unit(seed: int, salt: str, index: int) -> float:
    return int(hashlib.blake2b(f"{seed}:{salt}:{index}".encode(), digest_size=8).hexdigest(), 16) / 2**64


def _run(sim: SimServer, out: Path, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--plain", "--no-catalog", "--warmup", "0",
                "--dataset", "synthetic", "--input-tokens", "16", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    run = load_json(out / "run.json")
    return run, [r for r in records(out) if not r["warmup"]], {"stdout": p.stdout}


def test_round_robin_mix_sends_exact_shares_and_breaks_down_per_model(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--model", "base", "--served-model", "lora-a",
                    "--served-model", "lora-b")
    run, recs, p = _run(sim, tmp_path / "r", "--model", "base=2,lora-a=1,lora-b=1", "--concurrency", "4",
                        "--requests", "40", "--max-tokens", "6", "--no-telemetry")
    truth = sim.entries()
    assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
    cycle = ["base", "lora-a", "lora-b", "base"]  # smooth weighted round-robin of 2, 1, 1 (ties: the first)
    assert {r["index"]: r["model"] for r in recs} == {i: cycle[i % 4] for i in range(40)}
    asked = {r["response_id"]: truth[r["response_id"]]["model"] for r in recs}
    assert all(asked[r["response_id"]] == r["model"] for r in recs)  # what the server was asked, per request
    assert Counter(asked.values()) == {"base": 20, "lora-a": 10, "lora-b": 10}
    bench = run["benchmarks"][0]
    assert set(bench["models"]) == {"base", "lora-a", "lora-b"}
    for name, group in bench["models"].items():
        mine = [truth[r["response_id"]] for r in recs if r["model"] == name]
        s = group["summary"]
        assert s["requests"]["completed"] == len(mine) == 40 * group["profile"]["share"]
        assert s["tokens"]["output_total"] == sum(e["completion_tokens"] for e in mine)
        assert s["tokens"]["input_total"] == sum(e["prompt_tokens"] for e in mine)
    assert "Models (each request's model in the mix)" in p["stdout"] and "lora-b" in p["stdout"]
    assert "Models    base 50%, lora-a 25%, lora-b 25% (round-robin)" in p["stdout"]
    assert run["workload"]["models"]["shares"] == {"base": 0.5, "lora-a": 0.25, "lora-b": 0.25}
    report = run_cli("report", str(tmp_path / "r"))
    assert report.returncode == 0 and "Models (each request's model in the mix)" in report.stdout


def test_random_mix_follows_its_seeded_draws_and_per_model_truth(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "3", "--itl-ms", "1", "--model", "base", "--served-model", "lora-a")
    n, seed = 200, 11
    run, recs, _ = _run(sim, tmp_path / "r", "--model", "base=3,lora-a=1", "--model-policy", "random",
                        "--seed", str(seed), "--concurrency", "8", "--requests", str(n), "--max-tokens", "4",
                        "--no-telemetry")
    truth = sim.entries()
    want = {i: "base" if _unit(seed, "model", i) < 0.75 else "lora-a" for i in range(n)}
    assert {r["index"]: r["model"] for r in recs} == want
    assert all(truth[r["response_id"]]["model"] == r["model"] for r in recs)
    count = sum(m == "base" for m in want.values())
    assert abs(count - n * 0.75) <= 4.5 * math.sqrt(n * 0.75 * 0.25)  # Binomial(200, 0.75): ±27.6
    for name, group in run["benchmarks"][0]["models"].items():
        mine = [r for r in recs if r["model"] == name]
        s = group["summary"]
        served = [e for e in truth.values() if e["planned_tokens"] == 4 and e["model"] == name]  # not the probe
        assert s["requests"]["completed"] == len(mine) == len(served)
        ttft = [(r["first_token_ns"] - r["sent_ns"]) / MS for r in mine]
        assert s["ttft_ms"]["count"] == len(mine)
        assert np.isclose(s["ttft_ms"]["mean"], np.mean(ttft), rtol=1e-9)
        assert s["ttft_ms"]["min"] >= 3  # the simulator is never early
        assert s["tokens"]["output_total"] == sum(truth[r["response_id"]]["completion_tokens"] for r in mine)


def test_a_mix_naming_an_unserved_model_fails_at_start(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--model", "base", "--served-model", "lora-a")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--plain", "--no-catalog",
                "--model", "base,lora-z", "--requests", "2")
    assert p.returncode == 1, p.stdout + p.stderr  # a target that cannot serve the run (as a failed probe)
    said = p.stdout + p.stderr
    assert "does not list 'lora-z' of the model mix" in said and "it lists base, lora-a" in said
    assert sim.entries() == {}  # refused before any request


def test_cancelled_requests_are_aborted_after_the_delay_and_counted_apart(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    n, seed, share, after_ms = 60, 3, 0.3, 150
    run, recs, p = _run(sim, tmp_path / "r", "--concurrency", "4", "--requests", str(n), "--max-tokens", "40",
                        "--seed", str(seed), "--cancel-share", str(share), "--cancel-after", f"{after_ms}ms")
    truth = sim.entries()
    offset = run["epoch_offset_ns"]
    chosen = {i for i in range(n) if _unit(seed, "cancel", i) < share}
    cancelled = [r for r in recs if r["status"] == "cancelled"]
    assert {r["index"] for r in cancelled} == chosen
    assert abs(len(chosen) - n * share) <= 4.5 * math.sqrt(n * share * (1 - share))
    assert all(r["status"] == "ok" for r in recs if r["index"] not in chosen)
    # the server saw exactly these go away: each cancelled response (its id came with the first token,
    # 20 ms in) is logged disconnected, and nothing else is
    gone = {i for i, e in truth.items() if e["status"] == "disconnected"}
    assert gone == {r["response_id"] for r in cancelled} and len(gone) == len(cancelled)
    # when: the delay after sending, never earlier (a floor: the abort timer waits out an early loop timer),
    # and late by what this run's own stalls explain: how late the simulator's timers fired (the machine
    # stalled both processes: at load 9.6 one 80 ms stall held the simulator's chunks and a cancel timer
    # 51 ms) plus how late the client stamped the chunks of its complete responses after they were written
    elapsed_ms = np.array([(r["end_ns"] - r["sent_ns"]) / MS for r in cancelled])
    ok = [r for r in recs if r["status"] == "ok"]
    lags = [
        (np.asarray(r["chunk_offsets_ns"]) + r["sent_ns"] - offset - np.asarray(truth[r["response_id"]]["chunk_ns"])) / MS
        for r in ok
    ]  # fmt: skip
    stalls_ms = float(np.max(np.concatenate([sim_late_ns(truth[r["response_id"]]) for r in ok]))) / MS
    client_late_ms = float(np.max(np.concatenate(lags)))
    assert elapsed_ms.min() >= after_ms, elapsed_ms
    assert elapsed_ms.max() <= after_ms + 5.0 + stalls_ms + client_late_ms, (elapsed_ms, stalls_ms, client_late_ms)
    assert np.median(elapsed_ms) <= after_ms + 2.0 + np.median(np.concatenate(lags)), elapsed_ms
    # the server stopped the work: it noticed at its next write, one token (10 ms) after the abort at most,
    # plus this run's stalls, and generated fewer tokens than asked
    noticed_ms = np.array([(truth[r["response_id"]]["end_ns"] - (r["end_ns"] - offset)) / MS for r in cancelled])
    assert noticed_ms.min() >= 0 and noticed_ms.max() <= 10 + 5.0 + stalls_ms, (noticed_ms, stalls_ms)
    assert all(truth[r["response_id"]]["completion_tokens"] < 40 for r in cancelled)
    # what the client read before the abort is kept: only chunks the server wrote before it, and of those it
    # wrote before the abort only the ones still unread in the socket are dropped, written no earlier than this
    # run's client lag before the abort (on a loaded CI machine three chunks were: a stall had written two at once)
    for r in cancelled:
        e = truth[r["response_id"]]
        kept = len(r["chunk_offsets_ns"])
        written = np.asarray(e["chunk_ns"], dtype=np.int64)
        abort_ns = r["end_ns"] - offset
        assert 1 <= kept <= int(np.sum(written <= abort_ns)) and r["output_tokens"] == kept
        unread_before_abort = written[kept:][written[kept:] <= abort_ns]
        assert np.all(unread_before_abort >= abort_ns - (client_late_ms + 2.0) * MS), (unread_before_abort, abort_ns)
        assert r["error_kind"] is None and r["output_tokens_source"] == "chunks"
    s = run["benchmarks"][0]["summary"]
    assert s["requests"] == {"completed": n - len(chosen), "errored": 0, "incomplete": 0, "cancelled": len(chosen),
                             "total": n}
    assert s["error_rate"] == 0 and s["errors"] == {}
    assert s["ttft_ms"]["count"] == s["e2e_ms"]["count"] == n - len(chosen)
    assert s["output_tokens"]["min"] == 40  # only complete answers in the token distribution
    assert run["status"] == "complete"
    assert f"{len(chosen)} cancelled by the client (not errors)" in p["stdout"]
    assert "Cancel    30% of requests, 150 ms after sending" in p["stdout"]
    assert "running mean" in p["stdout"]  # the server's running requests, scraped from its /metrics
    html = tmp_path / "report.html"
    report = run_cli("report", str(tmp_path / "r"), "--html", str(html))
    assert report.returncode == 0, report.stderr
    assert "server: running, waiting" in html.read_text()  # and over time, beside the client's in-flight count


def test_mix_and_cancellation_hold_across_client_processes(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """--workers 2: the choices travel with each spec, and the parent keeps each record's model."""
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "5", "--model", "base", "--served-model", "lora-a")
    n, seed = 24, 5
    run, recs, _ = _run(sim, tmp_path / "r", "--model", "base,lora-a", "--concurrency", "4", "--requests", str(n),
                        "--max-tokens", "30", "--seed", str(seed), "--cancel-share", "0.25", "--cancel-after", "60ms",
                        "--workers", "2", "--no-telemetry")
    truth = sim.entries()
    chosen = {i for i in range(n) if _unit(seed, "cancel", i) < 0.25}
    assert 0 < len(chosen) < n
    assert {r["index"]: r["model"] for r in recs} == {i: ("base", "lora-a")[i % 2] for i in range(n)}
    assert {r["index"] for r in recs if r["status"] == "cancelled"} == chosen
    assert all(truth[r["response_id"]]["model"] == r["model"] for r in recs)
    gone = {i for i, e in truth.items() if e["status"] == "disconnected"}
    assert gone == {r["response_id"] for r in recs if r["status"] == "cancelled"}
    s = run["benchmarks"][0]["summary"]["requests"]
    assert (s["cancelled"], s["errored"], s["completed"]) == (len(chosen), 0, n - len(chosen))


def test_a_cancelled_request_frees_the_server_and_the_next_one_starts_sooner(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    """One serving slot, two clients: each request queues behind the one being served. Behind a cancelled
    one it starts as soon as the server noticed the abort, so its TTFT is shorter than behind a completed one.

    The server's side from its log: who held the slot before whom (FIFO), for how long (a completed request
    20 + 39 × 5 = 215 ms to its last token; a cancelled one until it noticed its client gone); the client's TTFT of the next.
    """
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "5", "--max-concurrency", "1")
    run, recs, _ = _run(sim, tmp_path / "r", "--concurrency", "2", "--requests", "40", "--max-tokens", "40",
                        "--cancel-share", "0.5", "--cancel-after", "300ms", "--no-telemetry")
    truth = sim.entries()
    mine = {r["response_id"]: r for r in recs if r["response_id"] is not None}
    served = sorted((e for i, e in truth.items() if i in mine and e.get("start_ns")), key=lambda e: e["start_ns"])
    held: dict[str, list[float]] = {"ok": [], "cancelled": []}  # the slot time of each predecessor, by its fate
    ttft: dict[str, list[float]] = {"ok": [], "cancelled": []}  # the TTFT of the completed request after it
    for before, entry in zip(served, served[1:]):
        fate, nxt = mine[before["id"]]["status"], mine[entry["id"]]
        held[fate].append((before["end_ns"] - before["start_ns"]) / MS)
        if nxt["status"] == "ok":
            ttft[fate].append((nxt["first_token_ns"] - nxt["sent_ns"]) / MS)
    assert len(ttft["ok"]) >= 3 and len(ttft["cancelled"]) >= 3, ttft
    assert min(held["ok"]) >= 215  # a completed request held the slot for its whole answer (the simulator is never early)
    assert np.mean(held["cancelled"]) < 215 - 50, held  # a cancelled one gave it back once its client left
    assert np.mean(ttft["cancelled"]) < np.mean(ttft["ok"]) - 50, ttft  # ... and the request behind it gained
    assert run["benchmarks"][0]["summary"]["requests"]["errored"] == 0
