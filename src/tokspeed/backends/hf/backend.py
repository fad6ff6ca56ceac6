"""HFBackend: the Backend protocol over a local transformers causal LM, in-process (`--target hf:PATH`).

It reuses the embedded model's worker (`embedded.engine.Engine`): one thread
owns the model and serves requests one at a time, in arrival order, with
`model.generate()` (no batching). With --concurrency N the waiting shows in
TTFT, as on a server with a batch size of one. Every token is timestamped by a
streamer hook in that thread the moment generate() produces it.

Records are filled as the HTTP backend fills them: `sent_ns` when the request
is handed over (tokenising the prompt counts in TTFT, as on a server), one
chunk per token, output tokens counted by the engine (the end-of-sequence
token included, as servers count it), input tokens by the model's tokenizer
(chat requests through its chat template). Generation stops at the model's
end of sequence unless `--extra-body '{"ignore_eos": true}'` (exactly
max_tokens tokens) or `{"min_tokens": N}` says otherwise — the same fields
vLLM's server takes. Sampling follows the model's generation config unless
--temperature / --top-p / --stop are given.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.embedded.engine import Engine, EngineReady, Job
from tokspeed.backends.embedded.hardware import choose_threads, dtype_label
from tokspeed.backends.embedded.requirements import missing_modules
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.backends.hf.loading import LoadedModel, choose, load_model
from tokspeed.backends.inprocess import (
    fail,
    record_cancelled,
    record_generation,
    refusal,
    render_prompt,
    require_chat_template,
    start_phases,
)
from tokspeed.backends.model_dir import check_before_load, model_notes, warned
from tokspeed.errors import ConfigError, TargetError, TokspeedError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource

DEFAULT_MAX_TOKENS = 128  # when a request does not say how many tokens it wants
SERVING = "one request at a time, in arrival order (no batching); waiting for earlier requests counts in TTFT"
EXTRA_HINT = "pip install 'tokspeed[hf]'"
EXTRA_BODY_FIELDS = ("ignore_eos", "min_tokens")


class HFBackend:
    """Generates with a local transformers model in a worker thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        api: str = "chat",
        options: EngineOptions | None = None,
        sampling: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        threads: int | None = None,
        keep_text_for: int = 3,
    ) -> None:
        missing = missing_modules()
        if missing:
            raise ConfigError(f"hf: targets need {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed", hint=EXTRA_HINT)
        self.path = Path(path)
        self.api = api
        self.options = options or EngineOptions()
        self.options.check("hf")
        self.model_check = check_before_load(self.path, "hf", trust_remote_code=self.options.trust_remote_code, api=api,
                                             engine_args=self.options.engine_args)  # exit 2 before any loading
        self._ignore_eos, self._min_tokens = _eos_policy(extra_body or {})
        self._sampling = dict(sampling or {})
        self._threads = threads or choose_threads()
        self._keep_text_for = keep_text_for
        self._engine: Engine | None = None
        self._loaded: LoadedModel | None = None
        self._generation: dict[str, Any] = {}
        # checked now, before any run directory is made: a GPU asked for but absent is a usage error
        self.device, self.dtype = choose(self.path, self.options.device_name, self.options.torch_dtype)

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        t0 = perf_counter_ns()

        def loader() -> LoadedModel:  # runs in the worker thread
            return load_model(self.path, device=self.device, dtype=self.dtype,
                              trust_remote_code=self.options.trust_remote_code, extra=self.options.engine_args)

        self._engine = Engine(loader, lambda loaded: loaded.model, self._threads, pad_token_id=0)
        try:
            ready: EngineReady = await asyncio.wrap_future(self._engine.start())
        except TokspeedError:
            raise
        except Exception as exc:  # transformers raises many kinds for a directory it cannot load
            raise TargetError(
                f"the model at {self.path} could not be loaded: {type(exc).__name__}: {exc}"[:1000] + warned(self.model_check),
                hint="check the directory holds a causal LM transformers can load (pass --trust-remote-code for custom code)",
            ) from exc
        self._loaded = ready.loaded
        require_chat_template(self._loaded.tokenizer, str(self.path), self.api)
        self._generation = self._generation_options()
        return self._target_info(ready, (perf_counter_ns() - t0) / 1e9)

    async def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.close)

    def _generation_options(self) -> dict[str, Any]:
        """generate() arguments common to every request: sampling and stop strings."""
        assert self._loaded is not None
        tokenizer = self._loaded.tokenizer
        out: dict[str, Any] = {}
        temperature, top_p, stop = (self._sampling.get(k) for k in ("temperature", "top_p", "stop"))
        if temperature is not None:
            out["do_sample"] = temperature > 0
            if temperature > 0:
                out["temperature"] = float(temperature)
        if top_p is not None:
            out["top_p"] = float(top_p)
        if stop:
            out["stop_strings"], out["tokenizer"] = list(stop), tokenizer
        return out

    def _target_info(self, ready: EngineReady, start_s: float) -> TargetInfo:
        import torch
        import transformers

        loaded: LoadedModel = ready.loaded
        line = describe(str(self.path), loaded, ready.threads)
        return TargetInfo(
            kind="hf",
            url=None,
            model=str(self.path),
            api=self.api,
            stream=True,
            include_usage=False,
            server_version=f"transformers {transformers.__version__}, torch {torch.__version__}",
            notes=(line, *model_notes(self.model_check)),
            extra={
                "description": line,
                "architecture": loaded.architecture,
                "parameters": loaded.parameters,
                "dtype": loaded.dtype,
                "device": loaded.device,
                "torch_threads": ready.threads,
                "max_context": loaded.max_context,
                "engine_flags": self.options.given(),
                "ignore_eos": self._ignore_eos,
                "min_tokens": self._min_tokens,
                "load_s": round(loaded.seconds, 3),
                "warmup_ms": round(ready.warmup_ms, 1),
                "start_s": round(start_s, 3),
                "serving": SERVING,
                "cold_start": start_phases(loaded.seconds, ready.warmup_ms / 1000, start_s),
                "model_check": self.model_check.as_dict(),
            },
        )

    # requests ---------------------------------------------------------------
    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert self._engine is not None and self._loaded is not None, "start() first"
        record.max_tokens = spec.max_tokens
        n = spec.max_tokens if spec.max_tokens is not None else DEFAULT_MAX_TOKENS
        record.sent_ns = perf_counter_ns()
        try:
            ids = render_prompt(self._loaded.tokenizer, spec, self.api)
        except Exception as exc:  # a template that rejects the messages, ...
            fail(record, Status.ERROR, ErrorKind.OTHER, f"the prompt could not be tokenised: {type(exc).__name__}: {exc}"[:300])
            return
        record.input_tokens, record.input_tokens_source = len(ids), TokenSource.TOKENIZER
        problem = refusal(len(ids), n, self._loaded.max_context)
        if problem is not None:
            fail(record, Status.ERROR, ErrorKind.OTHER, problem)
            return
        job = Job(prompt_ids=ids, max_new_tokens=n, sampling={**self._generation, "min_new_tokens": self._floor(n)})
        self._engine.submit(job)
        try:
            await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.cancelled.set()
            record_cancelled(record, job.token_ns)
            raise
        self._finish(record, job, n, spec.keep_text)

    def _floor(self, n: int) -> int | None:
        """min_new_tokens for a request of n tokens: n with ignore_eos, min_tokens (at most n), else none."""
        if self._ignore_eos:
            return n
        return min(self._min_tokens, n) if self._min_tokens else None

    def _finish(self, record: RequestRecord, job: Job, n: int, keep_text: bool = False) -> None:
        if not record_generation(record, job.token_ns, job.end_ns, job.error, n):
            return
        if (record.index < self._keep_text_for or keep_text) and self._loaded is not None:
            record.output_text = str(self._loaded.tokenizer.decode(job.output_ids, skip_special_tokens=True))


