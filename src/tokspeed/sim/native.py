"""The simulator speaking servers' native streaming APIs, with their server-timing fields set to the truth.

Routes (beside the OpenAI ones): TGI `POST /generate_stream` (and `/generate`, `GET /info`),
Triton `POST /v2/models/{model}/generate_stream` (and `/generate`, `GET /v2/models/{model}`),
Ollama `POST /api/generate`, `POST /api/chat` (`GET /api/tags`), llama.cpp `POST /completion`
(`GET /props`), SGLang `POST /generate` (`GET /get_model_info`). `POST /generate` serves TGI's
body (`inputs`) or SGLang's (`text`).

Each request is timed exactly as an OpenAI one (same FIFO gate, same absolute schedule, same log
line, one event per chunk) and its reported timings are what the simulator actually did:
queue = service start − arrival, prefill = first token chunk written − service start, decode =
last token chunk written − first, total = final event − arrival. Ollama reports them as integer
nanoseconds (the queue as `load_duration`, where Ollama counts the wait for a runner), llama.cpp
as float milliseconds (no queue field: llama.cpp has none). Every response carries
`X-Request-Id: <log id>` so a client's record can be joined with the log. Faults are not injected
on these routes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

from tokspeed.sim.arrival import arrival_of
from tokspeed.sim.log import LogEntry, SimStatus
from tokspeed.sim.request import RequestError, SimRequest
from tokspeed.sim.schedule import ResponsePlan, make_plan, sleep_until
from tokspeed.sim.service import SimService
from tokspeed.sim.vocab import token_text
from tokspeed.version import __version__
from tokspeed.workload.tokens import approx_token_count

NS_PER_MS = 1_000_000
_JSON = "application/json"


@dataclass(slots=True)
class Ask:
    """What a native request body asks for."""

    prompt: str
    max_tokens: int | None
    stream: bool
    model: object = None


@dataclass(slots=True)
class Done:
    """The true timings of one served request, in ns, and its counts."""

    model: str
    prompt_tokens: int
    output_tokens: int = 0
    queue_ns: int = 0
    prefill_ns: int = 0
    decode_ns: int = 0
    total_ns: int = 0


class Wire(ABC):
    """One protocol's bytes; subclasses override what differs."""

    name = ""
    content_type = "text/event-stream"
    checks_model = False

    @abstractmethod
    def ask(self, body: dict[str, Any]) -> Ask:
        ...

    @abstractmethod
    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        ...

    def final(self, done: Done) -> bytes:
        return b""

    @abstractmethod
    def whole(self, text: str, done: Done) -> bytes:
        ...

    def error(self, message: str) -> bytes:
        return orjson.dumps({"error": message})


def _sse(obj: dict[str, Any], prefix: bytes = b"data: ") -> bytes:
    return prefix + orjson.dumps(obj) + b"\n\n"


def _ms(ns: int) -> float:
    return ns / NS_PER_MS


class TGIWire(Wire):
    name = "tgi"

    def ask(self, body: dict[str, Any]) -> Ask:
        params = body.get("parameters") or {}
        return Ask(_text(body, "inputs"), _max(params, "max_new_tokens"), body.get("stream") is True)

    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        obj: dict[str, Any] = {"index": count, "token": {"id": count, "text": text, "logprob": -0.5, "special": False},
                               "generated_text": None, "details": None}
        if last:
            obj["details"] = {"finish_reason": "length", "generated_tokens": count, "seed": None,
                              "input_length": done.prompt_tokens}
            obj["generated_text"] = token_text(0, count)
        return _sse(obj, b"data:")  # TGI (axum) writes no space after the colon

    def whole(self, text: str, done: Done) -> bytes:
        details = {"finish_reason": "length", "generated_tokens": done.output_tokens, "seed": None}
        return orjson.dumps({"generated_text": text, "details": details})


class TritonWire(Wire):
    name = "triton"
    checks_model = True

    def ask(self, body: dict[str, Any]) -> Ask:
        return Ask(_text(body, "text_input"), _max(body, "max_tokens"), body.get("stream") is True)

    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        return _sse({"model_name": done.model, "model_version": "1", "sequence_end": False, "sequence_id": 0,
                     "sequence_start": False, "text_output": text})

    def whole(self, text: str, done: Done) -> bytes:
        return orjson.dumps({"model_name": done.model, "model_version": "1", "text_output": text})


