"""The vLLM worker: one thread that owns vLLM's offline engine and runs its step loop.

This is `LLM.generate()` taken apart: `generate` adds every prompt to
`llm.llm_engine` and calls `step()` until no request is left, keeping each
request's final output. The worker does the same with requests as they are
handed over — all requests submitted at once are added before the next step,
so they are batched exactly as one `generate()` call batches them — and it
looks at what every step returns:

* streaming (the default): outputs of kind DELTA, so each step hands back the
  tokens it produced for each request; they are timestamped the moment
  `step()` returns them, in this thread (one chunk per request per step).
* not streaming: outputs of kind FINAL_ONLY, exactly as `generate()` asks;
  a request's end is the step that finished it, and its first token is vLLM's
  own timestamp (`RequestOutput.metrics.first_token_ts`, engine-core
  monotonic clock, the same CLOCK_MONOTONIC as `perf_counter_ns` on Linux),
  used only when that clock is shared; else None.

Cancelled requests are aborted in the engine. The asyncio side reads a job
only after its future resolved (or, once cancelled, a copy of what it has).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.inprocess import render_prompt
from tokspeed.records import RequestSpec


@dataclass
class VJob:
    """One request for the worker; the worker fills the results, the loop reads them once done."""

    spec: RequestSpec
    sampling: dict[str, Any]  # SamplingParams keyword arguments (max_tokens included)
    keep_text: bool = False
    future: Future[VJob] = field(default_factory=Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    request_id: str = ""
    prompt_tokens: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_tokens: int = 0
    text: list[str] = field(default_factory=list)
    first_token_ns: int | None = None  # set from vLLM's metrics when not streaming
    end_ns: int | None = None
    finish_reason: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class WorkerReady:
    llm: Any
    seconds: float


_WAKE = object()  # queue item: look at cancellations
_STOP = None


def shared_clock() -> bool:
    """Whether vLLM's engine timestamps (time.monotonic) and perf_counter_ns share one clock."""
    a, b = time.get_clock_info("monotonic"), time.get_clock_info("perf_counter")
    return a.implementation == b.implementation


