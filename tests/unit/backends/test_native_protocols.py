"""Native protocol parsers (TGI, Triton, Ollama, llama.cpp, SGLang) and the server-timing decomposition.

Each stream is fed to the backend's response sink in awkward pieces (split mid-event), as network
reads would deliver it; the recorded llama.cpp and Ollama bodies under tests/data/native are the
bytes those servers send (hand-written from their public formats).
"""

from __future__ import annotations

import orjson
import pytest

from locations import NATIVE
from tokspeed.backends.exchange import clean_ids
from tokspeed.backends.native import (
    NativeHTTPBackend,
    NativeProtocol,
    NativeState,
    native_protocol,
    workload_api,
)
from tokspeed.backends.native.backend import server_root
from tokspeed.backends.native.ndjson import NDJSONDecoder
from tokspeed.metrics.server_timing import (
    network_ms,
    server_decode_tokens_per_s,
    server_ttft_ms,
    summarize_server_timing,
)
from tokspeed.records import ErrorKind, RequestRecord, Status, TokenSource

SSE = "text/event-stream"


def feed(api: str, body: bytes, content_type: str = SSE, piece: int = 7) -> RequestRecord:
    """Run `body` through the sink in `piece`-byte reads 1 µs apart, then finish the record."""
    protocol = native_protocol(api)
    assert protocol is not None
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0)
    backend = NativeHTTPBackend("http://127.0.0.1:9", protocol)
    sink = backend.response(record, keep_text=True)
    sink.on_head(200, {"content-type": content_type, "x-request-id": "req-1"})
    now = 0
    for start in range(0, len(body), piece):
        now += 1000
        sink.on_body(body[start:start + piece], now)
        if sink.over:
            break
    if sink.end_ns is None:
        sink.end_ns = now
    clean_ids(record)  # as the attempt does for every outcome, before it settles the response
    backend.settle(sink)
    return record


