"""What the in-process engine backends (`hf:`, `vllm:`) share: prompts and records.

Prompts go through the model's own tokenizer the way OpenAI-compatible servers
(vLLM's among them) do it: a chat request is rendered with the model's chat
template and encoded without adding special tokens again; a completions prompt
is encoded with the tokenizer's special tokens (a BOS where the model has one).

Records are filled as the HTTP backend fills them, so the same metric
pipeline applies: one chunk per batch of tokens handed out together, with the
number of tokens it carried; failures are data, never exceptions.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from tokspeed.errors import ConfigError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource


def render_prompt(tokenizer: Any, spec: RequestSpec, api: str) -> list[int]:
    """Token ids of the request's prompt, with the chat template for `api == "chat"`."""
    if api == "chat":
        text = tokenizer.apply_chat_template(spec.as_messages(), tokenize=False, add_generation_prompt=True)
        return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
    return [int(t) for t in tokenizer.encode(spec.prompt_text(), add_special_tokens=True)]


def require_chat_template(tokenizer: Any, model: str, api: str) -> None:
    """ConfigError when chat requests are asked of a tokenizer that has no chat template."""
    if api == "chat" and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"the model at {model} has no chat template, so it cannot serve chat requests",
            hint="benchmark it with --api completions",
        )


def set_chunks(record: RequestRecord, chunk_ns: list[int], chunk_tokens: list[int]) -> None:
    """The token-bearing chunks of a request (content only: in-process engines do not split out reasoning)."""
    record.chunk_ns = list(chunk_ns)
    record.chunk_tokens = list(chunk_tokens[: len(chunk_ns)])
    if chunk_ns:
        record.first_token_ns = record.first_content_ns = chunk_ns[0]


def fail(record: RequestRecord, status: Status, kind: ErrorKind | None, message: str) -> None:
    """Mark a request failed (or incomplete); its end is now unless already known."""
    record.status, record.error_kind, record.error = status, kind, message
    if record.end_ns is None:
        record.end_ns = perf_counter_ns()



def refusal(prompt_tokens: int, n: int, context: int | None) -> str | None:
    """Why an in-process engine cannot serve a request (as a server would answer 400), or None."""
    if n < 1:
        return f"max_tokens must be at least 1, not {n}"
    if prompt_tokens == 0:
        return "empty prompt"
    if context is not None and prompt_tokens + n > context:
        return f"prompt ({prompt_tokens} tokens) + max_tokens ({n}) exceeds the model's context of {context} tokens"
    return None


def record_generation(record: RequestRecord, token_ns: list[int], end_ns: int | None, error: object, n: int) -> bool:
    """Copy a finished generation's token times onto the record; False (and the record failed) on an error."""
    set_chunks(record, token_ns, [1] * len(token_ns))
    record.end_ns = end_ns
    if error is not None:
        fail(record, Status.ERROR, ErrorKind.OTHER, f"generation failed: {error}")
        return False
    record.output_tokens, record.output_tokens_source = len(token_ns), TokenSource.ENGINE
    record.finish_reason = "length" if len(token_ns) >= n else "stop"
    return True


def record_cancelled(record: RequestRecord, token_ns: list[int]) -> None:
    """A generation cancelled mid-way: keep the tokens that came, mark the request incomplete."""
    times = list(token_ns)
    set_chunks(record, times, [1] * len(times))
    fail(record, Status.INCOMPLETE, None, "cancelled before completion")


def start_phases(load_s: float, warmup_s: float | None, start_s: float) -> dict[str, float | None]:
    """How an in-process target's start() divides: loading the model, the engine's own warm-up, the rest.

    `start_s` is the whole start(); `other_s` what neither phase covers (starting the worker
    thread, importing the engine, reading its facts), so load_s + warmup_s + other_s == start_s.
    run.json keeps it as target.extra.cold_start; the runner adds the first request's timings.
    """
    warm = warmup_s or 0.0
    return {
        "load_s": round(load_s, 4),
        "warmup_s": None if warmup_s is None else round(warmup_s, 4),
        "other_s": round(max(start_s - load_s - warm, 0.0), 4),
        "start_s": round(start_s, 4),
    }
