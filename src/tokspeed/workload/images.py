"""Synthetic images for vision requests: PNGs generated locally, attached as OpenAI `image_url` parts.

    ImageSpec.parse("512x512") -> ImageSpec(512, 512)
    synthetic_png(width, height, seed) -> bytes          deterministic noise, a valid RGB PNG
    ImagePool(count_per_request, spec, seed).urls(i)      the data URLs request i carries
    with_images(workload, per_request, spec, seed)        a workload whose chat requests carry them

Noise, not a flat colour: a flat image compresses to a few hundred bytes, which would make the
upload unrealistically cheap, while noise is as large as a photo at that size (~1.3 bytes a pixel
as base64). A vision server's cost depends on the pixel count (its patches), not on the content.
A small pool of distinct images is cycled, so consecutive requests do not send byte-identical
images (which a server may cache by hash), and memory stays bounded at any request count.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tokspeed.errors import ConfigError
from tokspeed.records import RequestSpec

POOL_SIZE = 16  # distinct images cycled over the requests
MAX_SIDE = 8192
_SIZE_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """The pixel size of each synthetic image."""

    width: int
    height: int

    @classmethod
    def parse(cls, text: str) -> ImageSpec:
        """`WIDTHxHEIGHT`, e.g. `512x512`; ConfigError otherwise."""
        m = _SIZE_RE.match(text)
        if m is None:
            raise ConfigError(f"image size {text!r} is not WIDTHxHEIGHT", hint="e.g. --image-size 512x512")
        width, height = int(m.group(1)), int(m.group(2))
        if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
            raise ConfigError(f"image size {text!r}: each side must be 1..{MAX_SIDE} pixels")
        return cls(width, height)

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


def synthetic_png(width: int, height: int, seed: int) -> bytes:
    """A `width`×`height` RGB PNG of seeded noise (8-bit, no interlace)."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width * 3), dtype=np.uint8)
    rows = np.hstack([np.zeros((height, 1), dtype=np.uint8), pixels])  # filter byte 0 before each row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (_PNG_SIGNATURE, _chunk(b"IHDR", header), _chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)), _chunk(b"IEND", b""))
    )


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR, or None when `data` is not a PNG."""
    if len(data) < 24 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


class ImagePool:
    """The data URLs each request carries: `per_request` images drawn in turn from POOL_SIZE distinct ones."""

    def __init__(self, per_request: int, spec: ImageSpec, seed: int = 0) -> None:
        if per_request < 1:
            raise ConfigError(f"images per request must be at least 1, got {per_request}")
        self.per_request = per_request
        self.spec = spec
        distinct = min(POOL_SIZE, per_request * 4)
        self._urls = tuple(data_url(synthetic_png(spec.width, spec.height, seed * 7919 + k)) for k in range(distinct))

    def urls(self, index: int) -> tuple[str, ...]:
        start = index * self.per_request
        n = len(self._urls)
        return tuple(self._urls[(start + k) % n] for k in range(self.per_request))

    @property
    def bytes_per_request(self) -> int:
        return sum(len(u) for u in self._urls[: self.per_request])


class SpecWorkload(Protocol):
    def request(self, index: int) -> RequestSpec: ...

    def describe(self) -> dict[str, object]: ...


class ImageWorkload:
    """A workload whose every request also carries images (chat API only)."""

    def __init__(self, inner: SpecWorkload, pool: ImagePool) -> None:
        self._inner = inner
        self._pool = pool

    def request(self, index: int) -> RequestSpec:
        return dataclasses.replace(self._inner.request(index), images=self._pool.urls(index))

    def describe(self) -> dict[str, object]:
        described = dict(self._inner.describe())
        described["images"] = {
            "per_request": self._pool.per_request,
            "size": str(self._pool.spec),
            "format": "png",
            "bytes_per_request": self._pool.bytes_per_request,
        }
        return described


def with_images(workload: SpecWorkload, per_request: int, size: str, api: str, seed: int = 0) -> SpecWorkload:
    """`workload` unchanged when `per_request` is 0; else one whose chat requests carry that many images."""
    if per_request <= 0:
        return workload
    if api != "chat":
        raise ConfigError("images need the chat API", hint="drop --api completions (images go in chat messages)")
    return ImageWorkload(workload, ImagePool(per_request, ImageSpec.parse(size), seed))
