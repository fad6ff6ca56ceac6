"""VLLMBackend: the Backend protocol over vLLM's offline engine, in-process (`--target vllm:PATH`).

A `llm.generate(prompts)` benchmark script, measured per request: `LLM(model=PATH, <engine flags>)`
is built in a worker thread (see engine.py), and every request tokspeed sends
becomes one `add_request` to its engine, batched with whatever else is in
flight (continuous batching, as in `llm.generate`). With the default load for
vllm: targets (tokspeed.runner.passes) all requests of an iteration are submitted at
once, as `llm.generate(prompts, sampling_params)` does.

Records are filled as the HTTP backend fills them: `sent_ns` when the request
is handed to the worker (tokenising and queueing in the engine count in TTFT,
as on a server); streamed, one chunk per engine step that produced tokens for
the request, carrying that many tokens; output tokens counted by the engine,
input tokens by vLLM's tokenizer (`RequestOutput.prompt_token_ids`). Sampling
is vLLM's `SamplingParams`: the model's generation-config defaults (as
`llm.generate` uses them), then --temperature, --top-p, --stop when given, then
any `SamplingParams` field in --extra-body (`ignore_eos`, `min_tokens`,
`top_k`, `seed`, ...), then max_tokens.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.backends.inprocess import (
    fail,
    require_chat_template,
    set_chunks,
    start_phases,
)
from tokspeed.backends.model_dir import check_before_load, model_notes, warned
from tokspeed.backends.vllm_offline.engine import VJob, VLLMWorker, WorkerReady
from tokspeed.backends.vllm_offline.requirements import require_vllm
from tokspeed.errors import ConfigError, TargetError, TokspeedError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource

DEFAULT_MAX_TOKENS = 128  # when a request does not say how many tokens it wants
SERVING = "continuous batching in vLLM's offline engine (LLM.generate's step loop), requests added as they arrive"
_ENGINE_FLAGS = ("tensor_parallel_size", "gpu_memory_utilization", "max_num_seqs", "max_model_len",
                 "quantization", "kv_cache_dtype", "load_format")


class VLLMBackend:
    """Generates with `vllm.LLM` in a worker thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        api: str = "chat",
        stream: bool = True,
        options: EngineOptions | None = None,
        sampling: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        seed: int = 0,
        keep_text_for: int = 3,
    ) -> None:
        require_vllm()
        self.path = Path(path)
        self.api = api
        self.stream = stream
        self.options = options or EngineOptions()
        self.options.check("vllm")
        self.model_check = check_before_load(self.path, "vllm", trust_remote_code=self.options.trust_remote_code, api=api,
                                             engine_args=self.options.engine_args,
                                             load_format=self.options.load_format)  # exit 2 before any loading
        self.seed = seed
        self._sampling = {k: v for k, v in (sampling or {}).items() if v not in (None, [])}
        self._extra = dict(extra_body or {})
        self._keep_text_for = keep_text_for
        self._worker: VLLMWorker | None = None
        self._defaults: dict[str, Any] = {}

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `vllm.LLM`: the model, the seed and the engine flags that were given."""
        o = self.options
        kw: dict[str, Any] = {"model": str(self.path), "seed": self.seed, "disable_log_stats": self.stream}
        if o.dtype is not None:
            kw["dtype"] = o.torch_dtype
        if o.trust_remote_code:
            kw["trust_remote_code"] = True
        if o.enforce_eager:
            kw["enforce_eager"] = True
        kw.update({name: getattr(o, name) for name in _ENGINE_FLAGS if getattr(o, name) is not None})
        kw.update(o.engine_args)
        return kw

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        t0 = perf_counter_ns()
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM's INFO log would bury the console
        _check_extra_body(self._extra)
        kwargs = self.llm_kwargs()

        def make_llm() -> Any:
            from vllm import LLM  # type: ignore[import-not-found, unused-ignore]

            return LLM(**kwargs)

        self._worker = VLLMWorker(make_llm, api=self.api, stream=self.stream)
        try:
            ready: WorkerReady = await asyncio.wrap_future(self._worker.start())
        except TokspeedError:
            raise
        except Exception as exc:  # vLLM raises many kinds for a model or flags it cannot use
            raise TargetError(
                f"vLLM could not load {self.path}: {type(exc).__name__}: {exc}"[:1000] + warned(self.model_check),
                hint="check the model directory and the engine flags (--max-model-len, --gpu-memory-utilization, ...); "
                "VLLM_LOGGING_LEVEL=INFO shows vLLM's own log",
            ) from exc
        llm = ready.llm
        require_chat_template(llm.get_tokenizer(), str(self.path), self.api)
        self._defaults = _generation_defaults(llm)
        return self._target_info(llm, ready, (perf_counter_ns() - t0) / 1e9)

    async def close(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await asyncio.get_running_loop().run_in_executor(None, worker.close)

    def _target_info(self, llm: Any, ready: WorkerReady, start_s: float) -> TargetInfo:
        import vllm  # type: ignore[import-not-found, unused-ignore]

        facts = _engine_facts(llm)
        line = describe(str(self.path), vllm.__version__, facts)
        return TargetInfo(
            kind="vllm",
            url=None,
            model=str(self.path),
            api=self.api,
            stream=self.stream,
            include_usage=False,
            server_version=f"vLLM {vllm.__version__} (offline LLM)",
            notes=(line, *model_notes(self.model_check)),
            extra={
                "description": line,
                **facts,
                "engine_flags": self.options.given(),
                "llm_kwargs": {k: v for k, v in self.llm_kwargs().items() if k != "model"},
                "sampling_defaults": self._defaults,
                "extra_body": self._extra,
                "timing": "per step as LLMEngine.step() hands tokens back" if self.stream
                else "end per request at the step that finished it; first token from vLLM's own metrics",
                "load_s": round(ready.seconds, 3),
                "start_s": round(start_s, 3),
                "serving": SERVING,
                "cold_start": start_phases(ready.seconds, None, start_s),
                "model_check": self.model_check.as_dict(),
            },
        )

    # requests ---------------------------------------------------------------
    def sampling_for(self, max_tokens: int) -> dict[str, Any]:
        """SamplingParams keyword arguments for one request."""
        return {**self._defaults, **self._sampling, **self._extra, "max_tokens": max_tokens}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert self._worker is not None, "start() first"
        record.max_tokens = spec.max_tokens
        n = spec.max_tokens if spec.max_tokens is not None else DEFAULT_MAX_TOKENS
        job = VJob(spec=spec, sampling=self.sampling_for(n), keep_text=record.index < self._keep_text_for or spec.keep_text)
        record.sent_ns = perf_counter_ns()
        self._worker.submit(job)
        try:
            await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            self._worker.cancel(job)
            set_chunks(record, list(job.chunk_ns), list(job.chunk_tokens))
            fail(record, Status.INCOMPLETE, None, "cancelled before completion")
            raise
        self._finish(record, job)

    def _finish(self, record: RequestRecord, job: VJob) -> None:
        set_chunks(record, job.chunk_ns, job.chunk_tokens)
        if job.first_token_ns is not None and not record.chunk_ns:
            record.first_token_ns = record.first_content_ns = job.first_token_ns
        record.end_ns = job.end_ns
        if job.prompt_tokens is not None:
            record.input_tokens, record.input_tokens_source = job.prompt_tokens, TokenSource.TOKENIZER
        if job.error is not None:
            fail(record, Status.ERROR, ErrorKind.OTHER, f"vLLM refused or failed the request: {job.error}"[:300])
            return
        record.output_tokens, record.output_tokens_source = job.output_tokens, TokenSource.ENGINE
        record.finish_reason = job.finish_reason
        if job.keep_text:
            record.output_text = "".join(job.text)


def describe(path: str, version: str, facts: dict[str, Any]) -> str:
    """The console's plain statement of what is being measured."""
    parts = [f"{k.replace('_', ' ')} {facts[k]}" for k in ("device", "dtype", "max_num_seqs", "max_model_len", "tensor_parallel_size") if facts.get(k) is not None]
    arch = f" ({facts['architecture']})" if facts.get("architecture") else ""
    return f"vllm model {path}{arch}, in-process with vLLM {version}'s offline engine, {', '.join(parts)}; {SERVING}"


