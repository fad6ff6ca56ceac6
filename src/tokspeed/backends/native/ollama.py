"""Ollama's native API: `POST /api/generate` and `POST /api/chat` (newline-delimited JSON).

Each line is one object: `{"model":..,"response":"<text>","done":false}` (`/api/chat`:
`"message":{"role":"assistant","content":"<text>"}`; thinking models also send `thinking`).
The last line has `"done":true`, `done_reason`, and the server's own timings in integer
nanoseconds: `total_duration`, `load_duration`, `prompt_eval_duration`, `eval_duration`, with
`prompt_eval_count` and `eval_count`. They become `load_ms` (Ollama counts the wait for a runner
here), `prefill_ms`, `decode_ms`, `total_ms`, `prompt_tokens` and `output_tokens`.
"""

from __future__ import annotations

from typing import Any

from tokspeed.backends.native.protocol import (
    NativeProtocol,
    NativeState,
    put_count,
    put_ms,
    token,
    user_text,
)
from tokspeed.records import RequestRecord, RequestSpec

NS_TO_MS = 1e-6
_DURATIONS = {
    "load_duration": "load_ms",
    "prompt_eval_duration": "prefill_ms",
    "eval_duration": "decode_ms",
    "total_duration": "total_ms",
}


class Ollama(NativeProtocol):
    name = "ollama"
    framing = "ndjson"

    def __init__(self, chat: bool = False) -> None:
        self.chat = chat
        self.name = "ollama-chat" if chat else "ollama"

    def path(self, model: str | None, stream: bool) -> str:
        return "/api/chat" if self.chat else "/api/generate"

    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if spec.max_tokens is not None:
            options["num_predict"] = spec.max_tokens
        for name in ("temperature", "top_p"):
            if sampling.get(name) is not None:
                options[name] = sampling[name]
        if sampling.get("stop"):
            options["stop"] = list(sampling["stop"])
        body: dict[str, Any] = {"model": model, "stream": stream, "options": options}
        if self.chat:
            body["messages"] = [{"role": m.get("role", "user"), "content": user_text(m)} for m in spec.as_messages()]
        else:
            body["prompt"] = spec.prompt_text()
        return body

    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        part = obj.get("message") if self.chat else obj
        if part:
            text = part.get("content") if self.chat else part.get("response")
            thinking = part.get("thinking")
            if text:
                token(record, state, now, str(text))
            elif thinking:
                token(record, state, now, "", content=False)
        if not obj.get("done"):
            return False
        self._final(obj, record, state)
        return True

    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        part = obj.get("message") if self.chat else obj
        text = (part.get("content") if self.chat else part.get("response")) if part else None
        if state.text is not None and text:
            state.text.append(str(text))
        self._final(obj, record, state)

    @staticmethod
    def _final(obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        state.done = True
        if obj.get("done_reason"):
            record.finish_reason = obj["done_reason"]
        for name, key in _DURATIONS.items():
            put_ms(state, key, obj.get(name), NS_TO_MS)
        state.output_tokens = put_count(state, "output_tokens", obj.get("eval_count"))
        state.prompt_tokens = put_count(state, "prompt_tokens", obj.get("prompt_eval_count"))

    def info_path(self, model: str | None) -> str | None:
        return "/api/tags"

    def model_from(self, info: Any) -> str | None:
        models = info.get("models") if isinstance(info, dict) else None
        if not models or not isinstance(models[0], dict):
            return None
        name = models[0].get("name") or models[0].get("model")
        return str(name) if name else None
