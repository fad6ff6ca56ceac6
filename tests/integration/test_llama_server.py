"""tokspeed against llama.cpp's own C++ `llama-server`, serving a tiny random-weight GGUF Llama.

The binary is built by `.ci/build-llama-server` (from the llama.cpp tree vendored in PyPI's
llama-cpp-python sdist) into `${TOKSPEED_CACHE:-~/.cache/tokspeed}/llama-server-<version>/bin/`;
`TOKSPEED_LLAMA_SERVER` names another. Without it, or without the `gguf` package (the `test`
extra) that writes the model (gguf_model.py), the module skips, saying why. Alone:
`.ci/build-llama-server && python -m pytest tests/integration/test_llama_server.py -s`.

The server runs with two slots (`-np 2`), `--metrics`, one thread, and its default prompt cache.
What it reports, and what tokspeed's records are held to:

* Per request, its log's `print_timing` lines (prompt eval ms / tokens processed, eval ms /
  tokens generated): for every API, tokspeed's output tokens equal the server's generated count,
  TTFT ≥ the server's prompt time and E2E ≥ prompt + decode time (the client cannot see a token
  before the server made it; llama.cpp's times come from its own clock, ggml_time_us, so the
  floors hold up to that clock's 1 µs resolution, allowed below).
* The native `/completion` API's final event and body carry `timings` (prompt_n, prompt_ms,
  predicted_n, predicted_ms, cache_n) and tokens_evaluated: tokspeed's `server_timing` equals the
  log's figures, and its input tokens are the whole prompt (cached tokens included), the same count
  the OpenAI API's usage gives for the same prompt. The server-side decomposition (server TTFT =
  prefill, network = client TTFT − prefill) is checked request by request.
* `/metrics` (`llamacpp:*`): scraped by the test before and after each run, the rise of
  `tokens_predicted_total` equals the tokens tokspeed counted over every request the run sent
  (the probe and warm-up included), and tokspeed's telemetry block names the engine and the
  counters it scraped.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import load_json, run_cli
from real_servers import LLAMA_CPP_BUILD, Server, free_port, measured

pytestmark = pytest.mark.integration

BINARY = Path(os.environ.get("TOKSPEED_LLAMA_SERVER", str(LLAMA_CPP_BUILD / "llama-server")))
READY_S = 120.0  # measured ~1 s for this model on 2 cores
REQUESTS = 6
MAX_TOKENS = 16
ALIAS = "tokspeed-tiny-random"
CLOCK_MS = 0.001  # llama.cpp's timings are whole microseconds of its own monotonic clock

if not BINARY.exists():
    pytest.skip(f"no llama-server at {BINARY}: .ci/build-llama-server builds it (or set TOKSPEED_LLAMA_SERVER)",
                allow_module_level=True)
pytest.importorskip("gguf", reason="the model is written with the gguf package: pip install -e '.[test]'")

from gguf_model import N_CTX, write_tiny_llama_gguf  # noqa: E402  (after the skips: gguf_model imports numpy)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    where = tmp_path_factory.mktemp("llama-server")
    model = write_tiny_llama_gguf(where / "tiny-random.gguf")
    port = free_port()
    argv = [str(BINARY), "-m", str(model), "--alias", ALIAS, "--host", "127.0.0.1", "--port", str(port),
            "--metrics", "-c", str(2 * N_CTX), "-np", "2", "-t", "1", "--no-webui"]
    server = Server("llama-server", argv, {}, where / "server.log", port)
    try:
        server.wait_ready("/health", READY_S)
        yield server
    finally:
        server.stop()


# --- the server's own account ------------------------------------------------------------------------

_TIMING = re.compile(r"print_timing: id +(\d+) \| task (\d+) \| prompt eval time = +([\d.]+) ms / +(\d+) tokens")
_EVAL = re.compile(r"print_timing: id +(\d+) \| task (\d+) \|        eval time = +([\d.]+) ms / +(\d+) tokens")


@dataclass
class Timing:
    task: int
    prompt_ms: float
    prompt_n: int  # tokens processed: the prompt less those reused from the slot's cache
    predicted_ms: float = 0.0
    predicted_n: int = 0


def log_timings(text: str) -> list[Timing]:
    """The server's per-request timings from its log, in the order the requests finished."""
    out: dict[int, Timing] = {}
    for line in text.splitlines():
        if m := _TIMING.search(line):
            out[int(m.group(2))] = Timing(int(m.group(2)), float(m.group(3)), int(m.group(4)))
        elif (m := _EVAL.search(line)) and int(m.group(2)) in out:
            t = out[int(m.group(2))]
            t.predicted_ms, t.predicted_n = float(m.group(3)), int(m.group(4))
    return list(out.values())


