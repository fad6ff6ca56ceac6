"""The checks of a probe item (`Check`) and scoring one response against them: pure functions, no I/O.

Every response is first normalised: Unicode NFKC (full-width digits and letters become
ASCII) and any `<think>…</think>` block removed, so reasoning never counts as the answer.

    number      the last number in the response equals `answer` within tol / rel_tol
    choice      the chosen letter ("B", "The answer is B", "答案是B") equals `answer` (only A-D,
                or up to the answer's letter, count: "I think" is not option I)
    regex       `pattern` is found (re.search) in the stripped response
    json        the response (``` fences allowed) parses; has `keys` and/or equals `equals`
    max_words   non-empty and at most `limit` whitespace-separated words
    max_chars   non-empty and at most `limit` characters, whitespace not counted
    language    at least `min_ratio` of the letters are CJK ideographs (zh) or Latin (en)
    recall      `answer` appears in the response, whitespace ignored
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

LETTERS = "ABCDEFGHIJ"
CheckType = Literal["number", "choice", "regex", "json", "max_words", "max_chars", "language", "recall"]

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_NUMBER = re.compile(r"[-−]?\d+(?:,\d{3})*(?:\.\d+)?|[-−]?\.\d+")
_CLOSE_THINK = "</think>"
# explicit markers, strongest first: "the answer is B" / "答案是：B", then "option C is correct" / "应选 C"
_ANSWER_IS = re.compile(r"(?i:answer)\s*(?i:is)?\s*:?\s*[(\[*_]*([A-J])(?![A-Za-z])|答案\s*(?:是|为)?\s*:?\s*[(\[*_]*([A-J])")
_OPTION_IS = re.compile(
    r"(?i:option|choice)\s*(?i:is)?\s*:?\s*[(\[*_]*([A-J])(?![A-Za-z])|(?:选项|应选|选择|选)\s*(?:是|为)?\s*:?\s*[(\[*_]*([A-J])"
)
_LEADING = re.compile(r"^\W*\(?([A-J])(?![A-Za-z])")
_ANY_LETTER = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")
MIN_LETTERS = 4  # a lone letter counts as a choice when within A..D, or up to the answer's letter
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """NFKC, without `<think>` blocks (and without everything before a `</think>` whose `<think>` the
    chat template put in the prompt, as R1-style templates do), stripped."""
    text = _THINK.sub("", unicodedata.normalize("NFKC", text))
    _, closed, answer = text.rpartition(_CLOSE_THINK)
    return (answer if closed else text).strip()


class Check(BaseModel):
    """One mechanical check of a response; which fields apply depends on `type`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: CheckType
    answer: float | str | None = Field(None, description="number: the value; choice: the letter; recall: the string")
    tol: float = Field(0.0, ge=0, description="number: absolute tolerance")
    rel_tol: float = Field(0.0, ge=0, description="number: relative tolerance")
    pattern: str | None = Field(None, description="regex: searched in the response (Python syntax)")
    keys: list[str] | None = Field(None, description="json: keys the object must have")
    equals: Any = Field(None, description="json: the value the response must equal")
    limit: int | None = Field(None, ge=1, description="max_words / max_chars: the most allowed")
    lang: Literal["zh", "en"] | None = Field(None, description="language: the language the answer must be in")
    min_ratio: float = Field(0.5, gt=0, le=1, description="language: share of letters that must be in `lang`")

    @model_validator(mode="after")
    def _fields_for_type(self) -> Check:
        need = {
            "number": ("answer",),
            "choice": ("answer",),
            "recall": ("answer",),
            "regex": ("pattern",),
            "max_words": ("limit",),
            "max_chars": ("limit",),
            "language": ("lang",),
        }.get(self.type, ())
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"check type {self.type!r} needs {', '.join(missing)}")
        if self.type == "number" and not isinstance(self.answer, (int, float)):
            raise ValueError("check type 'number' needs a numeric answer")
        if self.type == "choice" and not (isinstance(self.answer, str) and len(self.answer) == 1 and self.answer in LETTERS):
            raise ValueError(f"check type 'choice' needs answer to be one letter of {LETTERS}")
        if self.type == "recall" and not isinstance(self.answer, str):
            raise ValueError("check type 'recall' needs a string answer")
        if self.type == "json" and self.keys is None and self.equals is None:
            raise ValueError("check type 'json' needs keys or equals")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a valid regular expression: {exc}") from exc
        return self


