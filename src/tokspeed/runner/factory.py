"""Build a run's collaborators from a validated config: its workload and its backend (the backend factory).

`build_backend(cfg, workload)` picks the backend a target names: an OpenAI-compatible or native-protocol
HTTP server (`http_backend`, pooled over client processes with `--workers N`), the embedded model, or an
in-process engine (`hf:PATH`, `vllm:PATH`). The CLI and `tokspeed.api` both build runs here.
"""

from __future__ import annotations

import math

from tokspeed.backends.base import Backend
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.backends.native import NativeHTTPBackend, native_protocol, workload_api
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.config import SAMPLE_OUTPUTS, Api, RunConfig
from tokspeed.errors import ConfigError
from tokspeed.runner.workers import WORKER_COMMAND, WorkerChoice, choose_workers, worker_settings
from tokspeed.workload import load_workload
from tokspeed.workload.images import SpecWorkload, with_images
from tokspeed.workload.mix import CancelChooser, ModelChooser, ModelShare, with_choices
from tokspeed.workload.tokens import load_counter

KEEP_ALL_TEXTS = 1 << 62  # keep_text_for that covers every request index (--token-audit)


def build_workload(cfg: RunConfig) -> SpecWorkload:
    """The run's prompts, each request with its model (a model mix) and its client-side abort (--cancel-share)."""
    return with_choices(_prompts(cfg), model_chooser(cfg), cancel_chooser(cfg))


def model_chooser(cfg: RunConfig) -> ModelChooser | None:
    """Which model each request asks for, when the config mixes several (None: the one model, as ever)."""
    if not cfg.model_mix or cfg.models is None:
        return None
    return ModelChooser(tuple(ModelShare(m.name, m.weight) for m in cfg.models), cfg.model_policy, cfg.seed)


def cancel_chooser(cfg: RunConfig) -> CancelChooser | None:
    """Which requests the client aborts, and when (--cancel-share, --cancel-after); None when none."""
    if cfg.cancel_share is None or cfg.cancel_after_s is None:
        return None
    return CancelChooser(cfg.cancel_share, round(cfg.cancel_after_s * 1e9), cfg.seed)


def _prompts(cfg: RunConfig) -> SpecWorkload:
    """The run's prompts; embeddings send the prompt text as `input`, chat may attach images."""
    if cfg.scheduled in ("trace", "classes"):  # a trace's lengths, or each class's own workload
        from tokspeed.runner.scheduled import scheduled_workload

        return scheduled_workload(cfg, _prompts)  # type: ignore[no-any-return]
    embeddings = cfg.api is Api.EMBEDDINGS
    workload = load_workload(
        cfg.dataset,
        api=Api.COMPLETIONS.value if embeddings else workload_api(cfg.api.value),
        input_tokens=cfg.input_tokens,
        output_tokens=cfg.output_tokens,
        tokenizer=cfg.tokenizer,
        seed=cfg.seed,
    )
    from tokspeed.runner.conversations import shape_workload

    # shared prefixes and multi-turn conversations, when the config asks for them
    return shape_workload(with_images(workload, cfg.images, cfg.image_size, cfg.api.value, cfg.seed), cfg)  # type: ignore[no-any-return]


def build_backend(cfg: RunConfig, workload: SpecWorkload, engine: EngineOptions | None = None) -> Backend:
    from tokspeed.backends.embedded.defaults import is_embedded_target
    from tokspeed.backends.local_target import engine_kind

    kind = engine_kind(cfg.target)
    (engine or EngineOptions()).check(kind)  # an engine flag given to a target that does not take it
    workers = choose_workers(cfg)  # ConfigError for --workers N with an in-process engine
    if (kind is not None or is_embedded_target(cfg.target)) and (cfg.images or cfg.api is Api.EMBEDDINGS):
        what = "--images" if cfg.images else "--api embeddings"
        raise ConfigError(f"{what} needs an HTTP target", hint="give --target http://HOST:PORT/v1 of a server that takes it")
    if (kind is not None or is_embedded_target(cfg.target)) and (cfg.model_mix or cfg.cancel_share is not None):
        what = "a model mix (--model a,b)" if cfg.model_mix else "--cancel-share"
        raise ConfigError(f"{what} needs an HTTP target", hint="give --target http://HOST:PORT/v1 of a server")
    if kind is not None:
        return _engine_backend(cfg, kind, engine or EngineOptions())
    if is_embedded_target(cfg.target):
        return _embedded_backend(cfg)
    backend = http_backend(cfg, cfg.streams, prewarm=0 if workers.pooled else None)  # pooled: it only probes
    return _pooled(cfg, backend, workers) if workers.pooled else backend


