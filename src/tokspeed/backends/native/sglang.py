"""SGLang's native API: `POST /generate` (SSE, ends with `data: [DONE]`).

Body: `text`, `sampling_params` (`max_new_tokens`, ...), `stream`. Each event carries the whole
text generated so far (`text`) and `meta_info` with cumulative `completion_tokens`,
`prompt_tokens`, `finish_reason` (an object with a `type`, or null) and, at the end,
`e2e_latency` in seconds (the server's view of the whole request: `total_ms`).
A token-bearing event is one whose `completion_tokens` grew (or, without counts, whose text grew).
"""

from __future__ import annotations

from typing import Any

from tokspeed.backends.native.protocol import (
    NativeProtocol,
    NativeState,
    as_count,
    put_count,
    put_ms,
    token,
)
from tokspeed.records import RequestRecord, RequestSpec


class SGLang(NativeProtocol):
    name = "sglang"

    def path(self, model: str | None, stream: bool) -> str:
        return "/generate"

    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if spec.max_tokens is not None:
            params["max_new_tokens"] = spec.max_tokens
        for name in ("temperature", "top_p"):
            if sampling.get(name) is not None:
                params[name] = sampling[name]
        if sampling.get("stop"):
            params["stop"] = list(sampling["stop"])
        return {"text": spec.prompt_text(), "sampling_params": params, "stream": stream}

    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        text = str(obj.get("text") or "")
        meta = obj.get("meta_info") or {}
        count = as_count(meta.get("completion_tokens"))
        grew = count > (state.output_tokens or 0) if count is not None else len(text) > state.seen
        if grew:
            token(record, state, now, text[state.seen:])
            if count is not None:
                state.chunk_counts.append(count)
        state.seen = max(state.seen, len(text))
        self._meta(meta, record, state)
        return False  # the stream ends with data: [DONE]

    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        if state.text is not None and obj.get("text"):
            state.text.append(str(obj["text"]))
        self._meta(obj.get("meta_info") or {}, record, state)
        state.done = True

    @staticmethod
    def _meta(meta: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        count = put_count(state, "output_tokens", meta.get("completion_tokens"))
        if count is not None:
            state.output_tokens = count
        prompt = put_count(state, "prompt_tokens", meta.get("prompt_tokens"))
        if prompt is not None:
            state.prompt_tokens = prompt
        finish = meta.get("finish_reason")
        if finish:
            record.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
        put_ms(state, "total_ms", meta.get("e2e_latency"), 1000.0)

    def info_path(self, model: str | None) -> str | None:
        return "/get_model_info"

    def model_from(self, info: Any) -> str | None:
        return str(info["model_path"]) if isinstance(info, dict) and info.get("model_path") else None
