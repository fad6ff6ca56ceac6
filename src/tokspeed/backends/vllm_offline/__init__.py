"""`--target vllm:PATH`: vLLM's offline `LLM` benchmarked in-process (a `llm.generate(prompts)` script, per request).

    VLLMBackend(path, api="chat", stream=True, options=EngineOptions(...))   the Backend
    require_vllm()                                   ConfigError "vllm is not installed" + hint

With no load profile given, a vllm: target runs the offline throughput mode
(`tokspeed.runner.passes`: all prompts of an iteration at once, one warm-up).
Modules: `engine` (the worker thread and its step loop), `backend`,
`requirements`. vLLM is an optional dependency, imported only once a model is loaded.
"""

from __future__ import annotations

from tokspeed.backends.vllm_offline.backend import SERVING, VLLMBackend
from tokspeed.backends.vllm_offline.requirements import require_vllm, vllm_installed

__all__ = ["SERVING", "VLLMBackend", "require_vllm", "vllm_installed"]