class VLLMWorker:
    """Starts the worker thread, accepts jobs, stops the thread (and vLLM's engine processes)."""

    def __init__(
        self,
        make_llm: Callable[[], Any],
        *,
        api: str,
        stream: bool,
        sampling_types: Callable[[], tuple[Any, Any]] | None = None,
    ) -> None:
        self._make_llm = make_llm
        self._sampling_types = sampling_types or _vllm_sampling_types
        self._api = api
        self._stream = stream
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._active: dict[str, VJob] = {}
        self._ids = itertools.count()
        self._thread = threading.Thread(target=self._run, name="tokspeed-vllm", daemon=True)
        self._ready: Future[WorkerReady] = Future()
        self._dead: str | None = None

    def start(self) -> Future[WorkerReady]:
        self._thread.start()
        return self._ready

    def submit(self, job: VJob) -> None:
        self._queue.put(job)

    def cancel(self, job: VJob) -> None:
        job.cancelled.set()
        self._queue.put(_WAKE)

    def close(self, timeout_s: float = 60.0) -> None:
        self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # worker thread ----------------------------------------------------------
    def _run(self) -> None:
        if not self._ready.set_running_or_notify_cancel():
            return
        t0 = time.perf_counter()
        try:
            llm = self._make_llm()
            output_kind, sampling_params = self._sampling_types()
            kind = output_kind.DELTA if self._stream else output_kind.FINAL_ONLY
        except BaseException as exc:  # report any load failure to start()
            self._ready.set_exception(exc)
            return
        self._ready.set_result(WorkerReady(llm=llm, seconds=time.perf_counter() - t0))
        engine = llm.llm_engine
        clock_ok = shared_clock()
        try:
            while True:
                idle = self._dead is not None or not engine.has_unfinished_requests()
                if not self._take(llm, sampling_params, kind, block=idle):
                    break
                self._abort_cancelled(engine)
                if self._dead is not None or not engine.has_unfinished_requests():
                    continue
                try:
                    outputs = engine.step()
                except Exception as exc:  # the engine died: every request in flight fails, later ones too
                    self._dead = f"vLLM's engine failed: {type(exc).__name__}: {exc}"
                    self._fail_all(self._dead)
                    continue
                now = perf_counter_ns()
                for out in outputs:
                    self._on_output(out, now, clock_ok)
        finally:
            self._fail_all("the engine was shut down")
            _shutdown(llm)

    def _take(self, llm: Any, sampling_params: Any, kind: Any, *, block: bool) -> bool:
        """Add every job handed over so far (waiting for one when idle); False once told to stop."""
        while True:
            try:
                item = self._queue.get(block=block)
            except queue.Empty:
                return True
            if item is _STOP:
                return False
            if isinstance(item, VJob):
                self._add(llm, sampling_params, kind, item)
            block = False

    def _add(self, llm: Any, sampling_params: Any, kind: Any, job: VJob) -> None:
        if job.cancelled.is_set():
            job.future.cancel()
            return
        if self._dead is not None:
            self._resolve(job, error=self._dead)
            return
        job.request_id = str(next(self._ids))
        try:
            params = sampling_params.from_optional(**job.sampling, output_kind=kind)
            llm.llm_engine.add_request(job.request_id, engine_input(llm, job.spec, self._api), params)
        except Exception as exc:  # a prompt longer than max_model_len, bad sampling values, ...
            self._resolve(job, error=f"{type(exc).__name__}: {exc}"[:500])
            return
        self._active[job.request_id] = job

    def _abort_cancelled(self, engine: Any) -> None:
        gone = [rid for rid, job in self._active.items() if job.cancelled.is_set()]
        if not gone:
            return
        try:
            engine.abort_request(gone)
        except Exception:  # the request may have finished meanwhile
            pass
        for rid in gone:
            self._resolve(self._active.pop(rid), error="cancelled")

    def _on_output(self, out: Any, now: int, clock_ok: bool) -> None:
        job = self._active.get(out.request_id)
        if job is None:
            return
        if job.prompt_tokens is None and out.prompt_token_ids is not None:
            job.prompt_tokens = len(out.prompt_token_ids)
        completion = out.outputs[0] if out.outputs else None
        if completion is not None:
            new = len(completion.token_ids)
            if self._stream and new:
                job.chunk_ns.append(now)
                job.chunk_tokens.append(new)
            job.output_tokens += new
            if job.keep_text and completion.text:
                job.text.append(completion.text)
        if not out.finished:
            return
        job.finish_reason = completion.finish_reason if completion is not None else None
        metrics = getattr(out, "metrics", None)
        first = getattr(metrics, "first_token_ts", 0.0) if metrics is not None else 0.0
        if not self._stream and clock_ok and first:
            job.first_token_ns = int(first * 1e9)
        job.end_ns = now
        self._resolve(self._active.pop(out.request_id))

    def _fail_all(self, message: str) -> None:
        for rid in list(self._active):
            self._resolve(self._active.pop(rid), error=message)

    @staticmethod
    def _resolve(job: VJob, error: str | None = None) -> None:
        if error is not None:
            job.error = error
            if job.end_ns is None:
                job.end_ns = perf_counter_ns()
        try:
            job.future.set_result(job)
        except InvalidStateError:  # the awaiting side gave up on it (cancelled) meanwhile
            pass


def _vllm_sampling_types() -> tuple[Any, Any]:
    """(RequestOutputKind, SamplingParams) from vLLM; tests pass stand-ins."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams  # type: ignore[import-not-found, unused-ignore]

    return RequestOutputKind, SamplingParams


def engine_input(llm: Any, spec: RequestSpec, api: str) -> Any:
    """The request's prompt rendered as `LLM.generate` (completions) or `LLM.chat` (chat) renders it.

    Uses the LLM's own preprocessing where this vLLM has it (private helpers in
    vLLM 0.32); otherwise the chat template is applied here and a completions
    prompt is passed as text for the engine to tokenise.
    """
    if api == "chat":
        preprocess = getattr(llm, "_preprocess_chat_one", None)
        if preprocess is not None:
            return preprocess(spec.as_messages())
        return {"prompt_token_ids": render_prompt(llm.get_tokenizer(), spec, "chat")}
    preprocess = getattr(llm, "_preprocess_cmpl_one", None)
    return preprocess(spec.prompt_text()) if preprocess is not None else spec.prompt_text()


def _shutdown(llm: Any) -> None:
    """Stop vLLM's engine-core process(es) now rather than at interpreter exit."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    try:
        if core is not None:
            core.shutdown()
    except Exception:
        pass
