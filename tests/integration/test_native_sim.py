"""`tokspeed run --api tgi|triton|ollama|ollama-chat|llamacpp|sglang` against `tokspeed sim` speaking each protocol.

Real subprocesses on loopback. The simulator logs what it did (CLOCK_MONOTONIC ns) and sends
`X-Request-Id`, so each client record is joined with its log line (harness.pairs). TTFT, ITL and
token counts are checked against that truth with the same tolerances as the OpenAI path (net of
the run's own scheduling delay, test_accuracy.assert_explained); the
server-timing fields are checked against the log exactly, and the decomposition
(client TTFT = server queue/load + prefill + network) is checked request by request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness import Noise, Pair, SimServer, load_json, pairs, records, run_cli
from test_accuracy import assert_explained, end, first_token

TTFT_MS, ITL_MS, TOKENS, REQUESTS = 40.0, 5.0, 16, 12
MS = 1e6
APIS = ("tgi", "triton", "ollama", "ollama-chat", "llamacpp", "sglang")


def run(sim: SimServer, out: Path, api: str, *args: str) -> dict:
    extra = ("--model", "tokspeed-sim") if api == "triton" else ()
    p = run_cli("run", "--target", sim.url.removesuffix("/v1"), "--api", api, "--out", str(out), "--plain",
                "--max-tokens", str(TOKENS), *extra, *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return load_json(out / "run.json")


def true_itl_ms(ps: list[Pair]) -> float:
    return float(np.mean(np.concatenate([np.diff(p.sim_chunks) / MS for p in ps])))


@pytest.mark.parametrize("api", APIS)
def test_native_protocol_matches_truth(start_sim: Callable[..., SimServer], tmp_path: Path, api: str) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    result = run(sim, tmp_path / "r", api, "--concurrency", "2", "--requests", str(REQUESTS))
    s = result["benchmarks"][0]["summary"]
    ps = pairs(tmp_path / "r", sim)
    assert len(ps) == REQUESTS == s["requests"]["completed"]
    assert result["target"]["api"] == api and result["target"]["model"] == "tokspeed-sim"
    for p in ps:
        assert p.sim["api"] == api
        assert p.c("sent_ns") <= p.sim["received_ns"]
        assert len(p.client_chunks) == len(p.sim_chunks) == TOKENS
        assert (p.client_chunks >= p.sim_chunks).all()
    assert s["ttft_ms"]["min"] >= TTFT_MS  # the simulator is never early
    assert_explained("TTFT", s["ttft_ms"]["mean"], ps, first_token, lambda p: p.sim["first_token_ns"])
    assert s["itl_ms"]["mean"] == pytest.approx(true_itl_ms(ps), abs=1.0)
    assert s["itl_ms"]["count"] == REQUESTS * (TOKENS - 1)
    assert s["output_tokens"]["mean"] == TOKENS
    # Triton reports no counts: one token per event; every other protocol's server count is used
    assert s["tokens"]["output_sources"] == ({"chunks": REQUESTS} if api == "triton" else {"usage": REQUESTS})
    if api != "triton":
        assert all(p.client["input_tokens"] == p.sim["prompt_tokens"] for p in ps)


@pytest.mark.parametrize("api", ["ollama", "llamacpp"])
def test_server_timings_are_the_truth_and_decompose(
    start_sim: Callable[..., SimServer], tmp_path: Path, api: str
) -> None:
    """One slot, three streams: requests queue. Ollama reports the wait (load_duration); llama.cpp does not."""
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--max-concurrency", "1")
    result = run(sim, tmp_path / "r", api, "--concurrency", "3", "--requests", "9")
    ps = pairs(tmp_path / "r", sim)
    assert len(ps) == 9
    network = []
    for p in ps:
        st, log = p.client["server_timing"], p.sim
        assert st["prefill_ms"] == pytest.approx((log["chunk_ns"][0] - log["start_ns"]) / MS, abs=1e-6)
        assert st["decode_ms"] == pytest.approx((log["chunk_ns"][-1] - log["chunk_ns"][0]) / MS, abs=1e-6)
        assert (st["output_tokens"], st["prompt_tokens"]) == (TOKENS, log["prompt_tokens"])
        queue_ms = (log["start_ns"] - log["received_ns"]) / MS
        if api == "ollama":
            assert st["load_ms"] == pytest.approx(queue_ms, abs=1e-6)
        # client TTFT = (server's parts) + what the server did not report: both network legs (+ llama.cpp's queue)
        client_ttft = (p.client["first_token_ns"] - p.client["sent_ns"]) / MS
        legs = (log["received_ns"] - p.c("sent_ns") + p.c("first_token_ns") - log["chunk_ns"][0]) / MS
        unreported = legs + (queue_ms if api == "llamacpp" else 0.0)
        reported = st["prefill_ms"] + st.get("load_ms", 0.0)
        assert client_ttft - reported == pytest.approx(unreported, abs=1e-3)
        network.append(legs)
    d = result["benchmarks"][0]["summary"]["server_timing"]
    assert d["requests"] == 9
    assert d["network_ms"]["mean"] >= 0
    queue_mean = np.mean([(p.sim["start_ns"] - p.sim["received_ns"]) / MS for p in ps])
    assert queue_mean > 2 * TTFT_MS  # the one slot made requests wait
    if api == "ollama":  # the wait is reported, so what remains is the loopback network, not the ~230 ms queue
        assert d["network_ms"]["mean"] == pytest.approx(np.mean(network), abs=1e-3)
        assert d["network_ms"]["p50"] < queue_mean / 4
    else:  # llama.cpp reports no queue: it shows up as "network/unreported"
        assert d["network_ms"]["mean"] == pytest.approx(np.mean(network) + queue_mean, abs=1e-3)
    # the client decodes as fast as the server did, but for the change in its lag between the first
    # token and the end, which this run measured (a fraction of a percent of 75 ms on an idle machine)
    shift = np.mean([abs((p.c("end_ns") - p.c("first_token_ns")) - (p.sim["chunk_ns"][-1] - p.sim["chunk_ns"][0]))
                     / (p.sim["chunk_ns"][-1] - p.sim["chunk_ns"][0]) for p in ps])
    assert d["decode_speed_ratio"] == pytest.approx(1.0, abs=0.1 + 2 * shift)
    server_tps = np.mean([(TOKENS - 1) * 1000 / p.client["server_timing"]["decode_ms"] for p in ps])
    assert d["server_decode_tokens_per_s"]["mean"] == pytest.approx(server_tps, rel=1e-9)
    # the schedule it reported keeping: 15 gaps of 5 ms (decode_ms is checked against its log above)
    assert all(p.sim["itl_ns"] == ITL_MS * MS for p in ps)
    report = run_cli("report", str(tmp_path / "r"))
    assert report.returncode == 0 and "Server timing" in report.stdout and "network/unreported" in report.stdout


def test_triton_model_errors_are_clear(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim()
    p = run_cli("run", "--target", sim.url, "--api", "triton", "--requests", "1", "--plain", "--out", str(tmp_path / "a"))
    assert p.returncode != 0 and "/v2/models/ensemble" in p.stdout + p.stderr and "--model" in p.stdout + p.stderr
    p = run_cli("run", "--target", sim.url, "--api", "ollama", "--model", "nope", "--requests", "1", "--plain",
                "--out", str(tmp_path / "b"))
    assert p.returncode != 0 and "not found" in p.stdout + p.stderr


def test_no_stream_counts_from_the_server(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "2")
    result = run(sim, tmp_path / "r", "llamacpp", "--no-stream", "--requests", "3")
    s = result["benchmarks"][0]["summary"]
    assert s["requests"]["completed"] == 3 and s["output_tokens"]["mean"] == TOKENS
    recs = [r for r in records(tmp_path / "r") if not r["warmup"]]
    # one body: the server reports the schedule it kept (prefill 20 ms, then 15 gaps of 2 ms)
    assert all(r["server_timing"]["prefill_ms"] == pytest.approx(20, abs=0.01) for r in recs)
    assert all(r["server_timing"]["decode_ms"] == pytest.approx((TOKENS - 1) * 2, abs=0.01) for r in recs)
    ps = pairs(tmp_path / "r", sim)  # the one body: stamped just before the write (end_ns is after it)
    assert all(p.c("sent_ns") <= p.sim["received_ns"] and p.c("end_ns") >= p.sim["chunk_ns"][0] for p in ps)
    assert_explained("E2E", s["e2e_ms"]["mean"], ps, end, lambda p: p.sim["chunk_ns"][0], back="send")
    assert s["ttft_ms"]["count"] == 0  # nothing streamed: no TTFT


def test_metrics_histogram_ttft_is_compared_with_the_client(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    """The simulator's /metrics TTFT histogram (as vLLM's) over the point's window, beside the client's mean."""
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", "2")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--plain", "--concurrency", "2",
                "--duration", "2s", "--max-tokens", "8", "--telemetry-interval", "0.1s")
    assert p.returncode == 0, p.stdout + p.stderr
    result = load_json(tmp_path / "r" / "run.json")
    metrics = result["benchmarks"][0]["telemetry"]["server"]["metrics"]
    count = metrics["tokspeed_sim:time_to_first_token_seconds_count"]
    server_mean_ms = metrics["tokspeed_sim:time_to_first_token_seconds_sum"] / count * 1000
    assert count >= 10
    truth = np.mean([(e["chunk_ns"][0] - e["received_ns"]) / MS for e in sim.entries().values() if e["chunk_ns"]])
    assert server_mean_ms == pytest.approx(truth, abs=1.0)
    client_mean = result["benchmarks"][0]["summary"]["ttft_ms"]["mean"]
    noise = Noise.of(pairs(tmp_path / "r", sim))  # the client's TTFT is later by its requests' trips
    assert 0 <= client_mean - server_mean_ms < 3.0 + float(np.mean(noise.send + noise.delivery))
    assert "Server /metrics TTFT" in p.stdout