class OllamaWire(Wire):
    content_type = "application/x-ndjson"
    checks_model = True

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.name = "ollama-chat" if chat else "ollama"

    def ask(self, body: dict[str, Any]) -> Ask:
        options = body.get("options") or {}
        if self.chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError("messages must be a non-empty list", "invalid_type", "messages")
            prompt = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        else:
            prompt = _text(body, "prompt")
        return Ask(prompt, _max(options, "num_predict"), body.get("stream", True) is not False, body.get("model"))

    def _part(self, text: str, done: Done) -> dict[str, Any]:
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        obj: dict[str, Any] = {"model": done.model, "created_at": created}
        if self.chat:
            obj["message"] = {"role": "assistant", "content": text}
        else:
            obj["response"] = text
        return obj

    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        return orjson.dumps({**self._part(text, done), "done": False}) + b"\n"

    def _totals(self, done: Done) -> dict[str, Any]:
        return {"done": True, "done_reason": "length", "total_duration": done.total_ns, "load_duration": done.queue_ns,
                "prompt_eval_count": done.prompt_tokens, "prompt_eval_duration": done.prefill_ns,
                "eval_count": done.output_tokens, "eval_duration": done.decode_ns}

    def final(self, done: Done) -> bytes:
        return orjson.dumps({**self._part("", done), **self._totals(done)}) + b"\n"

    def whole(self, text: str, done: Done) -> bytes:
        return orjson.dumps({**self._part(text, done), **self._totals(done)})


class LlamaCppWire(Wire):
    name = "llamacpp"

    def ask(self, body: dict[str, Any]) -> Ask:
        return Ask(_text(body, "prompt"), _max(body, "n_predict"), body.get("stream") is True)

    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        return _sse({"content": text, "stop": False, "id_slot": 0, "multimodal": False, "index": 0})

    def _totals(self, done: Done) -> dict[str, Any]:
        prompt_ms, predicted_ms = _ms(done.prefill_ns), _ms(done.decode_ns)
        p, n = done.prompt_tokens, done.output_tokens
        timings = {
            "prompt_n": p, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / p if p else 0.0,
            "prompt_per_second": 1e3 * p / prompt_ms if prompt_ms else 0.0,
            "predicted_n": n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / n if n else 0.0,
            "predicted_per_second": 1e3 * n / predicted_ms if predicted_ms else 0.0,
        }
        return {"id_slot": 0, "stop": True, "model": done.model, "tokens_predicted": n, "tokens_evaluated": p,
                "stop_type": "limit", "stopping_word": "", "truncated": False, "timings": timings}

    def final(self, done: Done) -> bytes:
        return _sse({"content": "", **self._totals(done)})

    def whole(self, text: str, done: Done) -> bytes:
        return orjson.dumps({"content": text, **self._totals(done)})

    def error(self, message: str) -> bytes:
        return orjson.dumps({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})


class SGLangWire(Wire):
    name = "sglang"

    def ask(self, body: dict[str, Any]) -> Ask:
        params = body.get("sampling_params") or {}
        return Ask(_text(body, "text"), _max(params, "max_new_tokens"), body.get("stream") is True)

    def _meta(self, count: int, last: bool, done: Done) -> dict[str, Any]:
        meta: dict[str, Any] = {"id": "sglang", "finish_reason": {"type": "length", "length": count} if last else None,
                                "prompt_tokens": done.prompt_tokens, "completion_tokens": count, "cached_tokens": 0}
        if last:
            meta["e2e_latency"] = done.total_ns / 1e9
        return meta

    def token(self, text: str, count: int, last: bool, done: Done) -> bytes:
        return _sse({"text": token_text(0, count), "meta_info": self._meta(count, last, done), "index": 0})

    def final(self, done: Done) -> bytes:
        return b"data: [DONE]\n\n"

    def whole(self, text: str, done: Done) -> bytes:
        return orjson.dumps({"text": text, "meta_info": self._meta(done.output_tokens, True, done), "index": 0})


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise RequestError(f"missing required field: {name} (a string)", "missing_field", name, status=422)
    return value