def _check_extra_body(extra: dict[str, Any]) -> None:
    """ConfigError naming any --extra-body field that vLLM's SamplingParams does not take."""
    if not extra:
        return
    owned = sorted(set(extra) & {"max_tokens", "n", "output_kind"})
    if owned:
        raise ConfigError(f"--extra-body cannot set {', '.join(owned)} for a vllm: target: tokspeed sets it",
                          hint="set the output length with --max-tokens")
    from vllm import SamplingParams  # type: ignore[import-not-found, unused-ignore]

    try:
        SamplingParams.from_optional(**{**extra, "max_tokens": 1})
    except TypeError as exc:
        raise ConfigError(
            f"--extra-body has a field vLLM's SamplingParams does not take: {exc}",
            hint="vllm: targets take SamplingParams fields in --extra-body, e.g. ignore_eos, min_tokens, top_k, seed",
        ) from exc
    except ValueError as exc:
        raise ConfigError(f"--extra-body is refused by vLLM's SamplingParams: {exc}") from exc


def _generation_defaults(llm: Any) -> dict[str, Any]:
    """The model's generation-config sampling defaults, as `llm.generate` applies them."""
    try:
        defaults = llm.llm_engine.model_config.get_diff_sampling_param()
    except Exception:
        return {}
    return dict(defaults or {})


def _engine_facts(llm: Any) -> dict[str, Any]:
    """What the engine chose (best effort: these attributes are vLLM internals)."""
    facts: dict[str, Any] = {}
    config = getattr(llm.llm_engine, "vllm_config", None)
    model = getattr(config, "model_config", None)
    if model is not None:
        facts["dtype"] = str(getattr(model, "dtype", "")).removeprefix("torch.") or None
        facts["max_model_len"] = getattr(model, "max_model_len", None)
        archs = getattr(getattr(model, "hf_config", None), "architectures", None)
        facts["architecture"] = archs[0] if archs else None
        facts["quantization"] = getattr(model, "quantization", None)
    scheduler = getattr(config, "scheduler_config", None)
    if scheduler is not None:
        facts["max_num_seqs"] = getattr(scheduler, "max_num_seqs", None)
    parallel = getattr(config, "parallel_config", None)
    if parallel is not None:
        facts["tensor_parallel_size"] = getattr(parallel, "tensor_parallel_size", None)
    cache = getattr(config, "cache_config", None)
    if cache is not None:
        facts["kv_cache_dtype"] = getattr(cache, "cache_dtype", None)
        facts["prefix_caching"] = getattr(cache, "enable_prefix_caching", None)
    try:
        from vllm.platforms import current_platform  # type: ignore[import-not-found, unused-ignore]

        facts["device"] = str(getattr(current_platform, "device_type", None) or getattr(current_platform, "device_name", "?"))
    except Exception:
        pass
    return facts