def sse(*objs: object, space: bool = True, done: bool = False) -> bytes:
    prefix = b"data: " if space else b"data:"
    out = b"".join(prefix + orjson.dumps(o) + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def test_llamacpp_recorded_stream() -> None:
    r = feed("llamacpp", (NATIVE / "llamacpp_completion.sse").read_bytes())
    assert r.status is Status.OK, r.error
    assert len(r.chunk_ns) == 6 and r.first_token_ns == r.chunk_ns[0]
    assert (r.output_tokens, r.output_tokens_source) == (6, TokenSource.USAGE)
    assert (r.input_tokens, r.input_tokens_source) == (12, TokenSource.USAGE)
    assert r.finish_reason == "limit" and r.output_text == " Paris. It is the capital"
    assert r.server_timing == {"prefill_ms": 31.258, "decode_ms": 52.312, "output_tokens": 6, "prompt_tokens": 12}
    assert r.response_id == "req-1"


def test_llamacpp_server_stream_counts_the_cached_prompt_tokens() -> None:
    # was: input tokens were timings.prompt_n, the tokens the server processed, which leaves out the
    # cache_n tokens its prompt cache reused: 7 of this 19-token prompt. Recorded from llama-server
    # (llama-cpp-python 0.3.36's llama.cpp) after a request sharing the prompt's start.
    r = feed("llamacpp", (NATIVE / "llamacpp_server_cached_prompt.sse").read_bytes())
    assert r.status is Status.OK, r.error
    assert (r.input_tokens, r.input_tokens_source) == (19, TokenSource.USAGE)
    assert (r.output_tokens, r.finish_reason, len(r.chunk_ns)) == (3, "limit", 3)
    assert r.server_timing == {"prefill_ms": 0.722, "decode_ms": 0.954, "output_tokens": 3, "prompt_tokens": 19}


def test_llamacpp_prompt_length_without_tokens_evaluated_is_processed_plus_cached() -> None:
    final = {"content": "", "stop": True, "timings": {"cache_n": 12, "prompt_n": 7, "prompt_ms": 1.0,
                                                      "predicted_n": 1, "predicted_ms": 0.0}}
    r = feed("llamacpp", sse({"content": "a", "stop": False}, final))
    assert r.input_tokens == 19 and r.server_timing is not None and r.server_timing["prompt_tokens"] == 19


def test_ollama_recorded_stream_converts_nanoseconds() -> None:
    r = feed("ollama", (NATIVE / "ollama_generate.ndjson").read_bytes(), "application/x-ndjson", piece=13)
    assert r.status is Status.OK, r.error
    assert len(r.chunk_ns) == 6 and r.output_text == "The capital of France is Paris"
    assert (r.output_tokens, r.input_tokens, r.finish_reason) == (6, 31, "length")
    assert r.server_timing == pytest.approx(
        {"load_ms": 20.518042, "prefill_ms": 61.234, "decode_ms": 101.234567, "total_ms": 412.345678,
         "output_tokens": 6, "prompt_tokens": 31}, abs=1e-9)


def test_ollama_chat_and_thinking() -> None:
    lines = [{"model": "m", "message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": False},
             {"model": "m", "message": {"role": "assistant", "content": "Hi"}, "done": False},
             {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "eval_count": 2,
              "eval_duration": 5_000_000, "prompt_eval_duration": 1_000_000}]
    r = feed("ollama-chat", b"".join(orjson.dumps(x) + b"\n" for x in lines), "application/x-ndjson")
    assert r.status is Status.OK and len(r.chunk_ns) == 2 and r.reasoning_chunks == 1
    assert r.first_token_ns == r.chunk_ns[0] and r.first_content_ns == r.chunk_ns[1]
    assert r.server_timing == {"decode_ms": 5.0, "prefill_ms": 1.0, "output_tokens": 2}


def test_tgi_stream_without_space_and_special_eos() -> None:
    events = [{"index": i + 1, "token": {"id": i, "text": t, "logprob": -0.1, "special": False},
               "generated_text": None, "details": None} for i, t in enumerate(["Deep", " learning"])]
    events.append({"index": 3, "token": {"id": 2, "text": "</s>", "logprob": -0.2, "special": True},
                   "generated_text": "Deep learning",
                   "details": {"finish_reason": "eos_token", "generated_tokens": 3, "seed": None, "input_length": 7}})
    r = feed("tgi", sse(*events, space=False))
    assert r.status is Status.OK and len(r.chunk_ns) == 3
    assert (r.output_tokens, r.input_tokens, r.finish_reason) == (3, 7, "eos_token")
    assert r.output_text == "Deep learning"
    assert r.server_timing == {"output_tokens": 3, "prompt_tokens": 7}


def test_tgi_timing_headers() -> None:
    protocol = native_protocol("tgi")
    assert protocol is not None
    state = NativeState(None)
    protocol.on_headers({"x-queue-time": "12", "x-inference-time": "340", "x-total-time": "353",
                         "x-prompt-tokens": "20", "x-generated-tokens": "64"}, state)
    assert state.server == {"queue_ms": 12.0, "inference_ms": 340.0, "total_ms": 353.0, "prompt_tokens": 20,
                            "output_tokens": 64}
    assert (state.output_tokens, state.prompt_tokens) == (64, 20)


def test_sglang_cumulative_text_and_counts() -> None:
    meta = {"prompt_tokens": 5, "cached_tokens": 0, "finish_reason": None}
    events = [{"text": "A", "meta_info": {**meta, "completion_tokens": 1}},
              {"text": "A B C", "meta_info": {**meta, "completion_tokens": 3}},
              {"text": "A B C D", "meta_info": {**meta, "completion_tokens": 4,
                                                "finish_reason": {"type": "length", "length": 4}, "e2e_latency": 0.25}}]
    r = feed("sglang", sse(*events, done=True))
    assert r.status is Status.OK and r.output_text == "A B C D"
    assert r.chunk_tokens == [1, 2, 1] and r.output_tokens == 4 and r.finish_reason == "length"
    assert r.server_timing == {"output_tokens": 4, "prompt_tokens": 5, "total_ms": 250.0}


def test_triton_ends_on_close() -> None:
    events = [{"model_name": "ensemble", "model_version": "1", "text_output": t} for t in ["x", " y", " z"]]
    r = feed("triton", sse(*events))
    assert r.status is Status.OK and len(r.chunk_ns) == 3
    assert (r.output_tokens, r.output_tokens_source) == (3, TokenSource.CHUNKS)
    assert r.server_timing is None


@pytest.mark.parametrize("api,body,kind", [
    ("tgi", sse({"error": "Request failed during generation: CUDA OOM", "error_type": "generation"}, space=False),
     ErrorKind.STREAM),
    ("ollama", b'{"model":"m","response":"a","done":false}\n{"error":"an unknown error was encountered"}\n',
     ErrorKind.STREAM),
    ("llamacpp", sse({"content": "a", "stop": False}, {"content": "b", "stop": False}), ErrorKind.BROKEN),
    ("sglang", sse({"text": "a", "meta_info": {"completion_tokens": 1}}), ErrorKind.BROKEN),
    ("llamacpp", b"data: {not json}\n\n", ErrorKind.PROTOCOL),
    ("triton", b"", ErrorKind.PROTOCOL),
])
def test_failures_are_classified(api: str, body: bytes, kind: ErrorKind) -> None:
    r = feed(api, body, "application/x-ndjson" if api == "ollama" else SSE)
    assert r.status is Status.ERROR and r.error_kind is kind, r.error


def test_server_count_below_events_is_ignored() -> None:
    body = sse({"content": "a", "stop": False}, {"content": "b", "stop": False},
               {"content": "", "stop": True, "timings": {"predicted_n": 1, "prompt_ms": 1.0}})
    r = feed("llamacpp", body)
    assert r.anomalies == ["usage_below_chunks"]
    assert (r.output_tokens, r.output_tokens_source) == (2, TokenSource.CHUNKS)


def test_ndjson_decoder_joins_split_lines() -> None:
    d = NDJSONDecoder()
    assert d.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert d.feed(b':2}\n\n{"c":3}') == [b'{"b":2}']
    assert d.close() == [b'{"c":3}']


def test_bodies_and_paths() -> None:
    from tokspeed.records import RequestSpec

    spec = RequestSpec(index=0, prompt="hello", max_tokens=9)
    sampling = {"temperature": 0.5, "stop": ["\n"]}
    expected = {
        "tgi": ("/generate_stream", {"inputs": "hello", "parameters": {"details": True, "max_new_tokens": 9,
                                                                      "temperature": 0.5, "stop": ["\n"]}}),
        "triton": ("/v2/models/m/generate_stream", {"text_input": "hello", "stream": True, "max_tokens": 9,
                                                     "temperature": 0.5, "stop_words": ["\n"]}),
        "ollama": ("/api/generate", {"model": "m", "stream": True, "prompt": "hello",
                                     "options": {"num_predict": 9, "temperature": 0.5, "stop": ["\n"]}}),
        "llamacpp": ("/completion", {"prompt": "hello", "stream": True, "n_predict": 9, "temperature": 0.5,
                                     "stop": ["\n"]}),
        "sglang": ("/generate", {"text": "hello", "stream": True,
                                 "sampling_params": {"max_new_tokens": 9, "temperature": 0.5, "stop": ["\n"]}}),
    }
    for api, (path, body) in expected.items():
        protocol = native_protocol(api)
        assert isinstance(protocol, NativeProtocol)
        assert protocol.path("m", True) == path
        assert protocol.body(spec, "m", True, sampling) == body
    chat = native_protocol("ollama-chat")
    assert chat is not None and chat.body(spec, "m", True, {})["messages"] == [{"role": "user", "content": "hello"}]
    assert native_protocol("chat") is None
    assert (workload_api("ollama-chat"), workload_api("tgi"), workload_api("chat")) == ("chat", "completions", "chat")
    assert server_root("http://h:1/v1/") == "http://h:1" and server_root("http://h:1") == "http://h:1"


def _rec(ttft_ms: float, e2e_ms: float, tokens: int, timing: dict[str, float] | None) -> RequestRecord:
    ms = 1_000_000
    return RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=10 * ms,
                         first_token_ns=10 * ms + int(ttft_ms * ms), end_ns=10 * ms + int(e2e_ms * ms),
                         chunk_ns=[10 * ms + int(ttft_ms * ms)] * tokens, output_tokens=tokens, server_timing=timing)