def _max(obj: Any, name: str) -> int | None:
    value = obj.get(name) if isinstance(obj, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{name} must be a positive integer", "invalid_value", name, status=422)
    return value


class NativeSim:
    """The native routes of one simulator; shares its service's gate, schedule, metrics and log."""

    def __init__(self, service: SimService) -> None:
        self.svc = service
        self.cfg = service.cfg
        self.tgi, self.triton, self.llamacpp, self.sglang = TGIWire(), TritonWire(), LlamaCppWire(), SGLangWire()
        self.ollama, self.ollama_chat = OllamaWire(chat=False), OllamaWire(chat=True)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/generate_stream", self._tgi_stream),
            web.post("/generate", self._generate),
            web.get("/info", self._tgi_info),
            web.post("/v2/models/{model}/generate_stream", self._triton_stream),
            web.post("/v2/models/{model}/generate", self._triton_whole),
            web.get("/v2/models/{model}", self._triton_info),
            web.post("/api/generate", self._ollama),
            web.post("/api/chat", self._ollama_chat),
            web.get("/api/tags", self._ollama_tags),
            web.post("/completion", self._llamacpp),
            web.get("/props", self._llamacpp_props),
            web.get("/get_model_info", self._sglang_info),
        ]

    # discovery ---------------------------------------------------------------------------
    async def _tgi_info(self, request: web.Request) -> web.Response:
        return _json({"model_id": self.cfg.model, "version": f"tokspeed-sim {__version__}"})

    async def _triton_info(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.cfg.model:
            return _json({"error": f"Request for unknown model: '{request.match_info['model']}' is not found"}, 404)
        return _json({"name": self.cfg.model, "versions": ["1"], "platform": "ensemble"})

    async def _ollama_tags(self, request: web.Request) -> web.Response:
        return _json({"models": [{"name": self.cfg.model, "model": self.cfg.model, "size": 0}]})

    async def _llamacpp_props(self, request: web.Request) -> web.Response:
        return _json({"model_path": f"/models/{self.cfg.model}", "total_slots": self.cfg.max_concurrency or 1,
                      "build_info": f"tokspeed-sim {__version__}"})

    async def _sglang_info(self, request: web.Request) -> web.Response:
        return _json({"model_path": self.cfg.model, "is_generation": True})

    # generation ------------------------------------------------------------------------------
    async def _tgi_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.tgi, stream=True)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        """TGI's `/generate` (body with `inputs`, never streamed) or SGLang's (body with `text`)."""
        body = await request.read()
        wire: Wire = self.tgi if b'"inputs"' in body else self.sglang
        return await self._serve(request, wire, stream=False if wire is self.tgi else None, raw=body)

    async def _triton_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.triton, stream=True)

    async def _triton_whole(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.triton, stream=False)

    async def _ollama(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.ollama)

    async def _ollama_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.ollama_chat)

    async def _llamacpp(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.llamacpp)

    async def _serve(
        self, request: web.Request, wire: Wire, stream: bool | None = None, raw: bytes | None = None
    ) -> web.StreamResponse:
        """Parse, queue, answer on the simulator's schedule; one log line whatever happens."""
        svc = self.svc
        entry = LogEntry(id=svc.new_id(wire.name), api=wire.name,
                         epoch_offset_ns=svc.epoch_offset_ns, received_ns=arrival_of(request))
        try:
            ask = self._ask(wire, raw if raw is not None else await request.read(), request)
        except RequestError as exc:
            svc.log_rejected(entry, exc)
            return web.Response(status=exc.status, body=wire.error(exc.message), content_type=_JSON,
                                headers={"X-Request-Id": entry.id})
        streamed = ask.stream if stream is None else stream
        req = SimRequest(api="completions", stream=streamed, has_stream_options=False, include_usage=False,
                         max_tokens=ask.max_tokens, prompt_tokens=approx_token_count(ask.prompt))
        plan = make_plan(self.cfg, req)
        entry.stream, entry.prompt_tokens, entry.planned_tokens = streamed, req.prompt_tokens, plan.total_tokens
        entry.prefill_ns, entry.itl_ns = plan.timing.prefill_ns, plan.timing.itl_ns
        done = Done(model=self.cfg.model, prompt_tokens=req.prompt_tokens)
        async with svc.tracked(request, entry), svc.slot(entry):
            entry.start_ns = perf_counter_ns()
            if streamed:
                return await self._stream(request, wire, plan, entry, done)
            return await self._whole(request, wire, plan, entry, done)

    def _ask(self, wire: Wire, raw: bytes, request: web.Request) -> Ask:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RequestError(f"request body is not valid JSON: {exc}", "invalid_json") from exc
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object", "invalid_json")
        ask = wire.ask(body)
        model = request.match_info.get("model", ask.model)
        if wire.checks_model and model != self.cfg.model:
            raise RequestError(f"model '{model}' not found", "model_not_found", "model", status=404)
        return ask

    async def _stream(
        self, request: web.Request, wire: Wire, plan: ResponsePlan, entry: LogEntry, done: Done
    ) -> web.StreamResponse:
        assert entry.start_ns is not None
        start_ns = entry.start_ns
        resp = web.StreamResponse(headers={"Content-Type": wire.content_type, "Cache-Control": "no-cache",
                                           "X-Request-Id": entry.id})
        chunks = plan.chunks(self.cfg.tokens_per_chunk)
        try:
            await resp.prepare(request)
            for i, chunk in enumerate(chunks):
                await sleep_until(start_ns + plan.timing.due_offset_ns(chunk.last_token))
                last = i == len(chunks) - 1
                count = entry.completion_tokens + chunk.tokens
                if last:  # SGLang's last event carries the server's end-to-end time
                    done.total_ns = perf_counter_ns() - entry.received_ns
                data = wire.token(token_text(chunk.first_token, chunk.tokens), count, last, done)
                sent_ns = perf_counter_ns()
                await resp.write(data)
                if i == 0:
                    entry.first_token_ns = perf_counter_ns()
                SimService._log_chunk(entry, chunk, sent_ns)
            _true_timings(entry, done)
            final = wire.final(done)
            if final:
                await resp.write(final)
            await resp.write_eof()
        except ConnectionError:
            entry.status = SimStatus.DISCONNECTED
        entry.end_ns = perf_counter_ns()
        return resp

    async def _whole(
        self, request: web.Request, wire: Wire, plan: ResponsePlan, entry: LogEntry, done: Done
    ) -> web.StreamResponse:
        assert entry.start_ns is not None
        await sleep_until(entry.start_ns + plan.last_due_offset_ns())
        sent_ns = perf_counter_ns()
        entry.chunk_ns.append(sent_ns)
        entry.chunk_tokens.append(plan.total_tokens)
        entry.completion_tokens = plan.total_tokens
        _true_timings(entry, done)
        done.prefill_ns = plan.timing.prefill_ns  # one body: report the schedule it kept, as a server would
        done.decode_ns = plan.last_due_offset_ns() - plan.timing.prefill_ns
        resp = web.Response(body=wire.whole(token_text(0, plan.total_tokens), done), content_type=_JSON,
                            headers={"X-Request-Id": entry.id})
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError:
            entry.status = SimStatus.DISCONNECTED
        else:
            entry.first_token_ns = perf_counter_ns()
        entry.end_ns = perf_counter_ns()
        return resp


def _true_timings(entry: LogEntry, done: Done) -> None:
    """What the simulator actually did, from its own log of this request."""
    assert entry.start_ns is not None and entry.chunk_ns
    done.output_tokens = entry.completion_tokens
    done.queue_ns = entry.start_ns - entry.received_ns
    done.prefill_ns = entry.chunk_ns[0] - entry.start_ns
    done.decode_ns = entry.chunk_ns[-1] - entry.chunk_ns[0]
    done.total_ns = perf_counter_ns() - entry.received_ns


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=_JSON)
