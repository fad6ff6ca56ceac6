"""The embedded default: a small random-weight Llama benchmarked on the local CPU, in-process.

    EmbeddedBackend(size="small", api="chat")     the Backend for targets embedded[:tiny|:small]
    export_model(path, size="small")              save it as a Hugging Face model directory
    is_embedded_target(target) -> bool            None, "embedded", "embedded:SIZE"

Modules: `sizes` (the architectures), `hardware` (dtype and thread choice),
`corpus` and `tokenizer` (the locally trained BPE, cached), `cache` (the user
cache dir), `model` (building the model), `engine` (the worker thread),
`backend`, `export`, `defaults`, `requirements` (the optional extra).
Nothing here imports torch until a model is built.
"""

from __future__ import annotations

from tokspeed.backends.embedded.backend import EmbeddedBackend, describe
from tokspeed.backends.embedded.defaults import (
    EMBEDDED_OUTPUT_TOKENS,
    EMBEDDED_REQUESTS,
    embedded_size,
    is_embedded_target,
    normalise_embedded_target,
)
from tokspeed.backends.embedded.export import export_model
from tokspeed.backends.embedded.hardware import choose_dtype, choose_threads
from tokspeed.backends.embedded.requirements import (
    EXTRA_HINT,
    missing_modules,
    require_extra,
)
from tokspeed.backends.embedded.sizes import DEFAULT_SIZE, SIZES, ModelSize, get_size

__all__ = [
    "DEFAULT_SIZE",
    "EMBEDDED_OUTPUT_TOKENS",
    "EMBEDDED_REQUESTS",
    "EXTRA_HINT",
    "SIZES",
    "EmbeddedBackend",
    "ModelSize",
    "choose_dtype",
    "choose_threads",
    "describe",
    "embedded_size",
    "export_model",
    "get_size",
    "is_embedded_target",
    "missing_modules",
    "normalise_embedded_target",
    "require_extra",
]