def scrape(server: Server) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {name: float(value) for name, value in re.findall(r"^(llamacpp:\w+) (\S+)$", text, re.M)}


@dataclass
class Run:
    run: dict[str, Any]
    rows: list[dict[str, Any]]  # every record, warm-up included, in send order
    timings: list[Timing]  # the server's, for every completion the run asked for (the probe included)
    before: dict[str, float]
    after: dict[str, float]


def bench(server: Server, out: Path, *args: str, root: bool = False) -> Run:
    log_start = server.log.stat().st_size
    before = scrape(server)
    target = server.url.removesuffix("/v1") if root else server.url
    p = run_cli("run", "--target", target, "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS),
                "--plain", "--out", str(out), *args, timeout=300)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- server log ---\n{server.tail()}"
    print(p.stdout)
    after = scrape(server)
    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    rows = sorted((json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()), key=lambda r: r["sent_ns"])
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
    timings = log_timings(server.log.read_bytes()[log_start:].decode("utf-8", "replace"))
    return Run(run, rows, timings, before, after)


def check_against_server(r: Run, *, streamed: bool) -> None:
    """Sequential runs: the last len(rows) timings are the records', in order; what came before is tokspeed's probe."""
    probes = r.timings[: len(r.timings) - len(r.rows)]
    assert len(probes) <= 1 and all(t.predicted_n == 1 for t in probes), (probes, len(r.rows))
    print(f"{'TTFT ms':>9} {'E2E ms':>8} | server: {'prompt n':>8} {'prompt ms':>9} {'decode ms':>9} {'tokens':>6}")
    for row, t in zip(r.rows, r.timings[len(probes):], strict=True):
        e2e_ms = (row["end_ns"] - row["sent_ns"]) / 1e6
        assert row["output_tokens"] == t.predicted_n == MAX_TOKENS, (row, t)
        assert row["input_tokens"] >= t.prompt_n, (row, t)  # processed ≤ the whole prompt (the rest was cached)
        assert e2e_ms >= t.prompt_ms + t.predicted_ms - CLOCK_MS, (row, t)
        ttft = "-"
        if streamed:
            ttft_ms = (row["first_token_ns"] - row["sent_ns"]) / 1e6
            assert ttft_ms >= t.prompt_ms - CLOCK_MS, (row, t)
            ttft = f"{ttft_ms:.2f}"
        print(f"{ttft:>9} {e2e_ms:>8.2f} | server: {t.prompt_n:>8} {t.prompt_ms:>9.2f} {t.predicted_ms:>9.2f} {t.predicted_n:>6}")
    # the server's counter rose by exactly what tokspeed counted, over everything the run sent
    rise = r.after["llamacpp:tokens_predicted_total"] - r.before["llamacpp:tokens_predicted_total"]
    assert rise == sum(row["output_tokens"] for row in r.rows) + len(probes), (rise, r.before, r.after)
    processed = r.after["llamacpp:prompt_tokens_total"] - r.before["llamacpp:prompt_tokens_total"]
    assert processed == sum(t.prompt_n for t in r.timings), (processed, r.timings)


def check_telemetry(r: Run) -> None:
    """tokspeed scraped /metrics itself (the target's, found unasked) and read llama.cpp's names."""
    server = r.run["telemetry"]["server"]
    assert server is not None, r.run["telemetry"]["notes"]
    assert server["engine"] == "llamacpp" and server["scrapes"] >= 1 and server["errors"] == 0, server
    assert server["running"]["max"] <= 2 and server["waiting"]["max"] >= 0  # two slots
    metrics = server["metrics"]
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:prompt_seconds_total",
                 "llamacpp:tokens_predicted_seconds_total", "llamacpp:n_decode_total", "llamacpp:n_busy_slots_per_decode"):
        assert name in metrics, (name, metrics)
    # the window's rises can be no more than the run's: the test's scrapes bracket tokspeed's
    for name in ("llamacpp:tokens_predicted_total", "llamacpp:prompt_tokens_total", "llamacpp:n_decode_total"):
        assert 0 <= metrics[name] <= r.after[name] - r.before[name], (name, metrics, r.before, r.after)
    print({k.removeprefix("llamacpp:"): v for k, v in metrics.items()})


