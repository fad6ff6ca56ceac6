"""Scrape a server's Prometheus endpoint and reduce each scrape to the figures that explain latency.

At start, `probe` fetches the endpoint once, parses it whole and recognises the engine
(engines.py). During the run each scrape is first cut down to the engine's known names by a
cheap line filter, and only that is parsed (prometheus_client's parser), so a vLLM scrape
of several hundred histogram lines costs the client little. Values of one name are summed over
its label sets (max for fractions).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from tokspeed.backends.http_policy import NO_REDIRECTS, is_redirect, redirect_text
from tokspeed.telemetry.engines import KNOWN_ENGINES, EngineMetrics, detect_engine, first_present

SCRAPE_TIMEOUT_S = 5.0


def default_metrics_url(target: str | None) -> str | None:
    """The target's root plus /metrics (http://h:8000/v1 -> http://h:8000/metrics); None if not HTTP."""
    if not target or not target.startswith(("http://", "https://")):
        return None
    parts = urlsplit(target)
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path + "/metrics", "", ""))


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (only then may the target's credentials go along)."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def sample_values(text: str, keep: frozenset[str] | None = None, maxed: frozenset[str] = frozenset(),
                  by_position: frozenset[str] = frozenset()) -> dict[str, float]:
    """{sample name: value} of a Prometheus text scrape, label sets combined; only `keep` if given.

    A name in `by_position` is kept once per value of its `position` label, as `name[position]`
    (vLLM's accepted draft tokens per position), each summed over the other labels.
    Raises ValueError when the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    body = text if keep is None else _only(text, keep)
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            name = s.name if keep is None else _kept_name(s.name, keep)
            if name is None or math.isnan(s.value):
                continue
            if name in by_position:
                name = f"{name}[{s.labels.get('position', '')}]"
            if name in out:
                out[name] = max(out[name], s.value) if name in maxed else out[name] + s.value
            else:
                out[name] = float(s.value)
    return out


def _kept_name(name: str, keep: frozenset[str]) -> str | None:
    """`name` as `keep` spells it: a counter may be served with or without its `_total`."""
    if name in keep:
        return name
    if name + "_total" in keep:
        return name + "_total"
    return None


def _only(text: str, keep: frozenset[str]) -> str:
    """The sample lines of a scrape whose name is in `keep`, found by one compiled regex.

    A vLLM scrape is thousands of histogram lines; a Python loop over them would stall the event
    loop for a millisecond or more at every scrape, while the regex (anchored on the names'
    common prefix) takes a fraction of that, and the parser then sees a few dozen lines. HELP and
    TYPE lines are dropped: the values do not need them.
    """
    return "\n".join(m.group(1).rstrip("\r") for m in _line_pattern(keep).finditer("\n" + text)) + "\n"


@functools.lru_cache(maxsize=16)
def _line_pattern(keep: frozenset[str]) -> re.Pattern[str]:
    """`\n<name>{...} value` or `\n<name> value` for the kept names; a counter also without its `_total` (TGI)."""
    names = sorted(keep | {n[: -len("_total")] for n in keep if n.endswith("_total")})
    prefix = os.path.commonprefix(names)
    rest = "|".join(re.escape(n[len(prefix):]) for n in names)
    return re.compile(rf"\n({re.escape(prefix)}(?:{rest})[{{ \t][^\n]*)")


def reading(engine: EngineMetrics, values: dict[str, float]) -> dict[str, Any]:
    """The fields of one `server` line of telemetry.jsonl from a scrape's values."""
    kv = first_present(engine.kv_usage, values)
    return {
        "ok": True,
        "running": first_present(engine.running, values),
        "waiting": first_present(engine.waiting, values),
        "kv_cache_usage_pct": None if kv is None else kv * 100,
        "values": values,
    }


@dataclass(frozen=True)
class Endpoint:
    """A metrics endpoint that answered at start, and the engine it belongs to."""

    url: str
    engine: EngineMetrics
    headers: dict[str, str]


async def fetch(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    """GET the endpoint's text; raises OSError-like errors (aiohttp.ClientError, TimeoutError) and ValueError for non-200."""
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S),
                           **NO_REDIRECTS) as resp:
        if is_redirect(resp.status):
            raise ValueError(redirect_text(resp.status, resp.headers.get("Location")))
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}")
        return await resp.text(errors="replace")


async def probe(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[Endpoint | None, str | None]:
    """Fetch once: (the endpoint, None) when it serves Prometheus text of a known engine, else (None, why)."""
    try:
        text = await fetch(session, url, headers)
        names = sample_values(text).keys()
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, UnicodeError) as exc:
        return None, f"no server metrics: {url} did not answer with Prometheus text ({why(exc)})"
    if not names:
        return None, f"no server metrics: {url} served no Prometheus samples"
    engine = detect_engine(names)
    if engine is None:
        return None, f"no server metrics: {url} serves no metric tokspeed knows ({KNOWN_ENGINES})"
    return Endpoint(url=url, engine=engine, headers=headers), None


async def scrape(session: aiohttp.ClientSession, endpoint: Endpoint) -> dict[str, Any]:
    """One scrape as the fields of a `server` line; a failure is a line with `ok: false`, never an exception."""
    try:
        text = await fetch(session, endpoint.url, endpoint.headers)
        values = sample_values(text, endpoint.engine.names, endpoint.engine.maxed, endpoint.engine.by_position)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, UnicodeError) as exc:
        return {"ok": False, "error": why(exc)}
    return reading(endpoint.engine, values)


def why(exc: BaseException) -> str:
    """A failed fetch in a few words."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "cannot connect"
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within {SCRAPE_TIMEOUT_S:g} s"
    if isinstance(exc, aiohttp.ClientError):
        return type(exc).__name__
    return str(exc)[:200] or type(exc).__name__
