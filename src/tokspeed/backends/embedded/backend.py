"""EmbeddedBackend: the Backend protocol over the in-process random-weight model.

Records are filled exactly as the HTTP backend fills them, so the same metric
pipeline applies: `sent_ns` when the request is handed to the engine's queue,
one chunk per token (`chunk_tokens` all 1) timed in the worker thread as the
token is produced, `first_token_ns == first_content_ns` (no reasoning),
output tokens counted by the engine, input tokens by the real tokenizer
(chat requests through the ChatML template), `finish_reason` "length".
Requests are served one at a time in arrival order (see engine.py): with
--concurrency N the queueing shows in TTFT.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.embedded.engine import Engine, EngineReady, Job
from tokspeed.backends.embedded.hardware import (
    choose_dtype,
    choose_threads,
    dtype_label,
)
from tokspeed.backends.embedded.model import BuiltModel, build_model
from tokspeed.backends.embedded.requirements import require_extra
from tokspeed.backends.embedded.sizes import DEFAULT_SIZE, ModelSize, get_size
from tokspeed.backends.embedded.tokenizer import (
    END_OF_TEXT,
    TokenizerBundle,
    format_chat,
    load_tokenizer,
)
from tokspeed.backends.inprocess import (
    fail,
    record_cancelled,
    record_generation,
    refusal,
    start_phases,
)
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status, TokenSource

DEFAULT_MAX_TOKENS = 128  # when a request does not say how many tokens it wants
SERVING = "one request at a time, in arrival order; waiting for earlier requests counts in TTFT"


@dataclass(frozen=True)
class _Loaded:
    tokenizer: TokenizerBundle
    model: BuiltModel


class EmbeddedBackend:
    """Generates with a seeded random-weight Llama on the local CPU, in a worker thread."""

    def __init__(
        self,
        size: str = DEFAULT_SIZE,
        *,
        api: str = "chat",
        seed: int = 0,
        dtype: str | None = None,
        threads: int | None = None,
        sampling: dict[str, Any] | None = None,
        cache_dir: Path | None = None,
        keep_text_for: int = 3,
    ) -> None:
        require_extra()
        self.size: ModelSize = get_size(size)
        self.api = api
        self.seed = seed
        self.dtype = dtype or choose_dtype()
        self.threads = threads or choose_threads()
        self._sampling = _sampling_kwargs(sampling or {})
        self._cache_dir = cache_dir
        self._keep_text_for = keep_text_for
        self._engine: Engine | None = None
        self._loaded: _Loaded | None = None

    # lifecycle ------------------------------------------------------------
    async def start(self) -> TargetInfo:
        t0 = perf_counter_ns()
        self._engine = Engine(self._load, lambda loaded: loaded.model.model, self.threads, pad_token_id=0)
        try:
            ready: EngineReady = await asyncio.wrap_future(self._engine.start())
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            raise TargetError(
                f"the embedded model could not be built: {type(exc).__name__}: {exc}",
                hint="reinstall the extra: pip install 'tokspeed[embedded]'",
            ) from exc
        self._loaded = ready.loaded
        return self._target_info(ready, (perf_counter_ns() - t0) / 1e9)

    async def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.close)

    def _load(self) -> _Loaded:
        """Runs in the worker thread: tokenizer (cached) then the model."""
        tokenizer = load_tokenizer(self._cache_dir)
        if tokenizer.token_id(END_OF_TEXT) != 0:
            raise ValueError("the embedded tokenizer's <|endoftext|> must have id 0")
        return _Loaded(tokenizer=tokenizer, model=build_model(self.size, tokenizer, dtype=self.dtype, seed=self.seed))

    def _target_info(self, ready: EngineReady, start_s: float) -> TargetInfo:
        import torch
        import transformers

        loaded = ready.loaded
        line = describe(self.size.name, self.dtype, ready.threads, loaded.model.parameters)
        return TargetInfo(
            kind="embedded",
            url=None,
            model=f"embedded:{self.size.name} (random weights)",
            api=self.api,
            stream=True,
            include_usage=False,
            server_version=f"transformers {transformers.__version__}, torch {torch.__version__}",
            notes=(),
            extra={
                "description": line,
                "size": self.size.name,
                "parameters": loaded.model.parameters,
                "dtype": self.dtype,
                "device": "cpu",
                "torch_threads": ready.threads,
                "weights": f"random, seed {self.seed}",
                "vocab_size": self.size.vocab_size,
                "max_context": self.size.max_position_embeddings,
                "tokenizer_dir": str(loaded.tokenizer.directory),
                "tokenizer_built": loaded.tokenizer.built,
                "tokenizer_s": round(loaded.tokenizer.seconds, 3),
                "model_build_s": round(loaded.model.seconds, 3),
                "warmup_ms": round(ready.warmup_ms, 1),
                "start_s": round(start_s, 3),
                "serving": SERVING,
                "cold_start": start_phases(loaded.tokenizer.seconds + loaded.model.seconds, ready.warmup_ms / 1000, start_s),
            },
        )

    # requests ---------------------------------------------------------------
    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert self._engine is not None and self._loaded is not None, "start() first"
        record.max_tokens = spec.max_tokens
        n = spec.max_tokens if spec.max_tokens is not None else DEFAULT_MAX_TOKENS
        ids = self._encode(spec)
        record.input_tokens, record.input_tokens_source = len(ids), TokenSource.TOKENIZER
        problem = refusal(len(ids), n, self.size.max_position_embeddings)
        record.sent_ns = perf_counter_ns()
        if problem is not None:
            fail(record, Status.ERROR, ErrorKind.OTHER, problem)
            return
        job = Job(prompt_ids=ids, max_new_tokens=n, sampling=self._sampling)
        self._engine.submit(job)
        try:
            await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.cancelled.set()
            record_cancelled(record, job.token_ns)
            raise
        self._finish(record, job, n, spec.keep_text)

    def _encode(self, spec: RequestSpec) -> list[int]:
        assert self._loaded is not None
        text = format_chat(spec.as_messages()) if self.api == "chat" else spec.prompt_text()
        return list(self._loaded.tokenizer.tokenizer.encode(text, add_special_tokens=False).ids)

    def _finish(self, record: RequestRecord, job: Job, n: int, keep_text: bool = False) -> None:
        if not record_generation(record, job.token_ns, job.end_ns, job.error, n):
            return
        if (record.index < self._keep_text_for or keep_text) and self._loaded is not None:
            record.output_text = str(self._loaded.tokenizer.tokenizer.decode(job.output_ids))


def describe(size: str, dtype: str, threads: int, parameters: int) -> str:
    """The console's plain statement of what is being measured."""
    return (
        f"embedded model {size} ({parameters / 1e6:.0f}M parameters), random weights, CPU, {dtype_label(dtype)}, "
        f"{threads} torch thread{'s' if threads != 1 else ''} — pass --target URL to benchmark your server"
    )


def _sampling_kwargs(sampling: dict[str, Any]) -> dict[str, Any]:
    """generate() arguments: greedy unless a temperature above 0 is given."""
    temperature = sampling.get("temperature")
    if temperature is None or temperature <= 0:
        return {"do_sample": False}
    out: dict[str, Any] = {"do_sample": True, "temperature": float(temperature)}
    if sampling.get("top_p") is not None:
        out["top_p"] = float(sampling["top_p"])
    return out

