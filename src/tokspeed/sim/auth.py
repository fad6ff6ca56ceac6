"""Optional API-key check for the simulator's /v1 endpoints (`tokspeed sim --api-key KEY`).

`--basic-auth USER:PASSWORD` takes `Authorization: Basic base64(USER:PASSWORD)` as well (what a
client makes of a URL's `user:password@`); either credential is accepted when both are set.
No `Authorization` header: 401. A header that is neither: 403. With
`--leaky-errors` the 403 message echoes the header it got, as careless servers do, so tests
can check that clients keep it out of their output. /health and /version stay open.
"""

from __future__ import annotations

import hmac
from base64 import b64encode

from aiohttp import web
from aiohttp.typedefs import Middleware

from tokspeed.sim.arrival import Handler
from tokspeed.sim.config import SimConfig
from tokspeed.sim.inject import leak
from tokspeed.sim.stream import error_body


def auth_middleware(cfg: SimConfig) -> Middleware:
    """A middleware refusing /v1 requests without the configured bearer key."""
    accepted = []
    if cfg.api_key is not None:
        accepted.append(f"Bearer {cfg.api_key}".encode())
    if cfg.basic_auth is not None:
        accepted.append(b"Basic " + b64encode(cfg.basic_auth.encode()))

    @web.middleware
    async def check_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/v1/"):
            return await handler(request)
        got = request.headers.get("Authorization")
        if got is None:
            return _refuse(401, "missing API key: send 'Authorization: Bearer KEY'", "missing_api_key")
        if not any(hmac.compare_digest(got.encode(), expected) for expected in accepted):
            return _refuse(403, "invalid API key" + leak(cfg, request), "invalid_api_key")
        return await handler(request)

    return check_key


def _refuse(status: int, message: str, code: str) -> web.Response:
    body = error_body(message, code, kind="authentication_error")
    return web.Response(status=status, body=body, content_type="application/json")
