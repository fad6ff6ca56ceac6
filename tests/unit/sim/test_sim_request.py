"""Unit tests for parsing simulator request bodies."""

from __future__ import annotations

import orjson
import pytest

from tokspeed.sim.request import ApiName, RequestError, SimRequest, parse_request
from tokspeed.workload.tokens import approx_token_count


def _parse(api: ApiName, body: object) -> SimRequest:
    return parse_request(api, orjson.dumps(body))


def test_completions_prompt_forms() -> None:
    text = "the quick brown fox jumps"
    assert _parse("completions", {"prompt": text}).prompt_tokens == approx_token_count(text)
    assert _parse("completions", {"prompt": [text, "again"]}).prompt_tokens == approx_token_count(text) + 2
    assert _parse("completions", {"prompt": [1, 2, 3]}).prompt_tokens == 3
    assert _parse("completions", {"prompt": [[1, 2], [3]]}).prompt_tokens == 3


def test_chat_prompt_is_all_contents_joined() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is 你好"}]},
        {"role": "assistant", "content": None},
    ]
    req = parse_request("chat", orjson.dumps({"messages": messages}))
    assert req.prompt_tokens == approx_token_count("be brief\nwhat is 你好\n")


def test_stream_options_and_max_tokens() -> None:
    req = parse_request(
        "chat",
        orjson.dumps(
            {
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 9,
                "ignore_eos": True,
                "min_tokens": 9,
                "temperature": 0.0,
            }
        ),
    )
    assert (req.stream, req.has_stream_options, req.include_usage, req.max_tokens) == (True, True, True, 9)


def test_max_tokens_wins_over_max_completion_tokens() -> None:
    req = parse_request("completions", orjson.dumps({"prompt": "x", "max_tokens": 3, "max_completion_tokens": 9}))
    assert req.max_tokens == 3 and not req.stream and not req.include_usage


@pytest.mark.parametrize(
    ("api", "raw", "code"),
    [
        ("completions", b"{not json", "invalid_json"),
        ("completions", b"[1, 2]", "invalid_json"),
        ("completions", b"{}", "missing_field"),
        ("completions", b'{"prompt": 5}', "invalid_type"),
        ("completions", b'{"prompt": "x", "max_tokens": 0}', "invalid_value"),
        ("completions", b'{"prompt": "x", "max_tokens": "9"}', "invalid_type"),
        ("completions", b'{"prompt": "x", "stream": "yes"}', "invalid_type"),
        ("chat", b'{"prompt": "x"}', "missing_field"),
        ("chat", b'{"messages": []}', "invalid_type"),
        ("chat", b'{"messages": ["hi"]}', "invalid_type"),
        ("chat", b'{"messages": [{"role": "user", "content": "x"}], "stream_options": 1}', "invalid_type"),
    ],
)
def test_bad_bodies_are_rejected(api: ApiName, raw: bytes, code: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(api, raw)
    assert info.value.code == code
