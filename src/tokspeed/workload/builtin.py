"""The built-in prompt set: read lazily from `data/builtin_prompts.json`.

The set opens with the eight Chinese prompts of the classic `prompts.json`
example (verbatim with punctuation restored) and adds realistic chatbot and
engineering requests in Chinese and English, from one-line questions to several paragraphs
of pasted context (logs, code, notes), so prompt lengths vary the way real
traffic does. Each entry carries an id, its language (`zh`/`en`), a category
and where it came from (`seed` or `tokspeed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from tokspeed.errors import WorkloadError
from tokspeed.workload.items import PromptItem

_DATA_FILE = "builtin_prompts.json"


@dataclass(frozen=True, slots=True)
class BuiltinPrompt:
    id: str
    lang: str  # "zh" or "en"
    category: str
    origin: str  # "seed" (the article's prompts.json) or "tokspeed"
    prompt: str


def builtin_prompts() -> tuple[BuiltinPrompt, ...]:
    """Every built-in prompt with its metadata, in file order (the eight `prompts.json` ones first)."""
    ref = resources.files("tokspeed.workload") / "data" / _DATA_FILE
    try:
        data = json.loads(ref.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(
            f"the built-in prompt set is missing or damaged: {exc}", hint="reinstall tokspeed"
        ) from exc
    return tuple(
        BuiltinPrompt(
            id=e["id"], lang=e["lang"], category=e["category"], origin=e["origin"], prompt=e["prompt"]
        )
        for e in data["prompts"]
    )


def builtin_items() -> tuple[PromptItem, ...]:
    """The built-in prompts as dataset items (origin = the prompt's id)."""
    return tuple(PromptItem(prompt=p.prompt, origin=p.id) for p in builtin_prompts())
