"""Synthetic prompts of a chosen token length, unique per request.

Request i's length N is drawn from the `input_tokens` spec with a generator
seeded by (seed, i); its text is a tag naming i (base 36, so no two requests of a
run share a first word and a server's prefix cache cannot make later requests
artificially fast) followed by common English words drawn with a generator
seeded by (seed, i). The same seed gives the same prompts, so two runs with one
seed against one server may hit its prefix cache: change the seed between runs
when that matters.

Lengths:
- with a tokenizer, the text is encoded, trimmed to N ids, decoded and checked,
  so it is exactly N tokens under that tokenizer (in the rare case a tokenizer
  will not round-trip, the true count is recorded instead);
- without one, every word has at most four letters and so counts exactly one
  token under `approx_token_count`: the prompt is exactly N *approximate* tokens.
  A real tokenizer will count somewhat differently, which is why such lengths are
  labelled `approx`; pass a tokenizer for exact lengths.

Chat requests add the server's chat-template tokens on top of N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tokspeed.errors import WorkloadError
from tokspeed.records import TokenSource
from tokspeed.workload.items import CountedPrompt, PromptItem
from tokspeed.workload.lengths import LengthSpec, Stream, request_rng
from tokspeed.workload.tokens import approx_token_count

# Common English words of one to four letters: one token each under the approximation.
WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        """
        the of and to in is it you that he was for on are as with his they at be this
        have from or one had by word but not what all were we when your can said than
        use an each she do how them if will up out many then some so her make like him
        into time has look two more go see no way my been call who its now find long
        down day did get come made may part over new take only work know year live me
        back give most very just name good man say help low line turn much mean old any
        same tell boy why ask went men read need land here home us move try kind hand
        last keep open seem next hard both life few run city tree soon page real list
        song fast door gold blue rain wind fire ship road rock data code test fix log
        node user load rate step plan team idea book note file link plot form fact case
        week game body rule unit wave
        """.split()
    )
)
_TRIM_ATTEMPTS = 8
_BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class TokenCodec(Protocol):
    """What exact-length prompts need from a tokenizer (HFTokenizerCounter has it)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class PromptBuilder(Protocol):
    @property
    def source(self) -> TokenSource: ...

    def build(self, tag: str, n: int, rng: np.random.Generator) -> tuple[str, int]:
        """(text, its token count): `tag` then words, `n` tokens long."""
        ...


@dataclass(frozen=True)
class ApproxPromptBuilder:
    """Exactly n tokens under `approx_token_count` (one-token words after the tag)."""

    source: TokenSource = TokenSource.APPROX

    def build(self, tag: str, n: int, rng: np.random.Generator) -> tuple[str, int]:
        tag_tokens = approx_token_count(tag)
        if n <= tag_tokens:
            return tag[: 4 * n], n  # each 4 characters of a word count one token
        return f"{tag} {random_words(rng, n - tag_tokens)}", n


@dataclass(frozen=True)
class TokenizerPromptBuilder:
    """Exactly n tokens under a real tokenizer: encode, trim, decode, verify."""

    codec: TokenCodec
    source: TokenSource = TokenSource.TOKENIZER

    def build(self, tag: str, n: int, rng: np.random.Generator) -> tuple[str, int]:
        text = f"{tag} {random_words(rng, n)}"
        ids = self.codec.encode(text)
        while len(ids) < n:
            text = f"{text} {random_words(rng, n)}"
            longer = self.codec.encode(text)
            if len(longer) <= len(ids):
                raise WorkloadError(
                    "the tokenizer turns English words into no tokens",
                    hint="check that --tokenizer points at the target model's tokenizer.json",
                )
            ids = longer
        exact = self._settle(self.codec.decode(ids[:n]), n, rng)
        return (exact, n) if exact is not None else self._shortest_longer(ids, n)

    def _settle(self, text: str, n: int, rng: np.random.Generator) -> str | None:
        """Re-trim until decode/encode round-trips to n ids (it almost always does at once)."""
        for _ in range(_TRIM_ATTEMPTS):
            ids = self.codec.encode(text)
            if len(ids) == n and text.strip():
                return text
            if len(ids) < n:  # trimming cut a word the tokenizer now reads differently
                more = random_words(rng, n - len(ids))
                ids = self.codec.encode(f"{text} {more}" if text else more)
            text = self.codec.decode(ids[:n])
        return None

    def _shortest_longer(self, ids: list[int], n: int) -> tuple[str, int]:
        """For a tokenizer that cannot say n tokens exactly: the shortest prefix with more."""
        for m in range(n + 1, len(ids) + 1):
            text = self.codec.decode(ids[:m])
            count = len(self.codec.encode(text))
            if text.strip() and count >= n:
                return text, count
        text = self.codec.decode(ids)
        return text, len(self.codec.encode(text))


@dataclass(frozen=True)
class SyntheticSource:
    """Request i's prompt: length from `lengths`, text from `builder`, both seeded by (seed, i)."""

    lengths: LengthSpec
    builder: PromptBuilder
    seed: int = 0

    def prompt(self, index: int) -> CountedPrompt:
        n = self.lengths.draw(self.seed, index, Stream.INPUT_LENGTH)
        rng = request_rng(self.seed, index, Stream.PROMPT_TEXT)
        text, count = self.builder.build(request_tag(index), n, rng)
        item = PromptItem(prompt=text, origin=f"synthetic {index}")
        return CountedPrompt(item, count, self.builder.source, None)

    def describe(self) -> dict[str, Any]:
        return {"items": None, "order": "one generated prompt per request", "input_tokens": str(self.lengths)}


def request_tag(index: int) -> str:
    """`index` in base 36: short, and different for every request."""
    digits = ""
    while True:
        index, rest = divmod(index, 36)
        digits = _BASE36[rest] + digits
        if index == 0:
            return digits


def random_words(rng: np.random.Generator, count: int) -> str:
    """`count` words from WORDS, space-separated."""
    picks = rng.integers(0, len(WORDS), size=count)
    return " ".join(WORDS[i] for i in picks)
