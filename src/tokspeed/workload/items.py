"""Prompt items: one prompt as a dataset holds it, and its conversion to a RequestSpec.

A `PromptItem` is either a plain `prompt` or chat `messages` (role, content
pairs), with the item's own `max_tokens` if its file gave one, and, for
conversation datasets, the `reference_output` (the recorded reply) whose
length `output_tokens="dataset"` uses. A `CountedPrompt` is an item with its
input length measured, which is all a `Workload` needs to build a request.

Input lengths count the prompt text (message contents joined by newlines);
chat-template tokens the server adds are not included, so the server's own
`usage.prompt_tokens` is the better figure when it reports one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokspeed.records import RequestSpec, TokenSource

CHAT = "chat"
COMPLETIONS = "completions"
APIS = (CHAT, COMPLETIONS)


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One prompt from a dataset. Exactly one of `prompt` and `messages` is set."""

    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs
    max_tokens: int | None = None  # the item's own output length, which wins over the spec
    reference_output: str | None = None  # a recorded reply, for output_tokens="dataset"
    origin: str = ""  # where it came from ("line 3", "row 2", an id), for messages

    def text(self) -> str:
        """The prompt as plain text: what is counted, and what the completions API sends."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(content for _, content in self.messages or ())

    def chat_messages(self) -> tuple[dict[str, str], ...]:
        """The prompt as chat messages (fresh dicts, safe for the caller to change)."""
        if self.messages is None:
            return ({"role": "user", "content": self.prompt or ""},)
        return tuple({"role": role, "content": content} for role, content in self.messages)


@dataclass(frozen=True, slots=True)
class CountedPrompt:
    """A prompt with its measured input length and, when known, its own output length."""

    item: PromptItem
    input_tokens: int
    input_tokens_source: TokenSource
    max_tokens: int | None  # the item's length (explicit, or its reply's in "dataset" mode)

    def to_spec(self, index: int, api: str, max_tokens: int) -> RequestSpec:
        """The request for `api`: a prompt for completions, messages for chat."""
        is_chat = api == CHAT
        return RequestSpec(
            index=index,
            prompt=None if is_chat else self.item.text(),
            messages=self.item.chat_messages() if is_chat else None,
            max_tokens=max_tokens,
            input_tokens=self.input_tokens,
            input_tokens_source=self.input_tokens_source,
        )
