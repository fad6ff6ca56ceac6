"""Serving one simulated request: admission, the timed response, and its log line.

`SimService` holds the per-server state (config, FIFO gate, log, id counter) and exposes one
aiohttp handler per endpoint. A generation request is parsed, queued for a slot, then answered
on an absolute schedule (`schedule.py`); whatever happens, one `LogEntry` records it.
With fault injection configured, each accepted request draws its fault (`faults.py`) and
`inject.py` carries it out; the entry's `fault` field says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from tokspeed.sim import inject
from tokspeed.sim.arrival import arrival_of
from tokspeed.sim.config import SimConfig, serves
from tokspeed.sim.embeddings import embeddings_body, parse_embeddings
from tokspeed.sim.faults import AFTER_DONE, HTTP_STATUS, MID_STREAM, Fault, FaultPicker
from tokspeed.sim.gate import FifoGate
from tokspeed.sim.log import LogEntry, SimLog, SimStatus
from tokspeed.sim.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tokspeed.sim.metrics import SimMetrics
from tokspeed.sim.prefix_cache import PrefixCache, prompt_tokens, with_cached
from tokspeed.sim.quality import QualityAnswers, with_answer
from tokspeed.sim.request import ApiName, RequestError, SimRequest, parse_request
from tokspeed.sim.schedule import Chunk, ResponsePlan, Timing, make_plan, sleep_until
from tokspeed.sim.spec_decode import Drafts, draw_drafts
from tokspeed.sim.stream import ChunkEncoder, error_body, response_body, usage_dict
from tokspeed.sim.vocab import token_text
from tokspeed.version import __version__

SHUTDOWN_GRACE_S = 2.0  # on shutdown, in-flight requests may run this long before being cancelled
COMMENT_EVERY = 4  # with sse_comments: one comment before the first token, then every 4 chunks
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_JSON = "application/json"


class SimService:
    """The simulator's endpoints and the state they share."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._created = int(time.time())
        self._gate = FifoGate(cfg.max_concurrency)
        self._metrics = SimMetrics(self._gate, cfg.model, cfg.kv_capacity_tokens, prefix_cache=bool(cfg.prefix_cache_tokens),
                                   spec_decode_tokens=cfg.spec_decode_tokens)
        self._drafts: dict[str, Drafts] = {}  # speculative decoding: the drafts of each request being served
        self._log = SimLog(cfg.log_path)
        self._ids = itertools.count(1)
        self._eol = b"\r\n" if cfg.crlf else b"\n"
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._faults = FaultPicker(cfg.faults, cfg.seed, cfg.clean_requests)
        self._prefix = PrefixCache(cfg.prefix_cache_tokens, cfg.prefix_block_tokens) if cfg.prefix_cache_tokens else None
        self._answers = QualityAnswers.from_config(cfg) if cfg.quality_accuracy is not None else None

    async def log_context(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp cleanup context: the log is open exactly while the app runs."""
        self._log.open()
        try:
            yield
        finally:
            self._log.close()

    async def on_shutdown(self, app: web.Application) -> None:
        """Let in-flight requests finish for up to SHUTDOWN_GRACE_S, then cancel them (logged "cancelled")."""
        if not self._in_flight:
            return
        _, pending = await asyncio.wait(set(self._in_flight), timeout=SHUTDOWN_GRACE_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    # --- what every endpoint shares ---------------------------------------------------

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-sim-{next(self._ids)}"

    @contextlib.asynccontextmanager
    async def tracked(self, request: web.Request, entry: LogEntry) -> AsyncIterator[None]:
        """While a request is served: known to shutdown, its status set if cancelled, one log line at the end."""
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            yield
        except asyncio.CancelledError:  # aiohttp's handler_cancellation, or server shutdown
            entry.status = SimStatus.DISCONNECTED if _client_gone(request) else SimStatus.CANCELLED
            raise
        finally:
            if task is not None:
                self._in_flight.discard(task)
            if entry.end_ns is None:
                entry.end_ns = perf_counter_ns()
            self._log.write(entry)

    @contextlib.asynccontextmanager
    async def slot(self, entry: LogEntry) -> AsyncIterator[None]:
        """A serving slot (FIFO, --max-concurrency), counted in /metrics while held."""
        await self._gate.acquire()
        self._metrics.admitted(entry)
        try:
            yield
        finally:
            self._metrics.released(entry)
            self._gate.release()

    def write_log(self, entry: LogEntry) -> None:
        """Append a line to the log (the profiler endpoints' calls)."""
        self._log.write(entry)

    def log_rejected(self, entry: LogEntry, exc: RequestError) -> None:
        """A request refused before any work: logged at once."""
        entry.status = SimStatus.REJECTED
        entry.http_status = exc.status
        entry.error = exc.message
        entry.end_ns = perf_counter_ns()
        self._log.write(entry)

    # --- informational endpoints -------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        cards = [{"id": name, "object": "model", "created": self._created, "owned_by": "tokspeed"}
                 for name in (self.cfg.model, *self.cfg.served_models)]
        echo = inject.echoed(self.cfg, request)
        if echo:  # --echo-auth
            for card in cards:
                card.update(owned_by=echo, root=echo)
        return web.Response(body=orjson.dumps({"object": "list", "data": cards}), content_type=_JSON)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(self, request: web.Request) -> web.Response:
        echo = inject.echoed(self.cfg, request)  # --echo-auth
        version = f"tokspeed-sim {__version__}" + (f" (auth {echo})" if echo else "")
        return web.Response(body=orjson.dumps({"version": version}), content_type=_JSON)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self._metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    # --- generation ----------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        """`/v1/embeddings`: answered when its prefill is done (sim/embeddings.py), logged like the others."""
        entry = LogEntry(id=self.new_id("emb"), api="embeddings", epoch_offset_ns=self.epoch_offset_ns,
                         received_ns=arrival_of(request), stream=False)
        try:
            req = parse_embeddings(await request.read())
            entry.model = req.model if isinstance(req.model, str) else None
            if not serves(self.cfg, req.model):
                raise RequestError(f"The model `{req.model}` does not exist.", "model_not_found", "model", status=404)
        except RequestError as exc:
            return self._reject(entry, exc)
        entry.prompt_tokens = req.prompt_tokens
        entry.prefill_ns = round(self.cfg.ttft_ms * 1e6 + req.prompt_tokens * self.cfg.per_prompt_token_us * 1e3)
        resp = web.Response(body=embeddings_body(entry.id, self.cfg.model, req), content_type=_JSON)
        async with self.tracked(request, entry):
            await self._gate.acquire()  # a slot, but not counted as a generation in /metrics
            try:
                start_ns = entry.start_ns = perf_counter_ns()
                await sleep_until(start_ns + entry.prefill_ns)
                await resp.prepare(request)
                await resp.write_eof()
            except ConnectionError:
                entry.status = SimStatus.DISCONNECTED
            finally:
                self._gate.release()
                entry.end_ns = perf_counter_ns()
        return resp

    async def _generate(self, request: web.Request, api: ApiName) -> web.StreamResponse:
        entry = self._new_entry(api, arrival_of(request))
        try:
            req = self._accept(api, await request.read())
        except RequestError as exc:
            return self._reject(entry, exc)
        entry.stream = req.stream
        entry.model = req.model if isinstance(req.model, str) else None
        entry.include_usage = req.include_usage
        entry.prompt_tokens = req.prompt_tokens
        fault = self._faults.pick(req.stream)
        if fault is not None:
            entry.fault = fault.value
            if fault in HTTP_STATUS or fault is Fault.RESET:
                return self._fail_early(request, entry, fault)
        if self._prefix is not None:
            tokens = prompt_tokens(req.prompt_text) if req.prompt_text is not None else []
            entry.cached_tokens = self._prefix.lookup_and_insert(tokens)
        plan = make_plan(self.cfg, req, entry.cached_tokens or 0)
        if self._answers is not None:  # a quality-probe question gets its (right or wrong) answer
            plan = with_answer(plan, self._answers.tokens_for(await request.read(), api))
        entry.planned_tokens = plan.total_tokens
        entry.prefill_ns = plan.timing.prefill_ns
        entry.itl_ns = plan.timing.itl_ns
        if self.cfg.spec_decode_tokens:
            self._drafts[entry.id] = draw_drafts(plan.total_tokens, self.cfg.spec_decode_tokens,
                                                 self.cfg.spec_decode_acceptance, self.cfg.seed, entry.id)
        try:
            async with self.tracked(request, entry):
                return await self._admit_and_serve(request, req, plan, entry, fault)
        finally:
            self._drafts.pop(entry.id, None)

    def _count_drafts(self, entry: LogEntry, sent_tokens: int) -> None:
        """Speculative decoding: count the drafts that begin before token `sent_tokens` (before it is written)."""
        if not self._drafts:  # no speculative decoding (the usual case): nothing per chunk
            return
        drafts = self._drafts.get(entry.id)
        if drafts is not None and self._metrics.spec is not None:
            self._metrics.spec.count(entry, drafts.due(sent_tokens))

    def _new_entry(self, api: ApiName, received_ns: int) -> LogEntry:
        prefix = "cmpl" if api == "completions" else "chatcmpl"
        return LogEntry(
            id=f"{prefix}-sim-{next(self._ids)}",
            api=api,
            epoch_offset_ns=self.epoch_offset_ns,
            received_ns=received_ns,
        )

    def _accept(self, api: ApiName, raw: bytes) -> SimRequest:
        req = parse_request(api, raw)
        if not serves(self.cfg, req.model):
            raise RequestError(f"The model `{req.model}` does not exist.", "model_not_found", "model", status=404)
        if self.cfg.reject_stream_options and req.has_stream_options:
            raise RequestError(
                "stream_options is not supported by this server", "unsupported_parameter", "stream_options"
            )
        return req

    def _reject(self, entry: LogEntry, exc: RequestError) -> web.Response:
        self.log_rejected(entry, exc)
        body = error_body(exc.message, exc.code, exc.param)
        return web.Response(status=exc.status, body=body, content_type=_JSON)

    def _fail_early(self, request: web.Request, entry: LogEntry, fault: Fault) -> web.Response:
        """An HTTP-status fault or a reset: answered (or dropped) at once, logged at once."""
        if fault is Fault.RESET:
            resp = inject.reset(request, entry)
        else:
            resp = inject.http_fault(self.cfg, request, entry, fault)
        entry.end_ns = perf_counter_ns()
        self._log.write(entry)
        return resp

    async def _admit_and_serve(
        self, request: web.Request, req: SimRequest, plan: ResponsePlan, entry: LogEntry, fault: Fault | None
    ) -> web.StreamResponse:
        async with self.slot(entry):
            if fault is Fault.SLOW_HEADERS:
                await asyncio.sleep(self.cfg.slow_headers_ms / 1000)
            start_ns = entry.start_ns = perf_counter_ns()
            if req.stream and fault is not Fault.JSON_BODY:
                return await self._stream(request, req, plan, entry, start_ns, fault)
            if fault is Fault.STALL_RESET:  # a non-streamed request: nothing, then a reset
                await inject.stall_then_reset(self.cfg, request, entry)
                entry.end_ns = perf_counter_ns()
                return web.Response(status=500)  # never reaches the client
            return await self._respond(request, req, plan, entry, start_ns)

    async def _stream(
        self,
        request: web.Request,
        req: SimRequest,
        plan: ResponsePlan,
        entry: LogEntry,
        start_ns: int,
        fault: Fault | None,
    ) -> web.StreamResponse:
        enc = ChunkEncoder(req.api, entry.id, int(time.time()), self.cfg.model, self._eol)
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        chunks = plan.chunks(self.cfg.tokens_per_chunk)
        cut = min(self.cfg.fault_after_chunks, len(chunks)) if fault in MID_STREAM else len(chunks)
        try:
            await resp.prepare(request)
            if req.api == "chat":
                await resp.write(enc.role())
            text = _echoing(plan.token_text, inject.echoed(self.cfg, request))
            await self._write_tokens(resp, enc, plan.timing, chunks, 0, cut, entry, start_ns, text)
            if fault in MID_STREAM:
                assert fault is not None
                delay_ns = await inject.mid_stream(self.cfg, request, resp, enc, entry, fault)
                if delay_ns is None:  # the fault ended the response
                    entry.end_ns = perf_counter_ns()
                    return resp
                start_ns += delay_ns
            await self._write_tokens(resp, enc, plan.timing, chunks, cut, len(chunks), entry, start_ns, text)
            await self._end_stream(request, resp, enc, req, entry, fault)
        except ConnectionError:
            entry.status = SimStatus.DISCONNECTED
        entry.end_ns = perf_counter_ns()
        return resp

    async def _end_stream(
        self, request: web.Request, resp: web.StreamResponse, enc: ChunkEncoder, req: SimRequest, entry: LogEntry,
        fault: Fault | None,
    ) -> None:
        """The usage trailer (when asked), `data: [DONE]` (unless the no_done fault), end of body (unless done_*)."""
        if self.cfg.usage and req.include_usage:
            reported = inject.reported_completion_tokens(fault, entry.completion_tokens)
            usage = with_cached(usage_dict(req.prompt_tokens, reported, entry.reasoning_tokens), entry.cached_tokens)
            await resp.write(enc.usage(usage))
        if fault is not Fault.NO_DONE:
            await resp.write(enc.done())
        if fault in AFTER_DONE:
            assert fault is not None
            await inject.after_done(self.cfg, request, fault)
            return
        await resp.write_eof()

    async def _write_tokens(
        self,
        resp: web.StreamResponse,
        enc: ChunkEncoder,
        timing: Timing,
        chunks: Sequence[Chunk],
        start: int,
        stop: int,
        entry: LogEntry,
        start_ns: int,
        text: Callable[[int, int], str] = token_text,
    ) -> None:
        """Write chunks[start:stop], each at its absolute deadline, recording when it went.

        Chunks that are already due when one is written go out in the same write (as a
        server that fell behind, or one with no delays, sends a burst); each is logged
        with the time of the write that carried it.
        """
        last = len(chunks) - 1
        prev_due = start_ns + timing.due_offset_ns(chunks[start - 1].last_token) if start else start_ns
        j = start
        while j < stop:
            due = start_ns + timing.due_offset_ns(chunks[j].last_token)
            if self.cfg.sse_comments and j % COMMENT_EVERY == 0:
                await sleep_until((prev_due + due) // 2 if j else start_ns)
                await resp.write(enc.comment())
            await sleep_until(due)
            group = self._due_group(timing, chunks, j, stop, start_ns)
            data = b"".join(
                enc.tokens(text(c.first_token, c.tokens), reasoning=c.reasoning, last=k == last)
                for k, c in zip(range(j, j + len(group)), group)
            )
            self._count_drafts(entry, group[-1].last_token + 1)
            sent_ns = perf_counter_ns()
            await resp.write(data)
            if j == 0:
                entry.first_token_ns = perf_counter_ns()
            for chunk in group:
                self._log_chunk(entry, chunk, sent_ns)
            j += len(group)
            prev_due = start_ns + timing.due_offset_ns(chunks[j - 1].last_token)

    def _due_group(self, timing: Timing, chunks: Sequence[Chunk], j: int, stop: int, start_ns: int) -> Sequence[Chunk]:
        """chunks[j] and the chunks after it that are already due (never across an SSE comment)."""
        now = perf_counter_ns()
        end = j + 1
        while end < stop and start_ns + timing.due_offset_ns(chunks[end].last_token) <= now:
            if self.cfg.sse_comments and end % COMMENT_EVERY == 0:
                break
            end += 1
        return chunks[j:end]

    @staticmethod
    def _log_chunk(entry: LogEntry, chunk: Chunk, sent_ns: int) -> None:
        entry.chunk_ns.append(sent_ns)
        entry.chunk_tokens.append(chunk.tokens)
        entry.completion_tokens += chunk.tokens
        if chunk.reasoning:
            entry.reasoning_chunks += 1
            entry.reasoning_tokens += chunk.tokens

    async def _respond(
        self, request: web.Request, req: SimRequest, plan: ResponsePlan, entry: LogEntry, start_ns: int
    ) -> web.StreamResponse:
        """The non-streamed answer: the whole body, sent when its last token is due."""
        usage = with_cached(usage_dict(req.prompt_tokens, plan.total_tokens, plan.reasoning_tokens), entry.cached_tokens)
        body = response_body(
            req.api,
            entry.id,
            int(time.time()),
            self.cfg.model,
            plan.token_text(0, plan.reasoning_tokens),
            inject.echoed(self.cfg, request) + plan.token_text(plan.reasoning_tokens, plan.content_tokens),
            usage if self.cfg.usage else None,
        )
        resp = web.Response(body=body, content_type=_JSON)
        await sleep_until(start_ns + plan.last_due_offset_ns())
        self._count_drafts(entry, plan.total_tokens)
        sent_ns = perf_counter_ns()
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError:
            entry.status = SimStatus.DISCONNECTED
        else:
            entry.first_token_ns = perf_counter_ns()
            entry.chunk_ns.append(sent_ns)
            entry.chunk_tokens.append(plan.total_tokens)
            entry.completion_tokens = plan.total_tokens
            entry.reasoning_tokens = plan.reasoning_tokens
        entry.end_ns = perf_counter_ns()
        return resp


def _client_gone(request: web.Request) -> bool:
    """Whether the client's connection is closed (vs. the server cancelling the handler)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _echoing(text: Callable[[int, int], str], echo: str) -> Callable[[int, int], str]:
    """`text` with `echo` (--echo-auth: the request's Authorization header) before the first token."""
    if not echo:
        return text
    return lambda first, n: (f"{echo} " if first == 0 else "") + text(first, n)
