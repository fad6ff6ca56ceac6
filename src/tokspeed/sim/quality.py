"""The simulator's answers to quality-probe questions: right with probability p, else surely wrong.

With `quality_accuracy` set, a generation request whose prompt (the last user message, or
the completions prompt) is exactly a probe item's rendered prompt is answered with a correct
answer (the item's reference, or one derived from its check) with probability p, and
otherwise with an answer its checker rejects. The draw is seeded per (seed, item id), so the
same question always gets the same answer (as at temperature 0) whatever the request order.
Any other prompt gets the simulator's usual text.
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from tokspeed.quality.checkers import LETTERS, passes
from tokspeed.quality.probes import ProbeItem, load_probes
from tokspeed.sim.schedule import ResponsePlan

if TYPE_CHECKING:
    from tokspeed.sim.config import SimConfig

_LONG_EN = " ".join(["the quick answer is not known here"] * 12)
_LONG_ZH = "我不知道这个问题的答案，" * 12
_GENERIC_WRONG = ("Sorry, I do not know.", _LONG_EN, _LONG_ZH)
_PIECE = re.compile(r"\s*(?:[\u3000-\u9fff\uff00-\uffef]|[^\s\u3000-\u9fff\uff00-\uffef]+)|\s+$")


def format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def reference_answer(item: ProbeItem) -> str | None:
    """A correct answer: the item's reference, else one derived from its first check."""
    if item.reference is not None:
        return item.reference
    check = item.check[0]
    if check.type == "number" and isinstance(check.answer, (int, float)):
        return format_number(check.answer)
    if check.type in ("choice", "recall") and isinstance(check.answer, str):
        return check.answer
    return None


def wrong_answer(item: ProbeItem) -> str | None:
    """An answer the item's checks reject: a near miss of the right type first, then generic ones."""
    candidates: list[str] = []
    check = item.check[0]
    if check.type == "number" and isinstance(check.answer, (int, float)):
        a = float(check.answer)
        candidates.append(format_number(a + max(1.0, abs(a)) + check.tol + check.rel_tol * abs(a) + 1))
    if check.type == "choice" and isinstance(check.answer, str) and item.choices:
        candidates.append(LETTERS[(LETTERS.index(check.answer) + 1) % len(item.choices)])
    candidates.extend(_GENERIC_WRONG)
    return next((text for text in candidates if not passes(text, item.check)), None)


def split_tokens(text: str) -> tuple[str, ...]:
    """The answer as simulated tokens: each CJK character, or each run of other non-space characters."""
    return tuple(_PIECE.findall(text))


@dataclass(frozen=True)
class _Key:
    item_id: str
    right: str | None
    wrong: str | None


class QualityAnswers:
    """The answer key of one probe set, and the seeded right/wrong draw."""

    def __init__(self, items: list[ProbeItem], accuracy: float, seed: int) -> None:
        self.accuracy = accuracy
        self.seed = seed
        self._keys = {i.rendered_prompt(): _Key(i.id, reference_answer(i), wrong_answer(i)) for i in items}

    @classmethod
    def load(cls, source: str, accuracy: float, seed: int) -> QualityAnswers:
        return cls(load_probes(source).items, accuracy, seed)

    @classmethod
    def from_config(cls, cfg: SimConfig) -> QualityAnswers:
        return cls.load(cfg.quality_probes, cfg.quality_accuracy or 0.0, cfg.seed)

    def answer(self, prompt: str) -> str | None:
        """The answer to a probe prompt (None when the prompt is not a probe item)."""
        key = self._keys.get(prompt)
        if key is None:
            return None
        right = random.Random(f"{self.seed}:{key.item_id}").random() < self.accuracy
        return key.right if right else key.wrong

    def tokens_for(self, raw: bytes, api: str) -> tuple[str, ...] | None:
        """The answer tokens for a request body, or None when it asks no probe question."""
        prompt = prompt_text(raw, api)
        text = self.answer(prompt) if prompt is not None else None
        return split_tokens(text) if text else None


def prompt_text(raw: bytes, api: str) -> str | None:
    """The text a probe prompt travels in: the last user message (chat) or the prompt string."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    if api == "completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return None


def with_answer(plan: ResponsePlan, tokens: tuple[str, ...] | None) -> ResponsePlan:
    """The plan carrying the answer's tokens (cut at the request's token budget); unchanged when None."""
    if not tokens:
        return plan
    total = min(len(tokens), plan.total_tokens)
    return dataclasses.replace(plan, total_tokens=total, reasoning_tokens=0, text=tokens[:total])
