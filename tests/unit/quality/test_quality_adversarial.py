"""Adversarial answers for the quality checkers (review of d5e6b3b): reasoning left in the answer,
explicit answer markers after a rejected option, trailing punctuation, and lm-eval secrets."""

from __future__ import annotations

import pytest

from tokspeed.quality.checkers import chosen_letter, normalise, passes
from tokspeed.quality.lm_eval import _model_args
from tokspeed.quality.probes import Check, load_probes


def check(**kw: object) -> list[Check]:
    return [Check.model_validate(kw)]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # R1-style chat templates open <think> in the prompt: the answer text holds only the close tag
        ("Maybe the answer is A? No.</think>The answer is B", "The answer is B"),
        ("17 × 23 is about 400\n</think>\n\n391", "391"),
        ("<think>x</think>one</think>two", "two"),
        ("no reasoning at all", "no reasoning at all"),
    ],
)
def test_reasoning_before_an_orphan_close_tag_is_not_the_answer(text: str, want: str) -> None:
    assert normalise(text) == want


def test_orphan_close_tag_reasoning_does_not_decide_a_choice() -> None:
    assert passes("Option A looks right... no, wait.</think>B", check(type="choice", answer="B"))
    assert not passes("The answer is B, surely.</think>A", check(type="choice", answer="B"))


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("不是A，答案是：B", "B"),  # 是 and a colon together
        ("A 不对，应选 C", "C"),
        ("选项 A 错误，正确答案为 C", "C"),  # the answer marker beats an option mention
        ("Option A is wrong; the answer is B", "B"),
        ("A is wrong. Answer is: B", "B"),
        ("The correct answer is **C. Canberra**", "C"),
        ("答案是 B", "B"),
        ("Ｂ", "B"),
        ("I think B", "B"),
        ("Option C is correct.", "C"),
        ("A is tempting. Final answer: **D**", "D"),
        ("A 不对。答案：**B**", "B"),
    ],
)
def test_explicit_answer_markers(text: str, letter: str) -> None:
    assert chosen_letter(normalise(text)) == letter


@pytest.mark.parametrize(
    ("item_id", "text"),
    [
        ("instr-zh-11", "1234。"),
        ("instr-zh-11", "1,234"),
        ("instr-zh-13", "ABC。"),
        ("instr-en-14", "2025-07-04."),
        ("instr-zh-05", "你好世界 你好世界 你好世界。"),
    ],
)
def test_trailing_full_stop_is_accepted_like_the_other_exact_items(item_id: str, text: str) -> None:
    item = next(i for i in load_probes().items if i.id == item_id)
    assert passes(text, item.check)
    assert not passes(text + " extra words", item.check)


@pytest.mark.parametrize(
    "args",
    [
        "pretrained=m,hf_token=hf_SECRETVALUE",
        "pretrained=m,access_token=SECRETVALUE",
        "pretrained=m,openai_api_key=SECRETVALUE",
        "pretrained=m, password=SECRETVALUE",
        "pretrained=m,client_secret=SECRETVALUE",
        "pretrained=m,API_KEY=SECRETVALUE",
    ],
)
def test_lm_eval_model_args_never_keep_a_secret(args: str) -> None:
    kept = _model_args(args)
    assert kept is not None and "SECRETVALUE" not in kept and "pretrained=m" in kept


def test_lm_eval_model_args_keep_the_tokenizer() -> None:
    assert _model_args("pretrained=m,tokenizer=meta/llama,token=hf_x") == "pretrained=m,tokenizer=meta/llama"
