"""The generation worker: one thread that owns the model and serves queued requests one at a time.

Requests are served in the order they were handed over, one after another
(no batching): with several requests in flight, the time each waits for the
ones before it is part of its TTFT, as it would be on a server with a batch
size of one. Every token's time is taken in this thread, by a streamer hook,
the moment generate() produces it; the asyncio side only reads the finished
job, through a concurrent Future (whose result reaches the event loop via
call_soon_threadsafe).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any


class GenerationCancelled(Exception):
    """Raised inside generate() (from the streamer) to stop a cancelled job."""


@dataclass
class Job:
    """One request for the worker. The worker writes the token times; the loop reads them once done."""

    prompt_ids: list[int]
    max_new_tokens: int
    sampling: dict[str, Any]
    future: Future[Job] = field(default_factory=Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    token_ns: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    end_ns: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class EngineReady:
    """What the worker reports once its model is loaded and warmed up."""

    loaded: Any  # whatever the loader returned
    threads: int
    warmup_ms: float


class _TokenClock:
    """A transformers streamer that timestamps each generated token.

    generate() calls put() once with the prompt, then once per new token; the
    first call is skipped. (Duck-typed like transformers' BaseStreamer, so this
    module does not import transformers.)
    """

    def __init__(self, job: Job) -> None:
        self._job = job
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        now = perf_counter_ns()
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        if self._job.cancelled.is_set():
            raise GenerationCancelled
        self._job.token_ns.append(now)

    def end(self) -> None:
        return None


class Engine:
    """Starts the worker thread, accepts jobs, stops the thread."""

    def __init__(self, loader: Callable[[], Any], model_of: Callable[[Any], Any], threads: int, pad_token_id: int) -> None:
        self._loader = loader
        self._model_of = model_of
        self._threads = threads
        self._pad = pad_token_id
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._current: Job | None = None
        self._thread = threading.Thread(target=self._run, name="tokspeed-embedded", daemon=True)
        self._ready: Future[EngineReady] = Future()

    def start(self) -> Future[EngineReady]:
        """Start the worker; the future resolves once the model is loaded and warmed up."""
        self._thread.start()
        return self._ready

    def submit(self, job: Job) -> None:
        self._queue.put(job)

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel the running job, let the worker finish and join it."""
        current = self._current
        if current is not None:
            current.cancelled.set()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # worker thread ----------------------------------------------------------
    def _run(self) -> None:
        if not self._ready.set_running_or_notify_cancel():  # start() was abandoned before we began
            return
        try:
            import torch

            torch.set_num_threads(self._threads)  # set here: the thread that runs the model
            loaded = self._loader()
            model = self._model_of(loaded)
            warm = Job(prompt_ids=[self._pad] * 8, max_new_tokens=4, sampling={})
            t0 = perf_counter_ns()
            self._generate(torch, model, warm)
            ready = EngineReady(loaded=loaded, threads=torch.get_num_threads(), warmup_ms=(perf_counter_ns() - t0) / 1e6)
        except BaseException as exc:  # report any load failure to start()
            self._ready.set_exception(exc)
            return
        self._ready.set_result(ready)
        while (job := self._queue.get()) is not None:
            if not job.future.set_running_or_notify_cancel():
                continue
            self._current = job
            try:
                self._generate(torch, model, job)
            except GenerationCancelled:
                job.error = "cancelled"
            except Exception as exc:  # a request failure is data, never a dead worker
                job.error = f"{type(exc).__name__}: {exc}"
            finally:
                job.end_ns = perf_counter_ns()
                self._current = None
            job.future.set_result(job)

    def _generate(self, torch: Any, model: Any, job: Job) -> None:
        n = job.max_new_tokens
        ids = torch.tensor([job.prompt_ids], dtype=torch.long, device=model.device)
        # end-of-sequence suppressed unless the job's sampling says otherwise: exactly n tokens
        options = {"min_new_tokens": n, **job.sampling}
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                pad_token_id=self._pad,
                streamer=_TokenClock(job),
                **options,
            )
        job.output_ids = out[0, ids.shape[1] :].tolist()