def describe(path: str, loaded: LoadedModel, threads: int) -> str:
    """The console's plain statement of what is being measured."""
    where = "CPU" if loaded.device == "cpu" else loaded.device.upper()
    thread_note = f", {threads} torch thread{'s' if threads != 1 else ''}" if loaded.device == "cpu" else ""
    return (
        f"hf model {path} ({loaded.architecture}, {loaded.parameters / 1e6:,.0f}M parameters), in-process with transformers, "
        f"{where}, {dtype_label(loaded.dtype)}{thread_note}; {SERVING}"
    )


def _eos_policy(extra_body: dict[str, Any]) -> tuple[bool, int]:
    """(ignore_eos, min_tokens) from --extra-body; ConfigError for any other field."""
    unknown = sorted(set(extra_body) - set(EXTRA_BODY_FIELDS))
    if unknown:
        raise ConfigError(
            f"hf: targets take only {' and '.join(EXTRA_BODY_FIELDS)} in --extra-body, not {', '.join(unknown)}",
            hint="sampling is set with --temperature, --top-p and --stop",
        )
    ignore = extra_body.get("ignore_eos", False)
    minimum = extra_body.get("min_tokens", 0)
    if not isinstance(ignore, bool) or not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
        raise ConfigError("--extra-body: ignore_eos must be true or false and min_tokens a whole number >= 0")
    return ignore, minimum