def _pooled(cfg: RunConfig, backend: Backend, workers: WorkerChoice) -> Backend:
    """`--workers N`: client processes that each run a backend like `backend` (which probes the target)."""
    from tokspeed.backends.worker_pool import WorkerPoolBackend

    return WorkerPoolBackend(backend, workers=workers.count, settings=worker_settings(cfg),
                             pool_size=-(-cfg.streams // workers.count), command=WORKER_COMMAND, reason=workers.reason)


def http_backend(cfg: RunConfig, pool_size: int, prewarm: int | None = None) -> Backend:
    """The OpenAI-compatible HTTP backend for `cfg` (also what each `--workers` process runs).

    Connections opened before the load (`prewarm`, default): every slot of a closed loop or of
    `--max-concurrency`; for an uncapped `--rate`, one second's worth of arrivals (the pool grows on
    demand, each connect recorded apart).
    """
    assert cfg.target is not None
    if prewarm is None:
        open_ended = cfg.profile == "rate" and not cfg.max_concurrency  # its pool size is only a guess
        second = pool_size if cfg.rate is None or math.isinf(cfg.rate) else max(1, math.ceil(cfg.rate))
        prewarm = min(pool_size, second) if open_ended else pool_size
    protocol = native_protocol(cfg.api.value)  # --api tgi|triton|ollama|ollama-chat|llamacpp|sglang
    if protocol is not None:
        return NativeHTTPBackend(
            cfg.target, protocol, stream=cfg.stream, model=cfg.model,
            api_key=cfg.api_key.get_secret_value() if cfg.api_key else None, headers=cfg.headers,
            extra_body=cfg.extra_body, sampling={"temperature": cfg.temperature, "top_p": cfg.top_p, "stop": cfg.stop},
            timeout_s=cfg.timeout_s, ttft_timeout_s=cfg.ttft_timeout_s, retries=cfg.retries, pool_size=pool_size,
            prewarm=prewarm, counter=load_counter(cfg.tokenizer) if cfg.tokenizer else None,
            keep_text_for=SAMPLE_OUTPUTS, policy=cfg.http_policy(), kernel_stamps=cfg.kernel_stamps,
        )
    return OpenAIHTTPBackend(
        cfg.target,
        api=cfg.api.value,
        stream=cfg.stream and cfg.api is not Api.EMBEDDINGS,
        model=cfg.model,
        api_key=cfg.api_key.get_secret_value() if cfg.api_key else None,
        headers=cfg.headers,
        extra_body=cfg.extra_body,
        sampling={"temperature": cfg.temperature, "top_p": cfg.top_p, "stop": cfg.stop},
        include_usage=cfg.include_usage,
        mix=tuple(m.name for m in cfg.models or ()) if cfg.model_mix else (),
        timeout_s=cfg.timeout_s,
        ttft_timeout_s=cfg.ttft_timeout_s,
        retries=cfg.retries,
        pool_size=pool_size,
        prewarm=prewarm,
        counter=load_counter(cfg.tokenizer) if cfg.tokenizer else None,
        keep_text_for=KEEP_ALL_TEXTS if cfg.token_audit else SAMPLE_OUTPUTS,  # --token-audit: every text
        policy=cfg.http_policy(),  # TLS for the probe and the load alike
        kernel_stamps=cfg.kernel_stamps,
    )


def _embedded_backend(cfg: RunConfig) -> Backend:
    """The in-process random-weight model (needs the `embedded` extra; ConfigError with a hint if absent)."""
    from tokspeed.backends.embedded import EmbeddedBackend, embedded_size

    return EmbeddedBackend(
        embedded_size(cfg.target),
        api=cfg.api.value,
        sampling={"temperature": cfg.temperature, "top_p": cfg.top_p},
        keep_text_for=SAMPLE_OUTPUTS,
    )


def _engine_backend(cfg: RunConfig, kind: str, engine: EngineOptions) -> Backend:
    """An in-process engine on a local model directory: hf:PATH (transformers) or vllm:PATH (vLLM's LLM)."""
    from tokspeed.backends.local_target import engine_path

    path = engine_path(cfg.target or "")
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "stop": cfg.stop}
    if kind == "hf":
        from tokspeed.backends.hf import HFBackend

        return HFBackend(path, api=cfg.api.value, options=engine, sampling=sampling, extra_body=cfg.extra_body,
                         keep_text_for=SAMPLE_OUTPUTS)
    from tokspeed.backends.vllm_offline import VLLMBackend

    return VLLMBackend(path, api=cfg.api.value, stream=cfg.stream, options=engine, sampling=sampling,
                       extra_body=cfg.extra_body, seed=cfg.seed, keep_text_for=SAMPLE_OUTPUTS)
