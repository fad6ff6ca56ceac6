"""Parsing one simulator request body into what the simulator needs, or a 400-worthy error.

Only the fields that change the simulated answer are read; everything else (`temperature`,
`ignore_eos`, `min_tokens`, `model`, ...) is accepted and ignored, as a lenient server would.
Prompt tokens are counted with `approx_token_count`, tokspeed's own approximation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from tokspeed.sim.images import part_image_tokens
from tokspeed.workload.tokens import approx_token_count

ApiName = Literal["completions", "chat"]


class RequestError(Exception):
    """A request the simulator refuses; rendered as an OpenAI-style error (400 unless `status` says)."""

    def __init__(self, message: str, code: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.status = status


@dataclass(frozen=True, slots=True)
class SimRequest:
    """The parts of a request that shape the simulated response."""

    api: ApiName
    stream: bool
    has_stream_options: bool
    include_usage: bool
    max_tokens: int | None  # max_tokens, else max_completion_tokens, else None
    prompt_tokens: int
    model: object = None  # the body's `model`, as sent
    prompt_text: str | None = None  # the text counted (None for token-id prompts): the prefix cache's input


def parse_request(api: ApiName, raw: bytes) -> SimRequest:
    """Validate a `/v1/completions` or `/v1/chat/completions` body; raise `RequestError`."""
    body = _json_object(raw)
    text = _prompt_text(body) if api == "completions" else _messages_text(body)
    prompt_tokens = _prompt_tokens(body) if text is None else approx_token_count(text)
    if api == "chat":
        prompt_tokens += _images_tokens(body["messages"])  # image parts: sim/images.py
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise RequestError("stream_options must be an object", "invalid_type", "stream_options")
    return SimRequest(
        api=api,
        stream=_optional_bool(body, "stream"),
        has_stream_options="stream_options" in body,
        include_usage=bool(stream_options and stream_options.get("include_usage")),
        max_tokens=_max_tokens(body),
        prompt_tokens=prompt_tokens,
        model=body.get("model"),
        prompt_text=text,
    )


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}", "invalid_json") from exc
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object", "invalid_json")
    return body


def _optional_bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be a boolean", "invalid_type", name)
    return value


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(f"{name} must be an integer", "invalid_type", name)
        if value < 1:
            raise RequestError(f"{name} must be at least 1, got {value}", "invalid_value", name)
        return value
    return None


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Completions `prompt`: a string, a list of strings, token ids, or lists of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return approx_token_count(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(approx_token_count(p) for p in prompt)
        if all(_is_token_id(t) for t in prompt):
            return len(prompt)
        if all(isinstance(p, list) and all(_is_token_id(t) for t in p) for p in prompt):
            return sum(len(p) for p in prompt)
    if prompt is None:
        raise RequestError("missing required field: prompt", "missing_field", "prompt")
    raise RequestError("prompt must be a string, a list of strings or a list of token ids", "invalid_type", "prompt")


def _prompt_text(body: dict[str, Any]) -> str | None:
    """A completions prompt given as text (a string or strings, joined by spaces), else None."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return " ".join(prompt)
    return None


def _images_tokens(messages: list[Any]) -> int:
    """Prompt tokens of the messages' `image_url` parts (0 for text-only messages)."""
    return sum(
        part_image_tokens(part)
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for part in m["content"]
    )


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _messages_text(body: dict[str, Any]) -> str:
    """Chat `messages`: the contents of all messages joined with newlines (counted once)."""
    messages = body.get("messages")
    if messages is None:
        raise RequestError("missing required field: messages", "missing_field", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "invalid_type", "messages")
    return "\n".join(_message_text(m, i) for i, m in enumerate(messages))


def _message_text(message: object, index: int) -> str:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestError(f"{param} must be an object", "invalid_type", param)
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return " ".join(_part_text(part) for part in content)
    raise RequestError(f"{param}.content must be a string or a list of parts", "invalid_type", param)


def _part_text(part: object) -> str:
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return str(part["text"])
    return ""
