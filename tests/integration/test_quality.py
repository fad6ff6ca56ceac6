"""`tokspeed quality` and `run --quality` against simulators that answer probe questions at a set rate.

The simulator's right/wrong draw is seeded per (seed, item id), so the true set of items each
simulator answers correctly is known here exactly (`truth`); every reported count, accuracy,
p-value and agreement is checked against it.
"""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import SimServer, load_json, run_cli
from tokspeed.quality.checkers import passes
from tokspeed.quality.probes import ProbeItem, load_probes
from tokspeed.quality.stats import mcnemar_exact, wilson
from tokspeed.sim.quality import QualityAnswers

pytestmark = pytest.mark.integration
ITEMS = load_probes().items
FAST = ("--ttft-ms", "2", "--itl-ms", "0.5")


def truth(accuracy: float, seed: int) -> dict[str, bool]:
    """Which items a simulator with this accuracy and seed answers correctly."""
    answers = QualityAnswers(ITEMS, accuracy, seed)
    return {i.id: passes(answers.answer(i.rendered_prompt()) or "", i.check) for i in ITEMS}


def by_category(correct: dict[str, bool]) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item in ITEMS:
        out[item.category][0] += correct[item.id]
        out[item.category][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def discordant(a: dict[str, bool], b: dict[str, bool], items: list[ProbeItem] = ITEMS) -> tuple[int, int]:
    return (sum(a[i.id] and not b[i.id] for i in items), sum(b[i.id] and not a[i.id] for i in items))


def test_compare_exact_vs_degraded(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    good = start_sim(*FAST, "--quality-accuracy", "1.0")
    bad = start_sim(*FAST, "--quality-accuracy", "0.6", "--seed", "5")
    out = tmp_path / "q"
    proc = run_cli("quality", "--target", f"fp16={good.url}", "--target", f"awq={bad.url}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    result = load_json(out / "quality.json")
    fp16, awq = result["targets"]
    assert fp16["overall"]["accuracy"] == 1.0 and fp16["overall"]["n"] == len(ITEMS)
    want = truth(0.6, 5)
    k = sum(want.values())
    assert awq["overall"]["correct"] == k
    # the draw is binomial(112, 0.6): its count lies within 3.5 sigma of 67.2 (a broken draw would not)
    assert abs(k - 0.6 * len(ITEMS)) < 3.5 * (len(ITEMS) * 0.24) ** 0.5
    cats = by_category(want)
    for score in awq["categories"]:
        assert (score["correct"], score["n"]) == cats[score["name"]]
        low, high = wilson(*cats[score["name"]])
        assert (score["ci_low"], score["ci_high"]) == pytest.approx((low, high))
    comp = result["comparisons"][0]
    b, c = discordant({i.id: True for i in ITEMS}, want)
    assert (comp["overall"]["only_baseline"], comp["overall"]["only_candidate"]) == (b, c) == (len(ITEMS) - k, 0)
    assert comp["overall"]["p_value"] == pytest.approx(mcnemar_exact(b, c)) and comp["overall"]["significant"]
    assert comp["overall"]["ci_high"] < 0  # the loss's interval excludes zero
    # a right answer is the reference (identical on both); a wrong one differs from it
    assert comp["agreement"]["exact"] == pytest.approx(k / len(ITEMS))
    assert "awq" in comp["sentence"] and "lost" in comp["sentence"] and "significant" in comp["sentence"]
    lines = (out / "quality.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(ITEMS)
    rows = [json.loads(line) for line in lines]
    assert {r["id"]: r["correct"] for r in rows if r["target"] == "awq"} == want
    assert "McNemar" in proc.stdout and "awq" in proc.stdout


def test_same_accuracy_is_not_significant(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    a = start_sim(*FAST, "--quality-accuracy", "0.8", "--seed", "1")
    b = start_sim(*FAST, "--quality-accuracy", "0.8", "--seed", "2")
    out = tmp_path / "q"
    proc = run_cli("quality", "-t", a.url, "-t", b.url, "--out", str(out), "--category", "arithmetic",
                   "--category", "knowledge", "--category", "recall", "--category", "instruction")
    assert proc.returncode == 0, proc.stderr
    comp = load_json(out / "quality.json")["comparisons"][0]
    ta, tb = truth(0.8, 1), truth(0.8, 2)
    b_only, c_only = discordant(ta, tb)
    assert b_only + c_only > 10  # the two disagree on many items, yet in balance
    assert (comp["overall"]["only_baseline"], comp["overall"]["only_candidate"]) == (b_only, c_only)
    assert comp["overall"]["p_value"] == pytest.approx(mcnemar_exact(b_only, c_only))
    assert not comp["overall"]["significant"] and "not significant" in comp["sentence"]
    for d in comp["categories"]:
        items = [i for i in ITEMS if i.category == d["name"]]
        assert (d["only_baseline"], d["only_candidate"]) == discordant(ta, tb, items)


def test_run_quality_adds_the_block(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--quality-accuracy", "0.7", "--seed", "9")
    out = tmp_path / "run"
    proc = run_cli("run", "--target", sim.url, "--requests", "10", "--concurrency", "2", "--max-tokens", "8",
                   "--no-telemetry", "--plain", "--out", str(out), "--quality")
    assert proc.returncode == 0, proc.stderr
    run = load_json(out / "run.json")
    assert run["status"] == "complete" and run["benchmarks"][0]["summary"]["requests"]["completed"] == 10
    quality = run["quality"]
    want = truth(0.7, 9)
    assert quality["targets"][0]["overall"]["correct"] == sum(want.values())
    assert {c["name"]: (c["correct"], c["n"]) for c in quality["targets"][0]["categories"]} == by_category(want)
    assert "Quality (probe, 112 items)" in proc.stdout
    assert len((out / "quality.jsonl").read_text().splitlines()) == len(ITEMS)
    report = run_cli("report", str(out))  # the block survives being read back
    assert report.returncode == 0, report.stderr


def test_run_quality_refuses_non_http_targets(tmp_path: Path) -> None:
    proc = run_cli("run", "--target", "embedded", "--quality", "--requests", "1", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "--quality needs an HTTP --target" in proc.stderr
    two = run_cli("run", "-t", "http://127.0.0.1:9/v1", "-t", "http://127.0.0.1:10/v1", "--quality", "--out",
                  str(tmp_path / "r2"))
    assert two.returncode == 2 and "--quality probes one target" in two.stderr


def test_unreachable_target_fails_clearly(tmp_path: Path) -> None:
    proc = run_cli("quality", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "q"))
    assert proc.returncode == 2 and "cannot reach http://127.0.0.1:9/v1" in proc.stderr  # as `run`: an unreachable target is exit 2


def test_failed_requests_count_as_wrong_and_are_reported(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--quality-accuracy", "1.0", "--fault", "http_500=0.25", "--seed", "4")
    out = tmp_path / "q"
    proc = run_cli("quality", "--target", sim.url, "--out", str(out), "--lang", "zh")
    assert proc.returncode == 0, proc.stderr
    overall = load_json(out / "quality.json")["targets"][0]["overall"]
    assert overall["n"] == 56 and 0 < overall["errors"] < 56
    assert overall["correct"] == 56 - overall["errors"]  # everything answered was right
    assert "failed requests" in proc.stdout


def _post(url: str, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return bytes(resp.read())


def test_sim_streams_the_answer(start_sim: Callable[..., SimServer]) -> None:
    sim = start_sim(*FAST, "--quality-accuracy", "1.0", "--tokens-per-chunk", "2")
    item = next(i for i in ITEMS if i.id == "instr-zh-08")
    raw = _post(sim.url + "/chat/completions", {"messages": [{"role": "user", "content": item.rendered_prompt()}],
                                                 "stream": True, "max_tokens": 64,
                                                 "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == item.reference
    assert events[-1]["usage"]["completion_tokens"] == len(item.reference or "")  # one token per CJK character
    other = json.loads(_post(sim.url + "/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 3}))
    assert other["choices"][0]["message"]["content"] == " the cat sat"
