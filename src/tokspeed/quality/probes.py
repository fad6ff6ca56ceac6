"""The probe set: the JSONL item format, its validation (errors name the line), and prompt rendering.

One line per item:

    {"id": "arith-en-01", "category": "arithmetic", "lang": "en",
     "prompt": "What is 17 × 23? Answer with the number only.",
     "check": {"type": "number", "answer": 391}, "max_tokens": 32}

`choices` (a list of 2-10 strings) makes a multiple-choice item: the prompt is rendered with
the options labelled A, B, C, ... and a line asking for the letter. `check` is one check or a
list (all must pass); see `checkers.py` for the types. `reference` is an optional correct
answer; when given, loading verifies it passes the item's own checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tokspeed.errors import ConfigError
from tokspeed.quality.checkers import LETTERS, Check, passes

BUILTIN = "builtin"
_CHOICE_LINE = {
    "zh": "只回答正确选项的字母。",
    "en": "Answer with the letter of the correct option only.",
}


class ProbeItem(BaseModel):
    """One question with a mechanically checkable answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    lang: str = Field("en", min_length=1, description="language of the prompt: zh, en, ...")
    prompt: str = Field(min_length=1)
    choices: list[str] | None = Field(None, min_length=2, max_length=len(LETTERS))
    check: list[Check]
    reference: str | None = Field(None, description="a correct answer (verified against the checks)")
    max_tokens: int = Field(64, ge=1, le=4096)

    @field_validator("check", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return [v]
        if isinstance(v, list) and not v:
            raise ValueError("check must not be empty")
        return v

    @model_validator(mode="after")
    def _choices_match(self) -> ProbeItem:
        for c in self.check:
            if c.type == "choice":
                if self.choices is None:
                    raise ValueError("a 'choice' check needs the item's choices")
                if LETTERS.index(str(c.answer)) >= len(self.choices):
                    raise ValueError(f"answer {c.answer!r} is past the {len(self.choices)} choices")
        return self

    def rendered_prompt(self) -> str:
        """The text sent to the model: the prompt, then lettered options and the answer line if any."""
        if not self.choices:
            return self.prompt
        options = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(self.choices))
        return f"{self.prompt}\n{options}\n{_CHOICE_LINE.get(self.lang, _CHOICE_LINE['en'])}"


class ProbeSet(BaseModel):
    """The items of one probe file, and where they came from."""

    source: str
    items: list[ProbeItem]

    def select(self, categories: Iterable[str] = (), langs: Iterable[str] = (), limit: int | None = None) -> ProbeSet:
        """The items in the given categories and languages (all when empty), at most `limit` of them."""
        cats, lang_set = set(categories), set(langs)
        unknown = cats - {i.category for i in self.items}
        if unknown:
            raise ConfigError(
                f"no probe items in categories {sorted(unknown)}",
                hint=f"categories in {self.source}: {', '.join(sorted({i.category for i in self.items}))}",
            )
        items = [i for i in self.items if (not cats or i.category in cats) and (not lang_set or i.lang in lang_set)]
        if not items:
            raise ConfigError("the probe selection is empty", hint="loosen --category / --lang")
        return ProbeSet(source=self.source, items=items[:limit] if limit else items)


def load_probes(source: str | Path = BUILTIN) -> ProbeSet:
    """The builtin probe set, or a JSONL file in the format above; ConfigError names the bad line."""
    if str(source) == BUILTIN:
        text = resources.files("tokspeed.quality").joinpath("data/probes.jsonl").read_text(encoding="utf-8")
        return parse_probes(text, BUILTIN)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read probe file {path}: {exc}", hint="give a UTF-8 JSONL file, or 'builtin'") from exc
    return parse_probes(text, str(path))


def parse_probes(text: str, source: str) -> ProbeSet:
    """Parse and validate JSONL probe items: every line an item, ids and prompts unique."""
    items: list[ProbeItem] = []
    seen_ids: dict[str, int] = {}
    seen_prompts: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        item = _parse_line(line, lineno, source)
        where = f"{source} line {lineno}"
        if item.id in seen_ids:
            raise ConfigError(f"{where}: duplicate id {item.id!r} (first on line {seen_ids[item.id]})")
        prompt = item.rendered_prompt()
        if prompt in seen_prompts:
            raise ConfigError(f"{where}: the same prompt as line {seen_prompts[prompt]}", hint="each prompt must be unique")
        if item.reference is not None and not passes(item.reference, item.check):
            raise ConfigError(f"{where}: reference {item.reference!r} does not pass the item's own check")
        seen_ids[item.id] = seen_prompts[prompt] = lineno
        items.append(item)
    if not items:
        raise ConfigError(f"{source} holds no probe items", hint="one JSON object per line; see docs/quality.md")
    return ProbeSet(source=source, items=items)


def _parse_line(line: str, lineno: int, source: str) -> ProbeItem:
    where = f"{source} line {lineno}"
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})", hint="one JSON object per line") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    try:
        return ProbeItem.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "item"
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise ConfigError(f"{where}: {loc}: {msg}", hint="the item format is in docs/quality.md") from exc
