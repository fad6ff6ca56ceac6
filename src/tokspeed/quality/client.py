"""Sending the probe to one OpenAI-compatible target and scoring each answer as it arrives.

Plain aiohttp, non-streamed requests (the answer is what is scored; the speed run measures
streaming): temperature 0, a fixed seed, each item's own max_tokens, a bounded number in
flight. Each item's result goes to `sink` the moment it is scored (quality.jsonl is written
as items finish). A failed request is a wrong answer with its error recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from tokspeed.backends.credentials import with_url_auth
from tokspeed.backends.http_policy import NO_REDIRECTS, HttpPolicy, is_redirect, redirect_text, redirected, refuse_proxy
from tokspeed.backends.redact import Redactor, secret_values
from tokspeed.errors import TargetError
from tokspeed.quality.checkers import passes
from tokspeed.quality.probes import ProbeItem
from tokspeed.quality.schema import ItemResult

MAX_RESPONSE_CHARS = 2000  # stored per item; enough to read what went wrong


@dataclass(frozen=True)
class ProbeTarget:
    """Where and how to send the probe."""

    label: str
    url: str  # base URL ending in /v1
    model: str | None = None
    api: str = "chat"  # chat | completions
    api_key: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeSettings:
    concurrency: int = 8
    timeout_s: float = 120.0
    seed: int = 0
    temperature: float = 0.0
    policy: HttpPolicy = field(default_factory=HttpPolicy)  # TLS (proxies and redirects: never), as the speed run's


def request_body(item: ProbeItem, model: str | None, api: str, settings: ProbeSettings) -> dict[str, Any]:
    """The deterministic request for one item."""
    body: dict[str, Any] = {
        "max_tokens": item.max_tokens,
        "temperature": settings.temperature,
        "seed": settings.seed,
        "stream": False,
    }
    if model is not None:
        body["model"] = model
    if api == "completions":
        body["prompt"] = item.rendered_prompt()
    else:
        body["messages"] = [{"role": "user", "content": item.rendered_prompt()}]
    return body


def response_text(api: str, payload: Any) -> tuple[str, int | None]:
    """The answer text and completion token count of a non-streamed response."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("response has no choices")
    choice = choices[0]
    if api == "completions":
        text = choice.get("text")
    else:
        message = choice.get("message") or {}
        text = message.get("content")
    usage = payload.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return (text if isinstance(text, str) else ""), (tokens if isinstance(tokens, int) else None)


def target_redactor(target: ProbeTarget) -> Redactor:
    """Masks the target's secrets: its API key, secret headers, the URL's password and the basic-auth
    credential aiohttp makes of the URL's user-info."""
    from base64 import b64encode
    from urllib.parse import unquote, urlsplit

    secrets = secret_values(target.url, target.api_key, target.headers)
    parts = urlsplit(target.url)
    if parts.password:
        user = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
        secrets.append(b64encode(user.encode("latin-1", "replace")).decode("ascii"))
    return Redactor(secrets)


async def run_probe(
    target: ProbeTarget,
    items: Sequence[ProbeItem],
    settings: ProbeSettings,
    sink: Callable[[ItemResult], None],
) -> tuple[list[ItemResult], str | None, float]:
    """Send every item to the target; returns (results in item order, model used, wall seconds)."""
    import aiohttp

    headers = {"Content-Type": "application/json", **target.headers}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    redact = target_redactor(target)  # servers echo what they were sent; made before the URL loses its password
    url, headers = with_url_auth(target.url, headers)  # user:password@ as a Basic header, as the speed run sends it
    target = replace(target, url=url)
    refuse_proxy(url)  # ConfigError: a proxy the environment names would not be used
    timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
    async with settings.policy.session(headers=headers, timeout=timeout, limit=settings.concurrency) as session:
        model = target.model or await discover_model(session, target.url)
        gate = asyncio.Semaphore(settings.concurrency)
        start = time.perf_counter()

        async def one(item: ProbeItem) -> ItemResult:
            async with gate:
                result = await _ask(session, target, model, item, settings, redact)
            sink(result)
            return result

        results = await asyncio.gather(*(one(item) for item in items))
    return list(results), model, time.perf_counter() - start


async def discover_model(session: Any, url: str) -> str | None:
    """The first model of GET /models; TargetError if the server cannot be reached."""
    import aiohttp

    try:
        async with session.get(url.rstrip("/") + "/models", **NO_REDIRECTS) as resp:
            if is_redirect(resp.status):
                raise redirected("GET", url.rstrip("/") + "/models", resp.status, resp.headers.get("Location"))
            if resp.status in (401, 403):
                raise TargetError(f"{url} refused the request (HTTP {resp.status})", hint="pass --api-key or set OPENAI_API_KEY")
            if resp.status != 200:
                return None
            data = orjson.loads(await resp.read())
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        from tokspeed.backends.exchange import cannot_reach

        raise cannot_reach(url, exc, "is the server running? check --target") from exc  # a TLS failure: its own hint
    except orjson.JSONDecodeError:
        return None
    models = data.get("data") if isinstance(data, dict) else None
    if models and isinstance(models[0], dict) and isinstance(models[0].get("id"), str):
        return str(models[0]["id"])
    return None


async def _ask(session: Any, target: ProbeTarget, model: str | None, item: ProbeItem, settings: ProbeSettings,
               redact: Redactor) -> ItemResult:
    import aiohttp

    path = "/completions" if target.api == "completions" else "/chat/completions"
    body = orjson.dumps(request_body(item, model, target.api, settings))
    base = ItemResult(target=target.label, id=item.id, category=item.category, lang=item.lang, correct=False)
    sent = time.perf_counter()
    try:
        async with session.post(target.url.rstrip("/") + path, data=body, **NO_REDIRECTS) as resp:
            raw = await resp.read()
            latency_ms = (time.perf_counter() - sent) * 1000
            if is_redirect(resp.status):
                error = redact(redirect_text(resp.status, resp.headers.get("Location")))[:300]
                return base.model_copy(update={"error": error, "latency_ms": latency_ms})
            if resp.status != 200:
                detail = redact(raw[:4096].decode("utf-8", "replace"))[:200]  # redact before cutting
                return base.model_copy(update={"error": f"HTTP {resp.status}: {detail}", "latency_ms": latency_ms})
            text, tokens = response_text(target.api, orjson.loads(raw))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        return base.model_copy(update={"error": redact(f"{type(exc).__name__}: {exc}")[:300]})
    return base.model_copy(
        update={
            "correct": passes(text, item.check),
            "response": text[:MAX_RESPONSE_CHARS],
            "latency_ms": latency_ms,
            "completion_tokens": tokens,
        }
    )
