"""How a streamed body's end is judged, and that no server event, however odd, escapes as an exception."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tokspeed.backends.exchange import clean_ids
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.records import Anomaly, ErrorKind, RequestRecord, Status, TokenSource


def chunk(content: str, finish: str | None = None, **extra: Any) -> bytes:
    obj = {"id": "c1", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}], **extra}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


USAGE_2 = b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


def outcome(reads: list[bytes], headers: dict[str, str] | None = None) -> RequestRecord:
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=1)
    backend = OpenAIHTTPBackend("http://127.0.0.1:9/v1")
    response = backend.response(record, keep_text=True)
    response.on_head(200, headers or {"content-type": "text/event-stream"})
    now = 1
    for read in reads:  # as the connection delivers them, one call per network read
        now += 1000
        if not response.over:
            response.on_body(read, now)
    if response.end_ns is None:  # the body ended without the stream saying so
        response.end_ns = now
    clean_ids(record)  # as the attempt does for every outcome, before it settles the response
    backend.settle(response)
    return record


def test_done_after_usage_is_ok() -> None:
    r = outcome([chunk("a"), chunk("b", "length"), USAGE_2, DONE])
    assert r.status is Status.OK and r.anomalies is None
    assert (r.output_tokens, r.output_tokens_source, r.input_tokens) == (2, TokenSource.USAGE, 3)


def test_clean_end_after_finish_reason_without_done_is_ok_with_an_anomaly() -> None:
    r = outcome([chunk("a"), chunk("b", "stop"), USAGE_2])
    assert r.status is Status.OK and r.anomalies == [Anomaly.MISSING_DONE.value]


def test_end_before_finish_reason_is_a_broken_stream_that_keeps_its_chunks() -> None:
    r = outcome([chunk("a"), chunk("b")])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.BROKEN
    assert len(r.chunk_ns) == 2 and r.end_ns is not None


def test_empty_stream_is_a_protocol_error() -> None:
    r = outcome([])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.PROTOCOL


def test_malformed_sse_line_is_a_protocol_error_even_when_done_arrives() -> None:
    r = outcome([chunk("a"), b"not an sse field\n\n", chunk("b", "length"), DONE])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.PROTOCOL
    assert r.error is not None and "malformed SSE line" in r.error and len(r.chunk_ns) == 2


def test_id_and_retry_fields_are_not_malformed() -> None:
    r = outcome([b"id: 1\nretry: 10\n" + chunk("a", "length"), DONE])
    assert r.status is Status.OK


def test_usage_below_the_chunk_count_is_ignored() -> None:
    usage_1 = b'data: {"choices":[],"usage":{"completion_tokens":1}}\n\n'
    r = outcome([chunk("a"), chunk("b", "length"), usage_1, DONE])
    assert r.status is Status.OK and r.anomalies == [Anomaly.USAGE_BELOW_CHUNKS.value]
    assert (r.output_tokens, r.output_tokens_source) == (2, TokenSource.CHUNKS)


def test_wrongly_typed_usage_and_ids_are_dropped() -> None:
    odd = b'data: {"id":{"x":1},"choices":[],"usage":{"completion_tokens":"7","prompt_tokens":true}}\n\n'
    r = outcome([chunk("a", "length"), odd, DONE])
    assert r.status is Status.OK and r.output_tokens_source is TokenSource.CHUNKS
    assert r.response_id == "c1" and r.input_tokens is None


def test_event_of_the_wrong_shape_is_a_protocol_error() -> None:
    r = outcome([chunk("a"), b'data: {"choices":"abc"}\n\n', DONE])
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.PROTOCOL and len(r.chunk_ns) == 1


# --- property: arbitrary events never raise ------------------------------------------

KEYS = ["choices", "usage", "error", "id", "object", "delta", "text", "content", "reasoning_content",
        "finish_reason", "message", "completion_tokens", "prompt_tokens", "index"]
scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=4),
    max_leaves=16,
)
events = st.one_of(
    json_values.map(lambda v: b"data: " + orjson.dumps(v) + b"\n\n"),
    st.binary(max_size=60),
    st.just(DONE),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=8))
def test_any_sequence_of_events_ends_as_a_well_formed_record(reads: list[bytes]) -> None:
    r = outcome(reads)
    assert r.status in (Status.OK, Status.ERROR)
    assert (r.status is Status.ERROR) == (r.error_kind is not None)
    assert r.output_tokens is None or (isinstance(r.output_tokens, int) and r.output_tokens >= 0)
    assert r.input_tokens is None or isinstance(r.input_tokens, int)
    assert r.response_id is None or isinstance(r.response_id, str)
    assert r.finish_reason is None or isinstance(r.finish_reason, str)
    assert r.output_text is None or isinstance(r.output_text, str)
    assert r.chunk_tokens is None or all(isinstance(k, int) for k in r.chunk_tokens)
    orjson.dumps(r.to_json_dict(0))  # saveable


def test_done_without_any_finish_reason_is_ok_but_flagged_as_possibly_cut_short() -> None:
    r = outcome([chunk("a"), chunk("b"), DONE])
    assert r.status is Status.OK and r.anomalies == [Anomaly.MISSING_FINISH_REASON.value]
    assert outcome([chunk("a"), chunk("b", "length"), DONE]).anomalies is None


def test_what_the_sse_standard_tolerates_is_read_as_a_clean_stream() -> None:
    """A byte order mark, lines of only spaces, an empty `data:` and `[DONE] ` with a trailing space."""
    r = outcome([b"\xef\xbb\xbf" + chunk("a"), b"   \n\t\n", b"data:\n\n", b"data: \n\n", chunk("b", "length"),
                 USAGE_2, b"data: [DONE] \n\n"])
    assert r.status is Status.OK and r.anomalies is None, (r.error, r.anomalies)
    assert len(r.chunk_ns) == 2 and r.output_tokens == 2


def test_a_compressed_body_is_a_protocol_error_that_names_its_encoding() -> None:
    import gzip

    body = gzip.compress(chunk("a", "length") + DONE)
    r = outcome([body], {"content-type": "text/event-stream", "content-encoding": "gzip"})
    assert r.status is Status.ERROR and r.error_kind is ErrorKind.PROTOCOL
    assert r.error is not None and "gzip-compressed" in r.error and "Accept-Encoding: identity" in r.error
