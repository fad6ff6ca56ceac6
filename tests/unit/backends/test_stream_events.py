"""How the OpenAI backend turns stream events into a record (exact integer times)."""

from __future__ import annotations

import orjson

from tokspeed.backends.openai_http import _on_event, _StreamState
from tokspeed.records import ErrorKind, RequestRecord, Status


def rec() -> RequestRecord:
    return RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=100)


def chat(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def feed(events: list[tuple[int, bytes]]) -> tuple[RequestRecord, _StreamState]:
    r, s = rec(), _StreamState(keep_text=True)
    for t, data in events:
        if _on_event(data, t, r, s):
            break
    return r, s


def test_role_only_and_empty_chunks_do_not_start_ttft() -> None:
    r, _ = feed([
        (150, chat({"role": "assistant", "content": ""})),
        (160, chat({"content": ""})),
        (170, chat({})),
        (200, chat({"content": "Hi"})),
    ])
    assert r.first_token_ns == 200
    assert r.first_content_ns == 200
    assert r.chunk_ns == [200]


def test_reasoning_starts_ttft_but_not_time_to_first_answer() -> None:
    r, s = feed([
        (150, chat({"role": "assistant"})),
        (200, chat({"reasoning_content": "think"})),
        (300, chat({"reasoning": "more"})),
        (400, chat({"content": "answer"})),
    ])
    assert r.first_token_ns == 200
    assert r.first_content_ns == 400
    assert r.chunk_ns == [200, 300, 400]
    assert r.reasoning_chunks == 2
    assert s.text == ["answer"]


def test_usage_only_trailer_is_not_a_token_but_gives_counts() -> None:
    r, s = feed([
        (200, chat({"content": "a"})),
        (300, chat({"content": "b"}, finish="length")),
        (310, orjson.dumps({"id": "c1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})),
        (320, b"[DONE]"),
    ])
    assert r.chunk_ns == [200, 300]
    assert (s.usage_prompt, s.usage_completion) == (7, 2)
    assert s.done and r.finish_reason == "length" and r.response_id == "c1"


def test_completions_text_chunks() -> None:
    r, _ = feed([(200, orjson.dumps({"choices": [{"text": " x"}]})), (250, orjson.dumps({"choices": [{"text": ""}]}))])
    assert r.chunk_ns == [200]


def test_error_object_mid_stream_fails_the_request() -> None:
    r, _ = feed([
        (200, chat({"content": "a"})),
        (300, orjson.dumps({"error": {"message": "engine died", "type": "InternalServerError"}})),
        (400, chat({"content": "never"})),
    ])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.STREAM
    assert r.error == "engine died" and r.end_ns == 300 and r.chunk_ns == [200]


def test_vllm_style_error_object() -> None:
    r, _ = feed([(200, orjson.dumps({"object": "error", "message": "bad", "code": 400}))])
    assert r.status is Status.ERROR and r.error == "bad"


def test_bad_json_is_a_protocol_error() -> None:
    r, _ = feed([(200, b"{not json")])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.PROTOCOL


def test_continuous_usage_gives_per_chunk_token_counts() -> None:
    r, s = feed([
        (200, chat({"content": "ab"}, usage={"completion_tokens": 2})),
        (300, chat({"content": "cde"}, usage={"completion_tokens": 5})),
    ])
    assert s.chunk_usage == [2, 5]


def test_probe_never_asks_for_fewer_tokens_than_min_tokens() -> None:
    from tokspeed.backends.openai_http import OpenAIHTTPBackend

    plain = OpenAIHTTPBackend("http://127.0.0.1:9/v1", model="m")
    assert plain.probe_body()["max_tokens"] == 1
    floor = OpenAIHTTPBackend("http://127.0.0.1:9/v1", model="m", extra_body={"min_tokens": 24, "ignore_eos": True})
    body = floor.probe_body()
    assert body["max_tokens"] == 24 and body["min_tokens"] == 24 and body["ignore_eos"] is True
