"""The simulator's prefix cache: which leading prompt tokens a request finds already computed.

Modelled on vLLM's automatic prefix caching: the prompt (as the simulator counts it, see
`prompt_tokens`) is cut into blocks of `block_tokens`; block j's hash chains the hash of
block j-1 with block j's tokens, so a block hits only when the whole prefix up to it matches.
A request's cached tokens are its leading blocks found in the cache, times `block_tokens`,
never the whole prompt (at least one prompt token is always computed, as vLLM does).
Every full block of the prompt is then inserted (least recently used blocks are evicted
beyond `capacity_tokens`). Lookup and insertion happen together when a request is
accepted, so a later request can hit blocks of one still in its prefill.

Only the prompt is cached, not the generated tokens. Cached tokens skip the
`per_prompt_token_us` prefill cost; the response's usage reports them as
`prompt_tokens_details.cached_tokens` and the log as `cached_tokens`.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from tokspeed.workload.tokens import _WIDE

_WORD = re.compile(r"\S+")
DEFAULT_BLOCK_TOKENS = 16


def prompt_tokens(text: str) -> list[str]:
    """The prompt as the simulator's tokens: each wide character one token, other words cut
    into pieces of four characters (the same count as `approx_token_count`)."""
    spaced = _WIDE.sub(lambda m: f" {m.group(0)} ", text)
    return [word[i : i + 4] for word in _WORD.findall(spaced) for i in range(0, len(word), 4)]


class PrefixCache:
    """An LRU set of chained block hashes, `capacity_tokens` worth of blocks at most."""

    def __init__(self, capacity_tokens: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be at least 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_insert(self, tokens: list[str]) -> int:
        """How many leading tokens of `tokens` are cached; then cache every full block of them."""
        hashes = self._hashes(tokens)
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            hit += 1
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        computable = max(0, (len(tokens) - 1) // self.block_tokens)  # the last token is always computed
        return min(hit, computable) * self.block_tokens

    def _hashes(self, tokens: list[str]) -> list[int]:
        size, prev, out = self.block_tokens, 0, []
        for start in range(0, len(tokens) - size + 1, size):
            prev = hash((prev, tuple(tokens[start : start + size])))
            out.append(prev)
        return out

    def __len__(self) -> int:
        return len(self._blocks)


def with_cached(usage: dict[str, Any], cached_tokens: int | None) -> dict[str, Any]:
    """`usage` with `prompt_tokens_details.cached_tokens` when the cache is on."""
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage
