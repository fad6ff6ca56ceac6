"""Counting tokens: the target's tokenizer when one is available, else a documented approximation.

The approximation (used by the simulator too, so its `usage` agrees with it):
every CJK character (and other wide script character) counts as one token, and
every other run of text counts as one token per started 4 characters of each
whitespace-separated word. For English prose this lands within ~15% of
GPT-style BPE tokenizers; it is labelled `approx` wherever it is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tokspeed.errors import ConfigError
from tokspeed.records import TokenSource

_WIDE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")
_WORD = re.compile(r"\S+")


def approx_token_count(text: str) -> int:
    """Approximate token count: wide characters 1 each, other words ceil(len/4) each."""
    wide = len(_WIDE.findall(text))
    narrow = _WIDE.sub(" ", text)
    return wide + sum((len(w) + 3) // 4 for w in _WORD.findall(narrow))


class TokenCounter(Protocol):
    @property
    def source(self) -> TokenSource: ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class ApproxCounter:
    """The character heuristic above, with the TokenCounter interface."""

    source: TokenSource = TokenSource.APPROX

    def count(self, text: str) -> int:
        return approx_token_count(text)


class HFTokenizerCounter:
    """A local Hugging Face tokenizer (`tokenizer.json` file or a directory holding one)."""

    source = TokenSource.TOKENIZER

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(
                "--tokenizer needs the 'tokenizers' package",
                hint="pip install 'tokspeed[tokenizer]'",
            ) from exc
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise ConfigError(
                f"no tokenizer.json at {path}",
                hint="pass a tokenizer.json file or a model directory that holds one",
            )
        self._tok = Tokenizer.from_file(str(file))

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


def load_counter(tokenizer: str | None) -> TokenCounter:
    """The tokenizer at `tokenizer` if given, else the approximation."""
    if tokenizer:
        return HFTokenizerCounter(tokenizer)
    return ApproxCounter()
