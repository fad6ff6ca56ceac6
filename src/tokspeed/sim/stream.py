"""Bytes on the wire: SSE events and JSON bodies in the OpenAI completions and chat formats.

A `ChunkEncoder` is built once per request; it pre-renders each kind of chunk as a prefix and
a suffix around the one varying field (the text), so a token chunk costs one small
`orjson.dumps` of a string and two concatenations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tokspeed.sim.request import ApiName

_SLOT = "\x01tokspeed-sim-slot\x01"
_SLOT_JSON = orjson.dumps(_SLOT)


def usage_dict(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
    """An OpenAI `usage` object; reasoning tokens are part of `completion_tokens`."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def error_body(message: str, code: str | int, param: str | None = None, kind: str = "invalid_request_error") -> bytes:
    """An OpenAI-style error JSON body."""
    error = {"message": message, "type": kind, "param": param, "code": code}
    return orjson.dumps({"error": error})


@dataclass(frozen=True, slots=True)
class _Template:
    prefix: bytes
    suffix: bytes

    def render(self, text: str) -> bytes:
        return self.prefix + orjson.dumps(text) + self.suffix


class ChunkEncoder:
    """Renders the SSE events of one streamed response."""

    __slots__ = ("_api", "_eol", "_head", "_templates")

    def __init__(self, api: ApiName, response_id: str, created: int, model: str, eol: bytes) -> None:
        self._api = api
        self._eol = eol
        obj = "text_completion" if api == "completions" else "chat.completion.chunk"
        self._head: dict[str, Any] = {"id": response_id, "object": obj, "created": created, "model": model}
        self._templates = {
            (reasoning, last): self._template(reasoning, last) for reasoning in (False, True) for last in (False, True)
        }

    def event(self, payload: dict[str, Any]) -> bytes:
        """`data: <json>` followed by a blank line."""
        return b"data: " + orjson.dumps(payload) + self._eol + self._eol

    def role(self) -> bytes:
        """The chat stream's first chunk: the assistant role, no token."""
        return self.event(self._with_choice({"delta": {"role": "assistant", "content": ""}}, None))

    def tokens(self, text: str, *, reasoning: bool, last: bool) -> bytes:
        """A token-bearing chunk; the last one carries `finish_reason: "length"`."""
        return self._templates[(reasoning, last)].render(text)

    def usage(self, usage: dict[str, Any]) -> bytes:
        """The usage-only trailer (`choices: []`)."""
        return self.event({**self._head, "choices": [], "usage": usage})

    def comment(self) -> bytes:
        return b": keep-alive" + self._eol + self._eol

    def done(self) -> bytes:
        return b"data: [DONE]" + self._eol + self._eol

    # faults ---------------------------------------------------------------------------
    def malformed(self) -> bytes:
        """A line that names no SSE field (a client must not mistake it for data)."""
        return b"this line is not server-sent events" + self._eol + self._eol

    def invalid_json(self) -> bytes:
        """A data event whose JSON is cut off mid-object."""
        whole = self.tokens("oops", reasoning=False, last=False)
        return whole[: len(whole) // 2] + self._eol + self._eol

    def error(self, message: str) -> bytes:
        """An OpenAI-style error object as a stream event (what vLLM sends when generation fails)."""
        error = {"message": message, "type": "InternalServerError", "param": None, "code": 500}
        return self.event({"error": error})

    def sse_error(self, message: str) -> bytes:
        """An SSE event of type `error` whose data is no error object (as some gateways send)."""
        return b"event: error" + self._eol + b"data: " + orjson.dumps({"message": message}) + self._eol + self._eol

    def _template(self, reasoning: bool, last: bool) -> _Template:
        if self._api == "completions":
            choice: dict[str, Any] = {"text": _SLOT}
        else:
            choice = {"delta": {"reasoning_content" if reasoning else "content": _SLOT}}
        prefix, suffix = self.event(self._with_choice(choice, "length" if last else None)).split(_SLOT_JSON)
        return _Template(prefix, suffix)

    def _with_choice(self, fields: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        choice = {"index": 0, **fields, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head, "choices": [choice]}


def response_body(
    api: ApiName,
    response_id: str,
    created: int,
    model: str,
    reasoning_text: str,
    content_text: str,
    usage: dict[str, Any] | None,
) -> bytes:
    """The whole non-streamed response as JSON bytes (`usage` omitted when None)."""
    if api == "completions":
        choice: dict[str, Any] = {"index": 0, "text": content_text}
        obj = "text_completion"
    else:
        message = {"role": "assistant", "content": content_text}
        if reasoning_text:
            message["reasoning_content"] = reasoning_text
        choice = {"index": 0, "message": message}
        obj = "chat.completion"
    choice.update(logprobs=None, finish_reason="length")
    body: dict[str, Any] = {"id": response_id, "object": obj, "created": created, "model": model}
    body["choices"] = [choice]
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)
