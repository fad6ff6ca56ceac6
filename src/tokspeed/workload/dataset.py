"""A prompt source over a fixed list of items: which item request i gets, and its length.

Order: request i takes position i mod n of pass i // n, and every pass sends every
item exactly once. A file keeps its own order (eight prompts and eight requests
send each prompt once, in the file's order, as a prompts-file benchmark script does);
a shuffled source (the built-in set, or a file when asked) permutes each pass with
a generator seeded by (seed, pass), so a short run still sees a representative mix.

Counting: an item's input length, and in "dataset" mode its reply's length, is
counted once, on first use, and kept on this instance, so building a request is
cheap after the first pass and loading a large file counts nothing up front.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokspeed.workload.items import CountedPrompt, PromptItem
from tokspeed.workload.lengths import Stream, request_rng
from tokspeed.workload.tokens import TokenCounter


@dataclass(frozen=True)
class DatasetSource:
    """Items in a cycle; `prompt(i)` is request i's item with its lengths measured."""

    items: tuple[PromptItem, ...]
    counter: TokenCounter
    seed: int = 0
    shuffle: bool = False
    use_reference: bool = False  # output_tokens="dataset": a recorded reply sets max_tokens
    _counts: dict[int, tuple[int, int | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _orders: dict[int, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("a dataset source needs at least one item")

    @property
    def size(self) -> int:
        return len(self.items)

    def position(self, index: int) -> int:
        """Which item request `index` takes."""
        pass_number, offset = divmod(index, len(self.items))
        if not self.shuffle:
            return offset
        return int(self._order(pass_number)[offset])

    def prompt(self, index: int) -> CountedPrompt:
        pos = self.position(index)
        input_tokens, max_tokens = self._measure(pos)
        return CountedPrompt(self.items[pos], input_tokens, self.counter.source, max_tokens)

    def describe(self) -> dict[str, Any]:
        order = "shuffled per pass (seeded)" if self.shuffle else "file order"
        return {"items": len(self.items), "order": order}

    def _order(self, pass_number: int) -> np.ndarray:
        order = self._orders.get(pass_number)
        if order is None:
            order = request_rng(self.seed, pass_number, Stream.ORDER).permutation(len(self.items))
            self._orders[pass_number] = order
        return order

    def _measure(self, pos: int) -> tuple[int, int | None]:
        counts = self._counts.get(pos)
        if counts is None:
            item = self.items[pos]
            counts = (self.counter.count(item.text()), self._own_length(item))
            self._counts[pos] = counts
        return counts

    def _own_length(self, item: PromptItem) -> int | None:
        if item.max_tokens is not None:
            return item.max_tokens
        if self.use_reference and item.reference_output is not None:
            return max(1, self.counter.count(item.reference_output))
        return None
