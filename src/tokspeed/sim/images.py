"""How many prompt tokens the simulator charges for an image part: its 28×28-pixel patches.

A vision model's prefill grows with the image's pixel count: Qwen2-VL-style encoders cut the
image into 14-pixel patches and merge 2×2 of them into one token, i.e. one token per 28×28
pixels. The simulator reads the size from a PNG data URL's header (only the first bytes are
decoded); an image it cannot size (a remote URL, another format) counts as FALLBACK_TOKENS.
"""

from __future__ import annotations

import base64
import binascii
import math

from tokspeed.workload.images import png_size

PATCH_PIXELS = 28
FALLBACK_TOKENS = 256
_PNG_PREFIX = "data:image/png;base64,"
_HEADER_CHARS = 32  # base64 of the 24 bytes that hold the PNG signature and the IHDR size


def image_tokens(url: str) -> int:
    """Prompt tokens for one image: ceil(w/28) × ceil(h/28), or FALLBACK_TOKENS when unsized."""
    size = _png_data_url_size(url)
    if size is None:
        return FALLBACK_TOKENS
    width, height = size
    return math.ceil(width / PATCH_PIXELS) * math.ceil(height / PATCH_PIXELS)


def part_image_tokens(part: object) -> int:
    """Tokens of an `image_url` content part; 0 for any other part."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return 0
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return image_tokens(url) if isinstance(url, str) else FALLBACK_TOKENS


def _png_data_url_size(url: str) -> tuple[int, int] | None:
    if not url.startswith(_PNG_PREFIX):
        return None
    head = url[len(_PNG_PREFIX) : len(_PNG_PREFIX) + _HEADER_CHARS]
    try:
        return png_size(base64.b64decode(head))
    except (binascii.Error, ValueError):
        return None
