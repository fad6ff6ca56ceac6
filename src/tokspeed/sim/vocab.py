"""The simulator's output text: a deterministic sequence of tokens that each count as exactly one.

Token i is a space and a word of 1-4 ASCII letters, so `approx_token_count` gives 1 for each
token and n for any n consecutive tokens joined; the simulator's `usage` and tokspeed's own
approximation therefore agree exactly.
"""

from __future__ import annotations

WORDS: tuple[str, ...] = (
    "the", "cat", "sat", "on", "a", "warm", "mat", "and", "the", "dog", "ran", "far",
    "to", "see", "a", "big", "red", "sun", "rise", "over", "the", "blue", "sea", "we",
    "all", "know", "that", "time", "is", "not", "what", "it", "was", "so", "let", "us",
    "go", "now", "and", "find", "out", "how", "fast", "each", "word", "can", "fly", "by",
)  # fmt: skip
TOKENS: tuple[str, ...] = tuple(" " + w for w in WORDS)


def token_text(first: int, count: int) -> str:
    """The text of tokens `first` .. `first + count - 1` of the output, joined."""
    n = len(TOKENS)
    if count == 1:  # one token per chunk, the default: per token on the simulator's hot path
        return TOKENS[first % n]
    return "".join(TOKENS[i % n] for i in range(first, first + count))
