"""The text the embedded tokenizer is trained on, all shipped in the package.

English and Chinese prose written for tokspeed (`data/corpus_*.txt`: letters,
recipes, notes, explanations of science and of LLM serving, code, logs) plus
tokspeed's built-in benchmark prompts, so the tokenizer knows the words the
default workload uses. About 70 KB; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from tokspeed.errors import ConfigError
from tokspeed.workload.builtin import builtin_prompts

_FILES = ("corpus_en.txt", "corpus_zh.txt")


def corpus_texts() -> list[str]:
    """The training texts in a fixed order: shipped paragraphs, then the built-in prompts."""
    data = resources.files("tokspeed.backends.embedded") / "data"
    texts: list[str] = []
    for name in _FILES:
        try:
            body = (data / name).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"the embedded model's corpus file {name} is missing: {exc}", hint="reinstall tokspeed") from exc
        texts.extend(p.strip() for p in body.split("\n\n") if p.strip())
    texts.extend(p.prompt for p in builtin_prompts())
    return texts


def corpus_digest(texts: list[str]) -> str:
    """A short hash of the texts, so a changed corpus gets a new cache entry."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]
