"""Triton Inference Server's generate extension (TensorRT-LLM): `POST /v2/models/{model}/generate_stream`.

Body: `text_input`, `max_tokens`, `stream` (the TensorRT-LLM ensemble's inputs). Stream: one
`data: {"model_name":..,"model_version":..,"text_output":"<new text>"}` event per step; the stream
has no end marker, so a clean end of the body after tokens ends it. Triton reports no per-request
timings in the stream; its counts are not sent either (output tokens are counted another way).
"""

from __future__ import annotations

from typing import Any

from tokspeed.backends.native.protocol import NativeProtocol, NativeState, token
from tokspeed.records import RequestRecord, RequestSpec

DEFAULT_MODEL = "ensemble"  # the name TensorRT-LLM's model repositories give the end-to-end model


class Triton(NativeProtocol):
    name = "triton"
    ends_on_close = True
    verifies_model = True

    def path(self, model: str | None, stream: bool) -> str:
        return f"/v2/models/{model}/{'generate_stream' if stream else 'generate'}"

    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"text_input": spec.prompt_text(), "stream": stream}
        if spec.max_tokens is not None:
            body["max_tokens"] = spec.max_tokens
        for name in ("temperature", "top_p"):
            if sampling.get(name) is not None:
                body[name] = sampling[name]
        if sampling.get("stop"):
            body["stop_words"] = list(sampling["stop"])
        return body

    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        text = obj.get("text_output")
        if text:
            token(record, state, now, str(text))
        return False

    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        if state.text is not None and obj.get("text_output"):
            state.text.append(str(obj["text_output"]))
        state.done = True

    def info_path(self, model: str | None) -> str | None:
        return f"/v2/models/{model or DEFAULT_MODEL}"

    def model_from(self, info: Any) -> str | None:
        return str(info["name"]) if isinstance(info, dict) and info.get("name") else None
