"""Shared-prefix workloads: K groups of requests that start with the same long prefix.

`PrefixWorkload` wraps a workload. Request i draws, with a generator seeded by
(seed, i), whether it reuses a shared prefix (probability `reuse`) and, if so,
which of the `groups` (uniformly). Its prompt is then that group's prefix
followed by the request's own prompt; a request that does not reuse one gets a
prefix of the same length that is unique to it, so the two kinds of request
have the same prompt lengths and differ only in what a prefix cache can reuse.

Chat requests carry the prefix as a leading system message; completions
requests as the first line of the prompt. A prefix is `tokens` tokens under
the workload's token counter: a tag naming its group (`G3`) or its request
(`Ux`), then one-token common words seeded by (seed, group) or (seed, i).
Records are tagged with `prefix_group` (the group, or -1 for a unique prefix).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tokspeed.errors import ConfigError
from tokspeed.records import RequestSpec
from tokspeed.workload.synthetic import (
    ApproxPromptBuilder,
    TokenizerPromptBuilder,
    random_words,
    request_tag,
)
from tokspeed.workload.tokens import ApproxCounter, HFTokenizerCounter, TokenCounter

UNIQUE = -1  # prefix_group of a request whose prefix no other request shares
_GROUP_STREAM = 1001  # random streams of their own, apart from workload.lengths.Stream
_WORDS_STREAM = 1002
_UNIQUE_WORDS_STREAM = 1003


class BaseWorkload(Protocol):
    def request(self, index: int) -> RequestSpec: ...

    def describe(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class SharedPrefix:
    """`groups` prefixes of `tokens` tokens; a request reuses one with probability `reuse`."""

    groups: int
    tokens: int = 1024
    reuse: float = 1.0

    def __post_init__(self) -> None:
        if self.groups < 1:
            raise ConfigError(f"shared-prefix groups must be at least 1, got {self.groups}")
        if self.tokens < 1:
            raise ConfigError(f"shared-prefix tokens must be at least 1, got {self.tokens}")
        if not 0.0 <= self.reuse <= 1.0:
            raise ConfigError(f"prefix reuse must be a fraction from 0 to 1, got {self.reuse}")

    def describe(self) -> dict[str, Any]:
        return {"groups": self.groups, "tokens": self.tokens, "reuse": self.reuse}


@dataclass(frozen=True)
class Prefixes:
    """Which prefix key `key` gets, and its text: deterministic for the seed."""

    shape: SharedPrefix
    seed: int = 0
    counter: TokenCounter = dataclasses.field(default_factory=ApproxCounter)

    def group_of(self, key: int) -> int:
        """A group from 0 to groups − 1 with probability `reuse`, else UNIQUE."""
        rng = np.random.default_rng([self.seed % (1 << 64), key, _GROUP_STREAM])
        if rng.random() >= self.shape.reuse:
            return UNIQUE
        return int(rng.integers(0, self.shape.groups))

    def text(self, group: int, key: int) -> tuple[str, int]:
        """The prefix of `group` (or key's own, for UNIQUE) and its token count."""
        if group == UNIQUE:
            tag, rng = f"U{request_tag(key)}", np.random.default_rng([self.seed % (1 << 64), key, _UNIQUE_WORDS_STREAM])
        else:
            tag, rng = f"G{group}", np.random.default_rng([self.seed % (1 << 64), group, _WORDS_STREAM])
        if isinstance(self.counter, ApproxCounter):
            return ApproxPromptBuilder().build(tag, self.shape.tokens, rng)
        if isinstance(self.counter, HFTokenizerCounter):  # exactly `tokens` under the tokenizer
            return TokenizerPromptBuilder(self.counter).build(tag, self.shape.tokens, rng)
        text = f"{tag} {random_words(rng, self.shape.tokens)}"  # another counter: about one token a word
        return text, self.counter.count(text)


def with_prefix(spec: RequestSpec, prefix: str, prefix_tokens: int, group: int) -> RequestSpec:
    """`spec` with `prefix` in front: a system message (chat) or the prompt's first line."""
    tokens = None if spec.input_tokens is None else spec.input_tokens + prefix_tokens
    if spec.messages is not None:
        messages = ({"role": "system", "content": prefix}, *spec.messages)
        return dataclasses.replace(spec, messages=messages, input_tokens=tokens, prefix_group=group)
    prompt = f"{prefix}\n{spec.prompt or ''}"
    return dataclasses.replace(spec, prompt=prompt, input_tokens=tokens, prefix_group=group)


@dataclass(frozen=True)
class PrefixWorkload:
    """A workload whose requests start with shared (or unique) prefixes; see the module docstring."""

    base: BaseWorkload
    prefixes: Prefixes

    def request(self, index: int) -> RequestSpec:
        group = self.prefixes.group_of(index)
        text, tokens = self.prefixes.text(group, index)
        return with_prefix(self.base.request(index), text, tokens, group)

    def describe(self) -> dict[str, object]:
        return {**self.base.describe(), "shared_prefix": self.prefixes.shape.describe()}
