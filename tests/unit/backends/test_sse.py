"""The SSE decoder against every edge case real servers produce, split at every byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokspeed.backends.sse import SSEDecoder


def decode_all(pieces: list[bytes]) -> list[bytes]:
    d = SSEDecoder()
    out: list[bytes] = []
    for p in pieces:
        out += d.feed(p)
    return out + d.close()


def split_every(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(raw[prev:p])
        prev = p
    pieces.append(raw[prev:])
    return pieces


def test_one_event_per_read() -> None:
    assert decode_all([b"data: {\"a\":1}\n\n", b"data: [DONE]\n\n"]) == [b'{"a":1}', b"[DONE]"]


def test_several_events_in_one_read() -> None:
    raw = b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    assert decode_all([raw]) == [b"1", b"2", b"3"]


def test_event_split_across_reads_at_every_byte() -> None:
    raw = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
    for cut in range(len(raw) + 1):
        assert decode_all([raw[:cut], raw[cut:]]) == [b'{"choices":[{"delta":{"content":"hi"}}]}', b"[DONE]"]


def test_keepalive_comments_are_dropped() -> None:
    raw = b": ping\n\ndata: 1\n\n: keep-alive\ndata: 2\n\n"
    assert decode_all([raw]) == [b"1", b"2"]


def test_crlf_and_lone_cr_line_endings() -> None:
    assert decode_all([b"data: 1\r\n\r\ndata: 2\r\n\r\n"]) == [b"1", b"2"]
    assert decode_all([b"data: 1\r\rdata: 2\r\r"]) == [b"1", b"2"]


def test_crlf_split_between_cr_and_lf() -> None:
    assert decode_all([b"data: 1\r", b"\n\r", b"\ndata: 2\r\n", b"\r\n"]) == [b"1", b"2"]


def test_multiline_data_joined_with_newline() -> None:
    assert decode_all([b"data: a\ndata: b\n\n"]) == [b"a\nb"]


def test_no_space_after_colon_and_other_fields() -> None:
    assert decode_all([b"event: message\nid: 7\nretry: 10\ndata:x\n\n"]) == [b"x"]


def test_event_type_is_kept() -> None:
    d = SSEDecoder()
    assert d.feed(b"event: message\ndata: {\"a\":1}\n\n") == [b'{"a":1}']
    assert d.last_event_type == b"message"


def test_an_error_event_is_held_apart_and_stops_decoding_at_every_split() -> None:
    raw = b"data: 1\n\nevent: error\ndata: {\"message\":\"boom\"}\n\ndata: 2\n\ndata: [DONE]\n\n"
    for cut in range(len(raw) + 1):
        d = SSEDecoder()
        out = d.feed(raw[:cut])
        if d.error is None:
            out += d.feed(raw[cut:])
        assert out == [b"1"] and d.error == b'{"message":"boom"}', cut
    d = SSEDecoder()  # an error event the stream's close dispatches
    assert d.feed(b"data: 1\n\nevent: error\ndata: x") == [b"1"] and d.error is None
    assert d.close() == [] and d.error == b"x"


def test_trailing_event_without_blank_line_is_flushed_on_close() -> None:
    assert decode_all([b"data: 1\n\ndata: [DONE]"]) == [b"1", b"[DONE]"]
    assert decode_all([b"data: 1\n\ndata: [DONE]\n"]) == [b"1", b"[DONE]"]


def test_empty_lines_without_data_dispatch_nothing() -> None:
    assert decode_all([b"\n\n\n\ndata: 1\n\n\n\n"]) == [b"1"]


payload = st.binary(min_size=0, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(payload.filter(lambda b: len(b) > 0), min_size=1, max_size=8),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_split_any_newline_gives_the_same_events(
    events: list[bytes], newline: bytes, comments: bool, cuts: list[int]
) -> None:
    raw = b""
    for e in events:
        if comments:
            raw += b": keep-alive" + newline
        raw += b"data: " + e + newline + newline
    # a payload starting with a space loses exactly one leading space (the spec)
    expected = [e for e in events]
    assert decode_all(split_every(raw, cuts)) == expected


def test_a_byte_order_mark_at_the_start_is_dropped_and_blank_looking_lines_are_not_malformed() -> None:
    d = SSEDecoder()
    assert d.feed(b"\xef\xbb\xbfdata: 1\n\n") == [b"1"]
    assert d.feed(b"  \n\t\ndata: 2\n\n") == [b"2"] and d.malformed is None
    assert d.feed(b"\xef\xbb\xbfdata: 3\n\n") == [] and d.malformed is not None  # only the stream's first bytes