def test_decomposition_arithmetic() -> None:
    r = _rec(100.0, 300.0, 21, {"queue_ms": 30.0, "load_ms": 5.0, "prefill_ms": 60.0, "decode_ms": 180.0,
                               "output_tokens": 21})
    assert server_ttft_ms(r) == 95.0
    assert network_ms(r) == pytest.approx(5.0)
    assert server_decode_tokens_per_s(r) == pytest.approx(20 / 0.180)  # the N − 1 steps after the first token
    other = _rec(50.0, 150.0, 11, {"prefill_ms": 42.0, "decode_ms": 90.0})  # output count from the record
    s = summarize_server_timing([r, other, _rec(10.0, 20.0, 2, None)])
    assert s is not None and s.requests == 2
    assert s.network_ms.mean == pytest.approx((5.0 + 8.0) / 2)
    assert s.queue_ms.count == 1 and s.prefill_ms.mean == pytest.approx(51.0)
    client = [20 / 0.2, 10 / 0.1]  # (N − 1) / (E2E − TTFT): the tokens after the first
    server = [20 / 0.18, 10 / 0.09]
    assert s.decode_speed_ratio == pytest.approx(sum(client) / sum(server))
    assert summarize_server_timing([_rec(10.0, 20.0, 2, None)]) is None


def test_server_timing_round_trips_through_the_file_form() -> None:
    r = _rec(1.0, 2.0, 2, {"prefill_ms": 0.5, "output_tokens": 2})
    back = RequestRecord.from_json_dict(orjson.loads(orjson.dumps(r.to_json_dict(7))), 7)
    assert back.server_timing == {"prefill_ms": 0.5, "output_tokens": 2}


def test_histogram_ttft_comparison() -> None:
    from tokspeed.metrics.server_timing import histogram_ttft

    counters = {"vllm:time_to_first_token_seconds_sum": 4.5, "vllm:time_to_first_token_seconds_count": 90.0}
    h = histogram_ttft("vllm", counters, 52.0)
    assert h is not None and h.server_mean_ms == pytest.approx(50.0) and h.difference_ms == pytest.approx(2.0)
    assert h.server_requests == 90
    assert histogram_ttft("sglang", counters, 52.0) is None  # no TTFT histogram known for it
    assert histogram_ttft("vllm", {**counters, "vllm:time_to_first_token_seconds_count": 0.0}, 52.0) is None
    assert histogram_ttft("vllm", counters, None) is None
