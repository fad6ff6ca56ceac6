"""Synthetic images, image token accounting in the simulator, and embeddings request parsing."""

from __future__ import annotations

import base64
import struct
import zlib

import orjson
import pytest

from tokspeed.errors import ConfigError
from tokspeed.records import RequestSpec
from tokspeed.sim.embeddings import (
    EMBEDDING_DIM,
    EmbeddingsRequest,
    embeddings_body,
    parse_embeddings,
)
from tokspeed.sim.images import FALLBACK_TOKENS, image_tokens, part_image_tokens
from tokspeed.sim.request import RequestError, parse_request
from tokspeed.workload.images import (
    ImagePool,
    ImageSpec,
    png_size,
    synthetic_png,
    with_images,
)


def _decode_png(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines, checking every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, payload = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + payload) & 0xFFFFFFFF
        if kind == b"IHDR":
            size = struct.unpack(">II", payload[:8])
        elif kind == b"IDAT":
            idat += payload
        pos += 12 + length
    assert size is not None
    return size[0], size[1], zlib.decompress(idat)


def test_synthetic_png_is_valid_deterministic_noise() -> None:
    png = synthetic_png(33, 17, seed=5)
    width, height, raw = _decode_png(png)
    assert (width, height) == (33, 17) and png_size(png) == (33, 17)
    assert len(raw) == 17 * (1 + 33 * 3)  # one filter byte + RGB per row
    assert synthetic_png(33, 17, seed=5) == png and synthetic_png(33, 17, seed=6) != png
    assert len(set(raw)) > 200  # noise, so it does not compress to nothing
    assert png_size(b"GIF89a" + b"\0" * 30) is None


@pytest.mark.parametrize("text,expected", [("512x512", (512, 512)), (" 640 X 480 ", (640, 480)), ("1×2", (1, 2))])
def test_image_size_parses(text: str, expected: tuple[int, int]) -> None:
    spec = ImageSpec.parse(text)
    assert (spec.width, spec.height) == expected


@pytest.mark.parametrize("text", ["512", "0x10", "10x99999", "axb", ""])
def test_bad_image_size_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        ImageSpec.parse(text)


def test_pool_cycles_distinct_images_per_request() -> None:
    pool = ImagePool(2, ImageSpec(8, 8), seed=1)
    first, second = pool.urls(0), pool.urls(1)
    assert len(first) == 2 and first[0] != first[1]
    assert set(first).isdisjoint(second)  # consecutive requests do not repeat an image
    assert pool.urls(4) == first  # 8 distinct images, 2 a request: the pool repeats every 4 requests
    assert all(u.startswith("data:image/png;base64,") for u in first)


def test_spec_with_images_sends_text_then_image_parts() -> None:
    spec = RequestSpec(index=0, messages=({"role": "system", "content": "be brief"}, {"role": "user", "content": "what?"}),
                       images=("data:image/png;base64,AAA", "data:image/png;base64,BBB"))
    messages = spec.as_messages()
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBB"}},
        ],
    }
    assert spec.prompt_text() == "be brief\nwhat?"  # images are not text
    assert RequestSpec(index=0, prompt="hi").as_messages() == [{"role": "user", "content": "hi"}]


class _Prompts:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"p{index}", max_tokens=4)

    def describe(self) -> dict[str, object]:
        return {"name": "t"}


def test_with_images_wraps_chat_workloads_only() -> None:
    plain = _Prompts()
    assert with_images(plain, 0, "8x8", "chat") is plain
    wrapped = with_images(plain, 1, "8x8", "chat")
    spec = wrapped.request(3)
    assert spec.prompt == "p3" and spec.max_tokens == 4 and spec.images is not None and len(spec.images) == 1
    described = wrapped.describe()
    assert described["name"] == "t"
    assert described["images"] == {"per_request": 1, "size": "8x8", "format": "png",
                                   "bytes_per_request": len(spec.images[0])}
    with pytest.raises(ConfigError, match="chat API"):
        with_images(plain, 1, "8x8", "completions")


