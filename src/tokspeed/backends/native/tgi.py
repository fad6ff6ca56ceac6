"""Hugging Face TGI's native API: `POST /generate_stream` (SSE) and `POST /generate`.

Stream: one `data:{"index":..,"token":{"id":..,"text":..,"special":..},"generated_text":null,"details":null}`
event per generated token; the last one carries `generated_text` and `details`
(`finish_reason`, `generated_tokens`, `input_length` in recent versions). No `[DONE]`.
Server timings: TGI sets `x-queue-time`, `x-inference-time`, `x-total-time` (ms), `x-prompt-tokens`
and `x-generated-tokens` headers on `/generate` answers; they are taken whenever present.
"""

from __future__ import annotations

from typing import Any

from tokspeed.backends.native.protocol import (
    NativeProtocol,
    NativeState,
    put_count,
    put_ms,
    token,
)
from tokspeed.records import RequestRecord, RequestSpec

_HEADER_MS = {"x-queue-time": "queue_ms", "x-inference-time": "inference_ms", "x-total-time": "total_ms"}
_HEADER_COUNTS = {"x-prompt-tokens": "prompt_tokens", "x-generated-tokens": "output_tokens"}


class TGI(NativeProtocol):
    name = "tgi"

    def path(self, model: str | None, stream: bool) -> str:
        return "/generate_stream" if stream else "/generate"

    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {"details": True}
        if spec.max_tokens is not None:
            params["max_new_tokens"] = spec.max_tokens
        temperature = sampling.get("temperature")
        if temperature:  # TGI refuses 0: greedy is its default
            params["temperature"] = temperature
        top_p = sampling.get("top_p")
        if top_p is not None and 0 < top_p < 1:
            params["top_p"] = top_p
        if sampling.get("stop"):
            params["stop"] = list(sampling["stop"])
        return {"inputs": spec.prompt_text(), "parameters": params}

    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        tok = obj.get("token")
        if tok is not None:
            token(record, state, now, "" if tok.get("special") else str(tok.get("text") or ""))
        details = obj.get("details")
        if details is None and obj.get("generated_text") is None:
            return False
        if details:
            self._details(details, record, state)
        state.done = True
        return True

    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        if state.text is not None and obj.get("generated_text"):
            state.text.append(str(obj["generated_text"]))
        if obj.get("details"):
            self._details(obj["details"], record, state)
        state.done = True

    def on_headers(self, headers: dict[str, str], state: NativeState) -> None:
        for name, key in _HEADER_MS.items():
            if name in headers:
                put_ms(state, key, _number(headers[name]))
        for name, key in _HEADER_COUNTS.items():
            if name in headers:
                n = put_count(state, key, _number(headers[name]))
                if key == "output_tokens" and n is not None:
                    state.output_tokens = n
                elif n is not None:
                    state.prompt_tokens = n

    @staticmethod
    def _details(details: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        if details.get("finish_reason"):
            record.finish_reason = details["finish_reason"]
        n = put_count(state, "output_tokens", details.get("generated_tokens"))
        if n is not None:
            state.output_tokens = n
        p = put_count(state, "prompt_tokens", details.get("input_length"))
        if p is not None:
            state.prompt_tokens = p

    def error_text(self, obj: dict[str, Any]) -> str | None:
        err = obj.get("error")
        return None if err is None else str(err)

    def info_path(self, model: str | None) -> str | None:
        return "/info"

    def model_from(self, info: Any) -> str | None:
        return str(info["model_id"]) if isinstance(info, dict) and info.get("model_id") else None

    def version_from(self, info: Any) -> str | None:
        return f"tgi {info['version']}" if isinstance(info, dict) and info.get("version") else None


def _number(text: str) -> float | int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value
