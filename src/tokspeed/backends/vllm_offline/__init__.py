"""`--target vllm:PATH`: vLLM's offline `LLM` benchmarked in-process (the seed's script, per request).

    VLLMBackend(path, api="chat", stream=True, options=EngineOptions(...))   the Backend
    offline_defaults(cfg, workload) -> RunConfig     all prompts of an iteration at once, one warm-up
    require_vllm()                                   ConfigError "vllm is not installed" + hint

Modules: `engine` (the worker thread and its step loop), `backend`,
`defaults`, `requirements`. vLLM is an optional dependency, imported only
once a model is loaded.
"""

from __future__ import annotations

from tokspeed.backends.vllm_offline.backend import SERVING, VLLMBackend
from tokspeed.backends.vllm_offline.defaults import describe_offline, offline_defaults
from tokspeed.backends.vllm_offline.requirements import require_vllm, vllm_installed

__all__ = ["SERVING", "VLLMBackend", "describe_offline", "offline_defaults", "require_vllm", "vllm_installed"]
