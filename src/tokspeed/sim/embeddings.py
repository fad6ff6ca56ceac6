"""The simulator's `/v1/embeddings`: parse the inputs, and build the answer's body.

An embeddings request costs what a prefill does: the simulator answers after
`ttft_ms + prompt_tokens × per_prompt_token_us` (after any queue wait for a slot), with one
deterministic unit-ish vector of EMBEDDING_DIM floats per input and `usage.prompt_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tokspeed.sim.request import RequestError
from tokspeed.workload.tokens import approx_token_count

EMBEDDING_DIM = 384


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    inputs: int  # how many vectors are asked for
    prompt_tokens: int
    model: object = None


def parse_embeddings(raw: bytes) -> EmbeddingsRequest:
    """Validate a `/v1/embeddings` body (`input`: a string, strings, token ids or lists of them)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}", "invalid_json") from exc
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object", "invalid_json")
    value = body.get("input")
    if value is None:
        raise RequestError("missing required field: input", "missing_field", "input")
    inputs, tokens = _count(value)
    return EmbeddingsRequest(inputs=inputs, prompt_tokens=tokens, model=body.get("model"))


def _count(value: Any) -> tuple[int, int]:
    if isinstance(value, str) and value:
        return 1, approx_token_count(value)
    if isinstance(value, list) and value:
        if all(isinstance(v, str) and v for v in value):
            return len(value), sum(approx_token_count(v) for v in value)
        if all(_is_id(t) for t in value):
            return 1, len(value)
        if all(isinstance(v, list) and v and all(_is_id(t) for t in v) for v in value):
            return len(value), sum(len(v) for v in value)
    raise RequestError("input must be a non-empty string, list of strings or token ids", "invalid_type", "input")


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def embeddings_body(response_id: str, model: str, req: EmbeddingsRequest) -> bytes:
    """The answer: `id` (as vLLM gives one), one vector per input, and usage."""
    vector = [round(((k * 37) % 101) / 101 - 0.5, 6) for k in range(EMBEDDING_DIM)]
    return orjson.dumps(
        {
            "id": response_id,
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": vector} for i in range(req.inputs)],
            "model": model,
            "usage": {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens},
        }
    )