def passes(response: str, checks: Sequence[Check]) -> bool:
    """Whether the response passes every check."""
    text = normalise(response)
    return all(check_one(text, c) for c in checks)


def check_one(text: str, check: Check) -> bool:
    """One check against an already normalised response."""
    return bool(_CHECKERS[check.type](text, check))


def last_number(text: str) -> float | None:
    """The last number written in the text (thousands separators allowed), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    return float(found[-1].replace(",", "").replace("−", "-"))


def chosen_letter(text: str, letters: str = LETTERS[:MIN_LETTERS]) -> str | None:
    """The option letter a response picks: 'answer is X', then 'option X', then a leading letter, then the first lone one.

    Only `letters` count, so the pronoun "I" is not option I of a four-option question.
    """
    for marker in (_ANSWER_IS, _OPTION_IS):
        for m in marker.finditer(text):
            if (m.group(1) or m.group(2)) in letters:
                return m.group(1) or m.group(2)
    for pattern in (_LEADING, _ANY_LETTER):
        for m in pattern.finditer(text):
            if m.group(1) in letters:
                return m.group(1)
    return None


def cjk_ratio(text: str) -> float | None:
    """Share of CJK ideographs among CJK ideographs and Latin letters; None if there are neither."""
    cjk = sum(1 for ch in text if _is_cjk(ch))
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    total = cjk + latin
    return cjk / total if total else None


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0xF900 <= cp <= 0xFAFF


def _number(text: str, c: Check) -> bool:
    got = last_number(text)
    if got is None or not isinstance(c.answer, (int, float)):
        return False
    want = float(c.answer)
    return math.isclose(got, want, rel_tol=c.rel_tol, abs_tol=max(c.tol, 1e-9))


def _choice(text: str, c: Check) -> bool:
    answer = str(c.answer)
    letter = chosen_letter(text, LETTERS[: max(MIN_LETTERS, LETTERS.index(answer) + 1)])
    return letter is not None and letter == answer


def _regex(text: str, c: Check) -> bool:
    return c.pattern is not None and re.search(c.pattern, text) is not None


def _json(text: str, c: Check) -> bool:
    m = _FENCE.match(text)
    body = m.group(1) if m else text
    try:
        value: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    if c.keys is not None and not (isinstance(value, dict) and all(k in value for k in c.keys)):
        return False
    return c.equals is None or value == c.equals


def _max_words(text: str, c: Check) -> bool:
    words = text.split()
    return bool(words) and c.limit is not None and len(words) <= c.limit


def _max_chars(text: str, c: Check) -> bool:
    chars = _SPACE.sub("", text)
    return bool(chars) and c.limit is not None and len(chars) <= c.limit


def _language(text: str, c: Check) -> bool:
    ratio = cjk_ratio(text)
    if ratio is None:
        return False
    return ratio >= c.min_ratio if c.lang == "zh" else (1 - ratio) >= c.min_ratio


def _recall(text: str, c: Check) -> bool:
    want = _SPACE.sub("", unicodedata.normalize("NFKC", str(c.answer)))
    return bool(want) and want in _SPACE.sub("", text)


_CHECKERS = {
    "number": _number,
    "choice": _choice,
    "regex": _regex,
    "json": _json,
    "max_words": _max_words,
    "max_chars": _max_chars,
    "language": _language,
    "recall": _recall,
}


def agreement_key(text: str) -> str:
    """A response reduced for the 'normalised' agreement: lowercase, no whitespace or punctuation."""
    norm = normalise(text).lower()
    return "".join(ch for ch in norm if ch.isalnum())