@pytest.mark.parametrize("size,tokens", [((28, 28), 1), ((29, 28), 2), ((512, 512), 19 * 19), ((640, 480), 23 * 18)])
def test_sim_charges_one_token_per_28_pixel_patch(size: tuple[int, int], tokens: int) -> None:
    url = "data:image/png;base64," + base64.b64encode(synthetic_png(*size, seed=0)).decode()
    assert image_tokens(url) == tokens
    assert part_image_tokens({"type": "image_url", "image_url": {"url": url}}) == tokens
    assert part_image_tokens({"type": "text", "text": "x"}) == 0


def test_sim_counts_unsized_images_at_the_fallback() -> None:
    assert image_tokens("https://example.com/cat.jpg") == FALLBACK_TOKENS
    assert image_tokens("data:image/png;base64,!!!notbase64") == FALLBACK_TOKENS


def test_sim_request_adds_image_tokens_to_the_prompt() -> None:
    url = "data:image/png;base64," + base64.b64encode(synthetic_png(56, 56, seed=0)).decode()
    text_only = parse_request("chat", orjson.dumps({"messages": [{"role": "user", "content": "hello there"}]}))
    spec = RequestSpec(index=0, prompt="hello there", images=(url, url))
    with_two = parse_request("chat", orjson.dumps({"messages": spec.as_messages()}))
    assert with_two.prompt_tokens == text_only.prompt_tokens + 2 * 4


@pytest.mark.parametrize(
    "body,inputs,tokens",
    [({"input": "abcd efgh"}, 1, None), ({"input": ["a", "b c"]}, 2, None), ({"input": [1, 2, 3]}, 1, 3),
     ({"input": [[1, 2], [3]]}, 2, 3)],
)
def test_embeddings_inputs_are_counted(body: dict, inputs: int, tokens: int | None) -> None:
    req = parse_embeddings(orjson.dumps(body))
    assert req.inputs == inputs
    if tokens is not None:
        assert req.prompt_tokens == tokens
    assert req.prompt_tokens >= 1


@pytest.mark.parametrize("raw", [b"not json", b"[]", b"{}", b'{"input": ""}', b'{"input": []}', b'{"input": [true]}'])
def test_bad_embeddings_requests_are_refused(raw: bytes) -> None:
    with pytest.raises(RequestError):
        parse_embeddings(raw)


def test_embeddings_body_has_one_vector_per_input_and_usage() -> None:
    body = orjson.loads(embeddings_body("emb-1", "m", EmbeddingsRequest(inputs=3, prompt_tokens=17)))
    assert body["id"] == "emb-1" and body["object"] == "list" and body["model"] == "m"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(len(d["embedding"]) == EMBEDDING_DIM for d in body["data"])
    assert body["usage"] == {"prompt_tokens": 17, "total_tokens": 17}


def test_embeddings_backend_body_and_answers() -> None:
    from tokspeed.backends import openai_http as oh
    from tokspeed.records import RequestRecord, Status

    backend = oh.OpenAIHTTPBackend("http://127.0.0.1:9/v1", api="embeddings", stream=False, model="m",
                                   extra_body={"encoding_format": "float"})
    assert backend._url == "http://127.0.0.1:9/v1/embeddings"
    assert backend._body(RequestSpec(index=0, prompt="hello", max_tokens=9)) == {
        "model": "m", "input": "hello", "encoding_format": "float"}  # no max_tokens, no stream

    def answer(body: bytes) -> tuple[RequestRecord, oh._StreamState]:
        record, state = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0), oh._StreamState(False)
        oh._take_body(body, record, state)
        return record, state

    record, state = answer(orjson.dumps({"id": "e1", "object": "list", "data": [{"embedding": [0.1]}],
                                         "usage": {"prompt_tokens": 5}}))
    assert record.status is Status.OK and record.response_id == "e1"
    assert (state.usage_prompt, state.usage_completion) == (5, 0)
    record, _ = answer(orjson.dumps({"object": "list", "data": []}))
    assert record.status is Status.ERROR and record.error_kind is not None and record.error_kind.value == "protocol"
