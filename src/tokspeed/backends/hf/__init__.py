"""`--target hf:PATH`: a local transformers causal LM benchmarked in-process.

    HFBackend(path, api="chat", options=EngineOptions(...))   the Backend

Modules: `loading` (device and dtype choice, loading), `backend`. The worker
thread is the embedded model's (`tokspeed.backends.embedded.engine`).
Nothing here imports torch until a model is loaded.
"""

from __future__ import annotations

from tokspeed.backends.hf.backend import EXTRA_BODY_FIELDS, SERVING, HFBackend

__all__ = ["EXTRA_BODY_FIELDS", "SERVING", "HFBackend"]
