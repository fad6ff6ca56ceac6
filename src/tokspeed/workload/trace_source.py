"""Prompts for a replayed trace: request j gets row j's input length and asks for its output length.

* a row with a `prompt` sends it as is (its length counted with the tokenizer or
  the approximation);
* a row with `hash_ids` (Mooncake) is built from blocks of `BLOCK_TOKENS` tokens,
  one per hash id, block h being the same words wherever h appears, cut to the
  row's input length: requests sharing leading hash ids share that prefix, as in
  the trace (what a server's prefix cache sees);
* otherwise a synthetic prompt of exactly the row's input length, unique per
  request (`tokspeed.workload.synthetic`).

Lengths are exact under the approximation (each word one token) and under a
tokenizer for synthetic prompts. Under a tokenizer a hash block is
BLOCK_TOKENS of its tokens (a space-led run of words, encoded and cut), a block
prompt is the blocks' ids cut to the row's length and decoded, and its count is
the tokenizer's (a word cut at the end may re-tokenize by one). `max_tokens` is
the row's output length. Index j ≥ number of rows wraps around (warm-up indices).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokspeed.errors import WorkloadError
from tokspeed.workload.items import CountedPrompt, PromptItem
from tokspeed.workload.lengths import Stream, request_rng
from tokspeed.workload.source import Workload
from tokspeed.workload.synthetic import (
    ApproxPromptBuilder,
    PromptBuilder,
    TokenCodec,
    TokenizerPromptBuilder,
    random_words,
    request_tag,
)
from tokspeed.workload.tokens import HFTokenizerCounter, TokenCounter, load_counter
from tokspeed.workload.trace_formats import TraceRow

BLOCK_TOKENS = 512  # Mooncake's hash block: 512 tokens
_BLOCK_KEY = 1 << 40  # block rngs use keys from here, apart from request indices


@dataclass(frozen=True)
class TraceSource:
    """Request j's prompt from trace row j (see the module docstring)."""

    rows: tuple[TraceRow, ...]
    counter: TokenCounter
    builder: PromptBuilder
    seed: int = 0
    _blocks: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _token_blocks: dict[int, array[int]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def prompt(self, index: int) -> CountedPrompt:
        row = self.rows[index % len(self.rows)]
        if row.prompt is not None:
            item = PromptItem(prompt=row.prompt, origin=f"trace row {index}")
            return CountedPrompt(item, self.counter.count(row.prompt), self.counter.source, row.output_tokens)
        if row.hash_ids and isinstance(self.builder, TokenizerPromptBuilder):
            text = self._token_block_prompt(row, self.builder.codec)
            item = PromptItem(prompt=text, origin=f"trace row {index}")
            return CountedPrompt(item, len(self.builder.codec.encode(text)), self.builder.source, row.output_tokens)
        if row.hash_ids:
            text = self._block_prompt(row)
            item = PromptItem(prompt=text, origin=f"trace row {index}")
            return CountedPrompt(item, self.counter.count(text), self.counter.source, row.output_tokens)
        rng = request_rng(self.seed, index, Stream.PROMPT_TEXT)
        text, count = self.builder.build(request_tag(index), row.input_tokens, rng)
        item = PromptItem(prompt=text, origin=f"trace row {index}")
        return CountedPrompt(item, count, self.builder.source, row.output_tokens)

    def _block_prompt(self, row: TraceRow) -> str:
        words: list[str] = []
        for h in row.hash_ids or ():
            if len(words) >= row.input_tokens:
                break
            words += self._block(h).split(" ")
        if len(words) < row.input_tokens:  # more input than blocks: pad with the row's own words
            words += random_words(request_rng(self.seed, _BLOCK_KEY - 1, Stream.PROMPT_TEXT), row.input_tokens - len(words)).split(" ")
        return " ".join(words[: row.input_tokens])

    def _token_block_prompt(self, row: TraceRow, codec: TokenCodec) -> str:
        """The row's blocks as token ids, padded to its length when short, cut to it and decoded."""
        ids: list[int] = []
        for h in row.hash_ids or ():
            if len(ids) >= row.input_tokens:
                break
            ids.extend(self._token_block(h, codec))
        if len(ids) < row.input_tokens:  # as _block_prompt: the same padding words
            rng = request_rng(self.seed, _BLOCK_KEY - 1, Stream.PROMPT_TEXT)
            ids += _space_led_ids(codec, rng, row.input_tokens - len(ids))
        return codec.decode(ids[: row.input_tokens])

    def _token_block(self, h: int, codec: TokenCodec) -> array[int]:
        """Hash block h as BLOCK_TOKENS token ids (kept compact: a trace can name many blocks)."""
        ids = self._token_blocks.get(h)
        if ids is None:
            rng = request_rng(self.seed, _BLOCK_KEY + h, Stream.PROMPT_TEXT)
            ids = array("i", _space_led_ids(codec, rng, BLOCK_TOKENS))
            self._token_blocks[h] = ids
        return ids

    def _block(self, h: int) -> str:
        text = self._blocks.get(h)
        if text is None:
            text = random_words(request_rng(self.seed, _BLOCK_KEY + h, Stream.PROMPT_TEXT), BLOCK_TOKENS)
            self._blocks[h] = text
        return text

    def describe(self) -> dict[str, Any]:
        return {"items": len(self.rows), "order": "trace order", "input_tokens": "trace"}


def _space_led_ids(codec: TokenCodec, rng: np.random.Generator, n: int) -> list[int]:
    """The first n token ids of " word word …" (led by a space, so blocks join at a word boundary)."""
    text, ids = "", list[int]()
    while len(ids) < n:
        text = f"{text} {random_words(rng, n)}"
        longer = codec.encode(text)
        if len(longer) <= len(ids):
            raise WorkloadError(
                "the tokenizer turns English words into no tokens",
                hint="check that --tokenizer points at the target model's tokenizer.json",
            )
        ids = longer
    return ids[:n]


def trace_workload(rows: tuple[TraceRow, ...], name: str, api: str, tokenizer: str | None, seed: int) -> Workload:
    """The workload replaying `rows` (lengths from the trace; output_tokens is ignored)."""
    counter = load_counter(tokenizer)
    builder: PromptBuilder = (
        TokenizerPromptBuilder(counter) if isinstance(counter, HFTokenizerCounter) else ApproxPromptBuilder()
    )
    source = TraceSource(rows, counter, builder, seed)
    return Workload(name, "trace", source, None, api, seed, tokenizer, (("format", "trace"),))
