"""Quality statistics against known values; probe-file validation; lm-eval parsing; comparisons."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tokspeed.cli import main
from tokspeed.errors import ConfigError
from tokspeed.quality.lm_eval import load_lm_eval
from tokspeed.quality.probes import parse_probes
from tokspeed.quality.schema import ItemResult
from tokspeed.quality.score import compare, target_quality
from tokspeed.quality.stats import (
    mcnemar_exact,
    paired_difference_ci,
    wilson,
)


def test_wilson_known_values() -> None:
    # Newcombe (1998), Table I: 81/263 -> 0.2553-0.3662; textbook 8/10 -> 0.4902-0.9433
    low, high = wilson(81, 263)
    assert low == pytest.approx(0.2553, abs=5e-5) and high == pytest.approx(0.3662, abs=5e-5)
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=5e-5) and high == pytest.approx(0.9433, abs=5e-5)
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=5e-5)
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 0) == (0.0, 1.0)


def test_mcnemar_exact_known_values() -> None:
    assert mcnemar_exact(10, 2) == pytest.approx(158 / 4096)  # 0.0386: significant
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 0.0625: five discordant pairs cannot reach 5%
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_mcnemar_matches_scipy_binomtest() -> None:
    from scipy import stats

    for b, c in [(3, 11), (7, 8), (0, 9), (20, 35), (1, 1)]:
        assert mcnemar_exact(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue)


def test_paired_difference_ci() -> None:
    diff, low, high = paired_difference_ci(b=10, c=2, n=100)
    assert diff == pytest.approx(-0.08)
    half = 1.959963984540054 * ((12 - 64 / 100) ** 0.5) / 100
    assert low == pytest.approx(-0.08 - half) and high == pytest.approx(-0.08 + half)
    assert paired_difference_ci(0, 0, 50) == (0.0, 0.0, 0.0)


GOOD = '{"id": "a", "category": "c", "prompt": "What is 1+1?", "check": {"type": "number", "answer": 2}}'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ('{"id": "b", "category": "c", "prompt": "p"}', "line 2: check: Field required"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": {"type": "number"}}', "line 2: check.0: check type 'number' needs answer"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": {"type": "regex", "pattern": "("}}', "is not a valid regular expression"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": {"type": "choice", "answer": "B"}}', "needs the item's choices"),
        ('{"id": "b", "category": "c", "prompt": "p", "choices": ["x", "y"], "check": {"type": "choice", "answer": "C"}}', "past the 2 choices"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": {"type": "bogus"}}', "line 2: check.0.type"),
        ('{"id": "a", "category": "c", "prompt": "other", "check": {"type": "recall", "answer": "x"}}', "duplicate id 'a' (first on line 1)"),
        ('{"id": "b", "category": "c", "prompt": "What is 1+1?", "check": {"type": "recall", "answer": "x"}}', "the same prompt as line 1"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": {"type": "number", "answer": 2}, "reference": "3"}', "reference '3' does not pass"),
        ('{"id": "b", "category": "c", "prompt": "p", "check": [], "extra": 1}', "line 2:"),
    ],
)
def test_probe_file_errors_name_the_line(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_probes(GOOD + "\n" + line + "\n", "mine.jsonl")
    assert message in str(err.value) and str(err.value).startswith("mine.jsonl line")


def test_probe_file_blank_lines_comments_and_rendering() -> None:
    text = GOOD + "\n\n// a comment\n" + (
        '{"id": "q", "category": "k", "lang": "zh", "prompt": "水的化学式？", "choices": ["H2O", "CO2"],'
        ' "check": {"type": "choice", "answer": "A"}, "reference": "A"}'
    )
    items = parse_probes(text, "f").items
    assert [i.id for i in items] == ["a", "q"]
    assert items[1].rendered_prompt() == "水的化学式？\nA. H2O\nB. CO2\n只回答正确选项的字母。"
    with pytest.raises(ConfigError, match="holds no probe items"):
        parse_probes("\n// nothing\n", "empty.jsonl")


LM_EVAL = {
    "results": {
        "mmlu": {"acc,none": 0.6512, "acc_stderr,none": 0.0038, "alias": "mmlu"},
        "ceval-valid": {"acc,none": 0.5981, "acc_stderr,none": 0.0127, "acc_norm,none": 0.6011,
                        "acc_norm_stderr,none": 0.0125, "alias": "ceval-valid"},
        "gsm8k": {"exact_match,strict-match": 0.41, "exact_match_stderr,strict-match": 0.0135,
                  "exact_match,flexible-extract": 0.44, "exact_match_stderr,flexible-extract": "N/A"},
    },
    "groups": {"mmlu": {"acc,none": 0.6512, "acc_stderr,none": 0.0038, "alias": "mmlu"}},
    "config": {"model": "local-completions", "model_args": "model=qwen,base_url=http://h:8000/v1/completions,api_key=sk-secret"},
    "lm_eval_version": "0.4.5",
}


def test_lm_eval_results_are_read(tmp_path: Path) -> None:
    path = tmp_path / "results_2025-01-01.json"
    path.write_bytes(orjson.dumps(LM_EVAL))
    res = load_lm_eval(path)
    got = {(s.task, s.metric, s.filter): (s.value, s.stderr) for s in res.scores}
    assert got[("mmlu", "acc", "none")] == (0.6512, 0.0038)
    assert got[("ceval-valid", "acc_norm", "none")] == (0.6011, 0.0125)
    assert got[("gsm8k", "exact_match", "flexible-extract")] == (0.44, None)
    assert len(got) == 5  # the group duplicate of mmlu is kept once; aliases and stderrs are no scores
    assert res.model == "local-completions" and res.version == "0.4.5"
    assert res.model_args is not None and "sk-secret" not in res.model_args
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps({"results": {"hellaswag": {"acc": 0.5, "acc_stderr": 0.01}}}))
    assert [(s.metric, s.stderr) for s in load_lm_eval(old).scores] == [("acc", 0.01)]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"scores": 1}')
    with pytest.raises(ConfigError, match="not an lm-eval results file"):
        load_lm_eval(bad)


def test_quality_cli_stores_lm_eval_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(orjson.dumps(LM_EVAL))
    assert main(["quality", "--lm-eval", str(path), "--out", str(tmp_path / "q")]) == 0
    data = orjson.loads((tmp_path / "q" / "quality.json").read_bytes())
    assert data["schema"] == "tokspeed.quality/1"
    assert data["lm_eval"][0]["scores"][0] == {"task": "mmlu", "metric": "acc", "filter": "none",
                                               "value": 0.6512, "stderr": 0.0038}
    assert "mmlu acc 0.6512" in capsys.readouterr().out
    assert main(["quality", "--out", str(tmp_path / "x")]) == 2  # nothing to do


def results(label: str, correct: list[bool], cats: list[str], text: str = "x") -> list[ItemResult]:
    return [
        ItemResult(target=label, id=f"i{i}", category=cat, lang="en", correct=ok,
                   response=text if ok else f"wrong {i}", latency_ms=100.0, completion_tokens=10)
        for i, (ok, cat) in enumerate(zip(correct, cats))
    ]


def test_comparison_counts_discordant_pairs_and_says_it() -> None:
    cats = ["arith"] * 20 + ["know"] * 20
    a = results("fp16", [True] * 40, cats)
    b_ok = [True] * 20 + [i % 2 == 0 for i in range(20)]  # loses 10 of 20 on know
    b = results("awq", b_ok, cats)
    b = [r.model_copy(update={"latency_ms": 50.0}) for r in b]
    ta, tb = target_quality("fp16", "u", None, a, 1.0), target_quality("awq", "u", None, b, 1.0)
    comp = compare(ta, a, tb, b)
    know = next(d for d in comp.categories if d.name == "know")
    assert (know.only_baseline, know.only_candidate, know.difference) == (10, 0, -0.5)
    assert know.p_value == pytest.approx(2 / 1024) and know.significant
    arith = next(d for d in comp.categories if d.name == "arith")
    assert arith.difference == 0 and arith.p_value == 1.0 and not arith.significant
    assert comp.agreement.exact == pytest.approx(30 / 40)
    assert comp.speed_ratio == pytest.approx(2.0)
    assert comp.sentence.startswith("awq is 2.00× faster than fp16 and lost 25.0 points overall (significant")
    assert "lost 50.0 points on know (significant" in comp.sentence
