"""llama.cpp server's native API: `POST /completion` (SSE).

Stream: `data: {"content":"<text>","stop":false,...}` per token; the last event has `"stop":true`,
`stop_type` (older builds: `stopped_eos`/`stopped_word`/`stopped_limit` flags), `tokens_predicted`, `tokens_evaluated` and `timings` in ms (floats): `prompt_n`,
`prompt_ms` (prompt processing up to the first token), `predicted_n`, `predicted_ms` (generation
from the first token to the last), `cache_n`. They become `prefill_ms`, `decode_ms`, `prompt_tokens` and
`output_tokens`. `prompt_n` counts only the tokens the server processed: with its prompt cache (on by
default) a prompt sharing a prefix with the slot's last one has `cache_n` tokens reused, so the prompt's
length is `tokens_evaluated` (the whole prompt), or prompt_n + cache_n. llama.cpp reports no queue time: a request waiting for a free slot shows up in
tokspeed's `network_ms`.
"""

from __future__ import annotations

import posixpath
from typing import Any

from tokspeed.backends.native.protocol import (
    NativeProtocol,
    NativeState,
    put_count,
    put_ms,
    token,
)
from tokspeed.records import RequestRecord, RequestSpec


class LlamaCpp(NativeProtocol):
    name = "llamacpp"

    def path(self, model: str | None, stream: bool) -> str:
        return "/completion"

    def body(self, spec: RequestSpec, model: str | None, stream: bool, sampling: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": spec.prompt_text(), "stream": stream}
        if spec.max_tokens is not None:
            body["n_predict"] = spec.max_tokens
        for name in ("temperature", "top_p"):
            if sampling.get(name) is not None:
                body[name] = sampling[name]
        if sampling.get("stop"):
            body["stop"] = list(sampling["stop"])
        return body

    def on_event(self, obj: dict[str, Any], now: int, record: RequestRecord, state: NativeState) -> bool:
        content = obj.get("content")
        if content:
            token(record, state, now, str(content))
        if not obj.get("stop"):
            return False
        self._final(obj, record, state)
        return True

    def on_whole(self, obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        if state.text is not None and obj.get("content"):
            state.text.append(str(obj["content"]))
        self._final(obj, record, state)

    @staticmethod
    def _final(obj: dict[str, Any], record: RequestRecord, state: NativeState) -> None:
        state.done = True
        if obj.get("stop_type"):
            record.finish_reason = obj["stop_type"]
        else:  # builds before stop_type send one flag per reason
            reason = next((r for r in ("eos", "word", "limit") if obj.get(f"stopped_{r}") is True), None)
            if reason is not None:
                record.finish_reason = reason
        timings = obj.get("timings") or {}
        put_ms(state, "prefill_ms", timings.get("prompt_ms"))
        put_ms(state, "decode_ms", timings.get("predicted_ms"))
        state.output_tokens = put_count(state, "output_tokens", timings.get("predicted_n", obj.get("tokens_predicted")))
        state.prompt_tokens = put_count(state, "prompt_tokens", _whole_prompt(obj, timings))

    def info_path(self, model: str | None) -> str | None:
        return "/props"

    def model_from(self, info: Any) -> str | None:
        if not isinstance(info, dict):
            return None
        name = info.get("model_alias") or info.get("model_path")
        if not name:
            settings = info.get("default_generation_settings")
            name = settings.get("model") if isinstance(settings, dict) else None
        return posixpath.basename(str(name)) if name else None

    def version_from(self, info: Any) -> str | None:
        return f"llama.cpp {info['build_info']}" if isinstance(info, dict) and info.get("build_info") else None


def _whole_prompt(obj: dict[str, Any], timings: dict[str, Any]) -> object:
    """The prompt's length: `tokens_evaluated`, else prompt_n + cache_n (prompt_n alone leaves out the cached part)."""
    if obj.get("tokens_evaluated") is not None:
        return obj["tokens_evaluated"]
    n, cached = timings.get("prompt_n"), timings.get("cache_n", 0)
    if isinstance(n, int) and isinstance(cached, int):
        return n + cached
    return n