@pytest.mark.parametrize(("api", "stream"), [("completions", True), ("chat", True), ("completions", False), ("chat", False)])
def test_openai_api_against_the_server_timings(llama_server: Server, tmp_path: Path, api: str, stream: bool) -> None:
    args = ["--api", api] + ([] if stream else ["--no-stream"])
    r = bench(llama_server, tmp_path / "r", *args)
    target = r.run["target"]
    assert (target["model"], target["api"], target["stream"]) == (ALIAS, api, stream)
    rows = measured(tmp_path / "r")
    assert len(rows) == REQUESTS
    for row in rows:
        assert row["finish_reason"] == "length" and row["output_tokens_source"] == "usage", row
        assert row["input_tokens_source"] == "usage", row  # llama-server sends usage in streams when asked
        if stream:
            offsets = row["chunk_offsets_ns"]
            assert 1 <= len(offsets) <= MAX_TOKENS and offsets == sorted(offsets) and offsets[0] > 0, row
        else:
            assert row["chunk_offsets_ns"] == [] and row["first_token_ns"] is None, row
    summary = r.run["benchmarks"][0]["summary"]
    assert summary["requests"]["completed"] == REQUESTS
    assert summary["tokens"]["output_total"] == REQUESTS * MAX_TOKENS
    check_against_server(r, streamed=stream)
    check_telemetry(r)


@pytest.mark.parametrize("stream", [True, False])
def test_native_completion_api_records_the_server_timings(llama_server: Server, tmp_path: Path, stream: bool) -> None:
    """`--api llamacpp`: tokspeed's server_timing is the server's own, and the decomposition follows from it."""
    args = ["--api", "llamacpp"] + ([] if stream else ["--no-stream"])
    r = bench(llama_server, tmp_path / "r", *args, root=True)
    assert (r.run["target"]["model"], r.run["target"]["api"]) == (ALIAS, "llamacpp")
    check_against_server(r, streamed=stream)
    check_telemetry(r)
    timings = r.timings[len(r.timings) - len(r.rows):]
    for row, t in zip(r.rows, timings, strict=True):
        st = row["server_timing"]
        assert st["prefill_ms"] == pytest.approx(t.prompt_ms, abs=0.01) and st["decode_ms"] == pytest.approx(t.predicted_ms, abs=0.01)
        assert st["output_tokens"] == t.predicted_n == row["output_tokens"]
        assert row["finish_reason"] == "limit" and row["output_tokens_source"] == "usage"
        # the whole prompt, cached tokens included (the log counts only those it processed)
        assert st["prompt_tokens"] == row["input_tokens"] >= t.prompt_n, (row, t)
    # the same prompts through the OpenAI completions API: the same count as the server's usage
    usage = bench(llama_server, tmp_path / "openai", "--api", "completions", "--no-stream")
    assert [row["input_tokens"] for row in usage.rows] == [row["input_tokens"] for row in r.rows]
    decomposition = r.run["benchmarks"][0]["summary"]["server_timing"]
    rows = [row for row in r.rows if not row["warmup"]]
    assert decomposition["requests"] == len(rows) == REQUESTS
    assert decomposition["prefill_ms"]["mean"] == pytest.approx(sum(row["server_timing"]["prefill_ms"] for row in rows) / REQUESTS)
    if stream:
        network = [(row["first_token_ns"] - row["sent_ns"]) / 1e6 - row["server_timing"]["prefill_ms"] for row in rows]
        assert min(network) >= -CLOCK_MS  # llama.cpp reports no queue: all it leaves out lands here, never below 0
        assert decomposition["network_ms"]["mean"] == pytest.approx(sum(network) / REQUESTS, abs=1e-6)
        speed = [(MAX_TOKENS - 1) * 1000 / row["server_timing"]["decode_ms"] for row in rows]
        assert decomposition["server_decode_tokens_per_s"]["mean"] == pytest.approx(sum(speed) / REQUESTS, rel=1e-9)


def test_two_streams_share_the_two_slots(llama_server: Server, tmp_path: Path) -> None:
    """Concurrency 2 on two slots: every request's tokens are the server's, its counters rose by them."""
    r = bench(llama_server, tmp_path / "r", "--api", "completions", "--concurrency", "2")
    assert len(r.timings) == len(r.rows) + 1  # and the probe
    assert sorted(t.predicted_n for t in r.timings) == [1] + [MAX_TOKENS] * len(r.rows)
    rise = r.after["llamacpp:tokens_predicted_total"] - r.before["llamacpp:tokens_predicted_total"]
    assert rise == sum(row["output_tokens"] for row in r.rows) + 1
    assert {t.task for t in r.timings} and len({t.task for t in r.timings}) == len(r.timings)
    # tokspeed really kept two in flight
    assert any(a is not b and a["sent_ns"] < b["sent_ns"] < a["end_ns"] for a in r.rows for b in r.rows)
    check_telemetry(r)
