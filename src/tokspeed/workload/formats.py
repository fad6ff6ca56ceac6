"""Turning one parsed dataset entry into a PromptItem.

Entries, whatever file they came from:

- a string: the prompt itself (a `prompts.json` list of strings);
- an object with `prompt` (or `text`, `question`), or with `messages` in the
  OpenAI chat format (`messages` wins when both are present), and an optional
  `max_tokens`;
- a ShareGPT conversation, `{"conversations": [{"from": "human", "value": ...}, ...]}`:
  the first human turn is the prompt, preceded by a system turn if one comes
  before it; the first gpt turn after it is the reference reply. Conversations
  are real-world data and often ragged, so one without a human turn (or, when
  replies are needed, without a reply) is skipped and counted, not fatal.

Problems raise `EntryError` with a plain message; `files` adds the file name
and the line or row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokspeed.workload.items import PromptItem

PROMPT_KEYS = ("prompt", "text", "question")
_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt", "model")
_SYSTEM = ("system",)


class EntryError(ValueError):
    """An entry that cannot be used; the message says why."""


def item_from_entry(entry: Any, origin: str, *, need_reply: bool = False) -> PromptItem | None:
    """The item for `entry`, or None for a ShareGPT conversation that must be skipped."""
    if isinstance(entry, str):
        return PromptItem(prompt=_prompt_text(entry), origin=origin)
    if not isinstance(entry, Mapping):
        raise EntryError(f"expected a string or an object, got {type(entry).__name__}")
    if "conversations" in entry:
        return _from_conversation(entry["conversations"], origin, need_reply)
    return _from_object(entry, origin)


def parse_max_tokens(value: Any) -> int | None:
    """An entry's `max_tokens`: absent/None/empty, or a whole number >= 1."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EntryError(f"max_tokens must be a whole number >= 1, got {value!r}")
    return value


def _from_object(entry: Mapping[str, Any], origin: str) -> PromptItem:
    max_tokens = parse_max_tokens(entry.get("max_tokens"))
    if "messages" in entry:
        messages = _messages(entry["messages"])
        return PromptItem(messages=messages, max_tokens=max_tokens, origin=origin)
    for key in PROMPT_KEYS:
        if key in entry:
            return PromptItem(prompt=_prompt_text(entry[key]), max_tokens=max_tokens, origin=origin)
    keys = ", ".join(sorted(map(str, entry))) or "none"
    raise EntryError(f"no prompt: expected a 'prompt' or 'messages' field (fields: {keys})")


def _prompt_text(value: Any) -> str:
    if not isinstance(value, str):
        raise EntryError(f"the prompt must be a string, got {type(value).__name__}")
    if not value.strip():
        raise EntryError("the prompt is empty")
    return value


def _messages(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise EntryError("'messages' must be a non-empty list of {role, content} objects")
    pairs = tuple(_message(m, i + 1) for i, m in enumerate(value))
    if not any(content.strip() for _, content in pairs):
        raise EntryError("every message is empty")
    return pairs


def _message(value: Any, position: int) -> tuple[str, str]:
    if not isinstance(value, Mapping) or not isinstance(value.get("role"), str):
        raise EntryError(f"message {position} needs a 'role' string and a 'content'")
    return value["role"], _content(value.get("content"), position)


def _content(value: Any, position: int) -> str:
    """Message content: a string, or OpenAI content parts of which only text is kept."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p for p in value if isinstance(p, Mapping) and p.get("type") == "text"]
        texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
        if texts and len(texts) == len(parts):
            return "\n".join(texts)
    raise EntryError(f"message {position}: content must be a string or a list of text parts")


def _from_conversation(turns: Any, origin: str, need_reply: bool) -> PromptItem | None:
    if not isinstance(turns, list):
        raise EntryError("'conversations' must be a list of {from, value} turns")
    system: str | None = None
    for i, turn in enumerate(turns):
        speaker, value = _turn(turn)
        if speaker in _SYSTEM and value.strip():
            system = value
        elif speaker in _HUMAN and value.strip():
            reply = _first_reply(turns[i + 1 :])
            if need_reply and reply is None:
                return None
            return _conversation_item(system, value, reply if need_reply else None, origin)
    return None


def _first_reply(turns: list[Any]) -> str | None:
    for turn in turns:
        speaker, value = _turn(turn)
        if speaker in _GPT:
            return value
    return None


def _turn(turn: Any) -> tuple[str, str]:
    """(speaker, text) of a ShareGPT turn; a malformed turn reads as ("", "")."""
    if not isinstance(turn, Mapping):
        return "", ""
    speaker, value = turn.get("from"), turn.get("value")
    if not isinstance(speaker, str) or not isinstance(value, str):
        return "", ""
    return speaker.lower(), value


def _conversation_item(system: str | None, prompt: str, reply: str | None, origin: str) -> PromptItem:
    if system is None:
        return PromptItem(prompt=prompt, reference_output=reply, origin=origin)
    messages = (("system", system), ("user", prompt))
    return PromptItem(messages=messages, reference_output=reply, origin=origin)
