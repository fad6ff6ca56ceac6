"""The quality probe keeps secrets out of quality.json and quality.jsonl (review of d5e6b3b):
a password in the target URL, the API key, and a secret header echoed back by a server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from tokspeed.quality.client import ProbeSettings, ProbeTarget
from tokspeed.quality.probes import load_probes
from tokspeed.quality.session import label_targets, probe_targets

KEY = "sk-quality-SECRET-KEY"
PASSWORD = "hunter2-SECRET-PW"
HEADER_SECRET = "hdr-SECRET-VALUE"


@pytest.fixture
async def echo_server() -> AsyncIterator[str]:
    """Answers every other request right ('391'), the others 401 quoting every header it got."""
    seen = {"n": 0}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def chat(request: web.Request) -> web.Response:
        seen["n"] += 1
        if seen["n"] % 2:
            return web.json_response({"choices": [{"message": {"content": "391"}}],
                                      "usage": {"completion_tokens": 1}})
        told = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "x-api-key")}
        return web.Response(status=401, text=f"unauthorized: {told}")

    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.post("/v1/chat/completions", chat)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _files_text(out: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in out.iterdir())


async def test_no_secret_reaches_the_quality_files(echo_server: str, tmp_path: Path) -> None:
    probes = load_probes().select(limit=4)
    targets = [
        ProbeTarget(label=label, url=url, api_key=KEY, headers={"X-Api-Key": HEADER_SECRET})
        for label, url in label_targets([f"http://{echo_server}/v1"])
    ] + [
        ProbeTarget(label=label, url=url)  # credentials in the URL (aiohttp sends them as basic auth)
        for label, url in label_targets([f"http://user:{PASSWORD}@{echo_server}/v1"])
    ]
    result = await probe_targets(targets, probes, ProbeSettings(concurrency=1), tmp_path)
    text = _files_text(tmp_path)
    assert "401" in text  # the echoing answers were recorded
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()  # the URL's credentials, as aiohttp sends them
    assert basic not in text
    for secret in (KEY, PASSWORD, HEADER_SECRET):
        assert secret not in text
        assert secret not in orjson.dumps(result.model_dump(mode="json")).decode()


def test_a_label_made_from_the_url_has_no_password() -> None:
    (label, url), = label_targets([f"http://user:{PASSWORD}@host:8000/v1"])
    assert PASSWORD not in label and label.endswith("host:8000")
    assert PASSWORD in url  # the request itself still needs it
