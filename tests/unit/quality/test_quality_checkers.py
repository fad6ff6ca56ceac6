"""The quality probe's checkers (English and Chinese), the builtin probe set, and the sim's answer key."""

from __future__ import annotations

from collections import Counter

import pytest

from tokspeed.quality.checkers import (
    agreement_key,
    chosen_letter,
    cjk_ratio,
    last_number,
    normalise,
    passes,
)
from tokspeed.quality.probes import Check, load_probes
from tokspeed.sim.quality import (
    QualityAnswers,
    reference_answer,
    split_tokens,
    with_answer,
    wrong_answer,
)
from tokspeed.sim.schedule import ResponsePlan, Timing


def check(**kw: object) -> list[Check]:
    return [Check.model_validate(kw)]


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("391", True),
        ("The answer is 391.", True),
        ("17 × 23 = 391", True),
        ("答案是３９１。", True),  # full-width digits
        ("391.0", True),
        ("390", False),
        ("391 or maybe 392", False),  # the last number counts
        ("I don't know", False),
        ("<think>maybe 17*23 is 400</think>391", True),
        ("<think>it is 391", False),  # an unfinished thought is not an answer
    ],
)
def test_number(text: str, ok: bool) -> None:
    assert passes(text, check(type="number", answer=391)) is ok


def test_number_tolerance_and_separators() -> None:
    assert last_number("It costs 10,800 seconds") == 10800
    assert last_number("温度是 −4.5 度") == -4.5
    assert passes("3.14", check(type="number", answer=3.14159, tol=0.01))
    assert not passes("3.1", check(type="number", answer=3.14159, tol=0.01))
    assert passes("105", check(type="number", answer=100, rel_tol=0.05))


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"),
        ("B. Au", "B"),
        ("(C)", "C"),
        ("The answer is D.", "D"),
        ("答案是B", "B"),
        ("答案：C", "C"),
        ("正确答案为 A。", "A"),
        ("Ｂ", "B"),  # full-width
        ("I think it is C", "C"),
        ("The answer is a mitochondrion", None),  # lowercase 'a' is a word, not an option
        ("Sorry, I do not know.", None),
    ],
)
def test_choice_letter(text: str, letter: str | None) -> None:
    assert chosen_letter(normalise(text)) == letter


def test_choice_check() -> None:
    assert passes("答案是 B。", check(type="choice", answer="B"))
    assert not passes("A", check(type="choice", answer="B"))


def test_regex_json_and_lengths() -> None:
    assert passes("YES", check(type="regex", pattern=r"^\W*YES\W*$"))
    assert not passes("Yes, of course", check(type="regex", pattern=r"^\W*YES\W*$"))
    assert passes("你好世界 你好世界", check(type="regex", pattern="^你好世界 你好世界$"))
    keys = check(type="json", keys=["name", "age"])
    assert passes('{"name": "A", "age": 3}', keys)
    assert passes('```json\n{"name": "A", "age": 3}\n```', keys)
    assert not passes('{"name": "A"}', keys)
    assert not passes("name: A, age: 3", keys)
    assert passes("[1, 2, 3]", check(type="json", equals=[1, 2, 3]))
    assert not passes("[1, 2]", check(type="json", equals=[1, 2, 3]))
    assert passes("one two three", check(type="max_words", limit=3))
    assert not passes("one two three four", check(type="max_words", limit=3))
    assert not passes("   ", check(type="max_words", limit=3))  # silence is not an answer
    assert passes("秋高气爽，落叶金黄。", check(type="max_chars", limit=10))
    assert not passes("秋高气爽，落叶金黄满地。", check(type="max_chars", limit=10))


def test_language_and_cjk_ratio() -> None:
    assert cjk_ratio("晴天的天空是蓝色的") == 1.0
    assert cjk_ratio("sky") == 0.0
    assert cjk_ratio("123 !") is None
    assert passes("天空是蓝色的 (blue)", check(type="language", lang="zh"))
    assert not passes("The sky is blue (蓝色)", check(type="language", lang="zh"))
    assert passes("The sky is blue (蓝色)", check(type="language", lang="en"))
    assert not passes("123", check(type="language", lang="en"))


def test_recall() -> None:
    c = check(type="recall", answer="3 月 8 日")
    assert passes("3月8日", c)
    assert passes("会议在 3 月 8 日举行", c)
    assert not passes("3 月 9 日", c)
    assert passes("Code: XK-4471-QZ", check(type="recall", answer="XK-4471-QZ"))
    assert not passes("XK-4471-Q2", check(type="recall", answer="XK-4471-QZ"))


def test_agreement_key() -> None:
    assert agreement_key(" The answer: B. ") == agreement_key("the answer b")
    assert agreement_key("答案是Ｂ。") == agreement_key("答案是 b")


def test_builtin_probe_set_shape() -> None:
    items = load_probes().items
    assert len(items) >= 100
    langs = Counter(i.lang for i in items)
    assert langs["zh"] == langs["en"] == len(items) // 2
    cats = Counter(i.category for i in items)
    assert set(cats) == {"arithmetic", "knowledge", "instruction", "recall"}
    assert min(cats.values()) >= 20
    types = {c.type for i in items for c in i.check}
    assert types == {"number", "choice", "regex", "json", "max_words", "max_chars", "language", "recall"}


def test_every_builtin_item_has_a_passing_answer_and_a_failing_one() -> None:
    for item in load_probes().items:
        right, wrong = reference_answer(item), wrong_answer(item)
        assert right is not None and passes(right, item.check), item.id
        assert wrong is not None and not passes(wrong, item.check), item.id
        assert "".join(split_tokens(right)) == right


def test_sim_answers_are_seeded_per_item() -> None:
    items = load_probes().items
    a = QualityAnswers(items, 0.5, seed=1)
    b = QualityAnswers(list(reversed(items)), 0.5, seed=1)
    prompts = [i.rendered_prompt() for i in items]
    assert [a.answer(p) for p in prompts] == [b.answer(p) for p in prompts]  # order-independent
    right = sum(passes(a.answer(p) or "", i.check) for p, i in zip(prompts, items))
    assert 30 < right < 82  # 112 draws at p=0.5: far outside 3.5 sigma otherwise
    assert QualityAnswers(items, 1.0, 0).answer(prompts[0]) == reference_answer(items[0])
    assert a.answer("not a probe question") is None


def test_with_answer_replaces_the_text_and_token_count() -> None:
    plan = ResponsePlan(timing=Timing(prefill_ns=0, itl_ns=0), total_tokens=8, reasoning_tokens=2)
    tokens = split_tokens("今天 is fine")
    answered = with_answer(plan, tokens)
    assert answered.total_tokens == len(tokens) == 4 and answered.reasoning_tokens == 0
    assert answered.token_text(0, 4) == "今天 is fine"
    assert with_answer(plan, None) is plan
    assert with_answer(plan, tuple("abcdefghij")).total_tokens == 8  # cut at max_tokens
    assert plan.token_text(0, 2) == " the cat"  # unanswered plans keep the vocabulary
