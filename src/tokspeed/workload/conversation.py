"""Multi-turn conversations: each turn's prompt carries the whole history, real answers included.

Conversation c of a phase has `turns` turns. Turn k's user text and `max_tokens`
come from the wrapped workload's request with turn k's index (the runner gives
turn k of conversation c the index `first_index + c × turns + (k − 1)`), so they
are deterministic for the seed. The history is kept on the client: turn k sends
every earlier user message and the model's real answer to it, then the new user
message (chat: messages with roles; completions: the same contents joined by
newlines), so prompts grow by exactly the previous answer plus the new user text.

Between turns the user "thinks" for a time drawn from `ThinkTime` (constant,
exponential or uniform), seeded by (seed, conversation, turn). With a shared
prefix (`Prefixes`), conversation c starts with a system message holding the
prefix of the group drawn for c.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tokspeed.errors import ConfigError
from tokspeed.records import RequestSpec
from tokspeed.workload.prefix import BaseWorkload, Prefixes
from tokspeed.workload.tokens import ApproxCounter, TokenCounter

ThinkKind = Literal["constant", "exponential", "uniform"]
THINK_FORMS = "SECONDS, constant:S, exponential:MEAN or uniform:MIN,MAX (e.g. 2s, exponential:2s, uniform:1s,3s)"
_THINK_STREAM = 2001
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass(frozen=True)
class ThinkTime:
    """How long a user waits between receiving an answer and sending the next turn."""

    kind: ThinkKind = "constant"
    a: float = 0.0  # constant: the time; exponential: the mean; uniform: the lower bound
    b: float = 0.0  # uniform: the upper bound

    def draw(self, seed: int, conversation: int, turn: int) -> float:
        """Seconds before `turn` of `conversation` is sent: deterministic for (seed, conversation, turn)."""
        if self.kind == "constant" or self.a == self.b == 0:
            return self.a
        rng = np.random.default_rng([seed % (1 << 64), conversation, turn, _THINK_STREAM])
        if self.kind == "exponential":
            return float(rng.exponential(self.a))
        return float(rng.uniform(self.a, self.b))

    @property
    def mean_s(self) -> float:
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def __str__(self) -> str:
        if self.kind == "uniform":
            return f"uniform:{self.a:g}s,{self.b:g}s"
        return f"{self.kind}:{self.a:g}s"


def parse_think_time(text: str | float | None) -> ThinkTime:
    """`2s` (constant), `constant:2s`, `exponential:2s` (mean) or `uniform:1s,3s`; bare numbers are seconds."""
    if text is None:
        return ThinkTime()
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _checked(ThinkTime("constant", float(text)))
    kind, sep, rest = str(text).strip().lower().partition(":")
    if not sep:
        kind, rest = "constant", kind
    if kind in ("constant", "exponential"):
        return _checked(ThinkTime(kind, _seconds(rest, text)))  # type: ignore[arg-type]
    if kind == "uniform":
        low, comma, high = rest.partition(",")
        if comma:
            return _checked(ThinkTime("uniform", _seconds(low, text), _seconds(high, text)))
    raise ConfigError(f"cannot parse think time {text!r}", hint=f"use {THINK_FORMS}")


def _seconds(part: str, whole: object) -> float:
    m = _NUMBER.match(part)
    if not m:
        raise ConfigError(f"cannot parse think time {whole!r}", hint=f"use {THINK_FORMS}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _checked(think: ThinkTime) -> ThinkTime:
    if think.kind == "uniform" and think.b < think.a:
        raise ConfigError(f"think time {think}: the upper bound is below the lower one")
    return think


@dataclass
class Conversation:
    """One conversation in progress: its history (client side) and the next turn to send."""

    number: int
    workload: ConversationWorkload
    messages: list[dict[str, str]] = field(default_factory=list)
    turn: int = 0  # turns sent so far
    prefix_group: int | None = None

    def next_turn(self, index: int) -> RequestSpec:
        """The next turn's request (`index` is its request index): the history, then a new user message.

        The user text and max_tokens are the wrapped workload's request `index`.
        """
        self.turn += 1
        user = self.workload.base.request(index)
        self.messages.append({"role": "user", "content": user.prompt_text()})
        return self.workload.spec(index, self.messages, user.max_tokens, self.prefix_group)

    def answered(self, text: str) -> None:
        """The model's answer to the last turn joins the history."""
        self.messages.append({"role": "assistant", "content": text})

    @property
    def done(self) -> bool:
        return self.turn >= self.workload.turns


@dataclass(frozen=True)
class ConversationWorkload:
    """Conversations of `turns` turns built over `base`; see the module docstring."""

    base: BaseWorkload
    turns: int
    think: ThinkTime = ThinkTime()
    api: str = "chat"
    seed: int = 0
    counter: TokenCounter = field(default_factory=ApproxCounter)
    prefixes: Prefixes | None = None
    keep_all_texts: bool = False  # --token-audit: every answer stays in its record (else the first few)

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ConfigError(f"a conversation needs at least 1 turn, got {self.turns}")

    def start(self, number: int, key: int) -> Conversation:
        """Conversation `number` before its first turn (with its shared-prefix system message, if any).

        `key` (its first turn's request index) seeds the prefix group it draws.
        """
        conv = Conversation(number, self)
        if self.prefixes is not None:
            group = self.prefixes.group_of(key)
            text, _ = self.prefixes.text(group, key)
            conv.messages.append({"role": "system", "content": text})
            conv.prefix_group = group
        return conv

    def spec(
        self, index: int, messages: list[dict[str, str]], max_tokens: int | None, prefix_group: int | None
    ) -> RequestSpec:
        """The request for a history: chat messages, or their contents as one completions prompt."""
        text = "\n".join(m["content"] for m in messages)
        is_chat = self.api == "chat"
        return RequestSpec(
            index=index,
            prompt=None if is_chat else text,
            messages=tuple(dict(m) for m in messages) if is_chat else None,
            max_tokens=max_tokens,
            input_tokens=self.counter.count(text),
            input_tokens_source=self.counter.source,
            keep_text=True,
            prefix_group=prefix_group,
        )

    def request(self, index: int) -> RequestSpec:
        """Request `index` as a first turn with no history (what samples and single requests show)."""
        return dataclasses.replace(self.base.request(index), index=index)

    def think_s(self, conversation: int, turn: int) -> float:
        """The think time before `turn` (≥ 2) of `conversation`."""
        return self.think.draw(self.seed, conversation, turn)

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            **self.base.describe(),
            "multi_turn": {"turns": self.turns, "think_time": str(self.think), "history": "client"},
        }
        if self.prefixes is not None:
            described["shared_prefix"] = self.prefixes.shape.describe()
        return described
