"""Live control of a running simulator (`tokspeed sim --control`): change its timing on command.

`POST /sim/control` with a JSON object of timing fields (`ttft_ms`, `itl_ms`,
`per_prompt_token_us`, `output_tokens`, `tokens_per_chunk`) validates the new
values with `SimConfig` and swaps the service's config for the updated one;
requests planned after that use it (requests already streaming keep their
plan). `GET /sim/control` returns the current values. The routes exist only
when the server was started with `--control`, so a benchmark's simulator cannot
be changed by accident.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from tokspeed.sim.config import SimConfig
from tokspeed.sim.service import SimService

CONTROLLABLE = ("ttft_ms", "itl_ms", "per_prompt_token_us", "output_tokens", "tokens_per_chunk")
_JSON = "application/json"


def current(cfg: SimConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in CONTROLLABLE}


def updated(cfg: SimConfig, changes: Any) -> SimConfig:
    """`cfg` with `changes` applied and validated; ValueError says what is wrong."""
    if not isinstance(changes, dict) or not changes:
        raise ValueError(f"send a JSON object with some of {', '.join(CONTROLLABLE)}")
    unknown = sorted(set(changes) - set(CONTROLLABLE))
    if unknown:
        raise ValueError(f"cannot control {', '.join(unknown)}; controllable: {', '.join(CONTROLLABLE)}")
    try:
        return SimConfig.model_validate({**cfg.model_dump(), **changes})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')}") from None


def control_routes(service: SimService) -> list[web.RouteDef]:
    async def show(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(current(service.cfg)), content_type=_JSON)

    async def change(request: web.Request) -> web.Response:
        try:
            service.cfg = updated(service.cfg, orjson.loads(await request.read()))
        except (ValueError, orjson.JSONDecodeError) as exc:
            return web.Response(status=400, body=orjson.dumps({"error": str(exc)}), content_type=_JSON)
        return web.Response(body=orjson.dumps(current(service.cfg)), content_type=_JSON)

    return [web.get("/sim/control", show), web.post("/sim/control", change)]
