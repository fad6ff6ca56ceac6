"""--profile's pieces: finding the trace directory in a server's answers, the probe, a failing server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from tokspeed.errors import ConfigError
from tokspeed.reports.telemetry_text import server_profile_line
from tokspeed.runner.profiling import ServerProfiler, check
from tokspeed.telemetry import profiler as http
from tokspeed.telemetry.schema import ServerProfile


def test_trace_dir_from_json_keys_vllm_config_text_or_nothing() -> None:
    assert http.trace_dir_in('{"message": "ok", "output_dir": "/tmp/sglang"}') == "/tmp/sglang"
    assert http.trace_dir_in('{"profiler_config": {"profiler": "torch", "torch_profiler_dir": "/traces"}}') == "/traces"
    # vLLM's /server_info: the config printed as one string
    info = '{"vllm_config": "model=\'m\', profiler_config=ProfilerConfig(profiler=\'torch\', torch_profiler_dir=\'/mnt/t\')"}'
    assert http.trace_dir_in(info) == "/mnt/t"
    assert http.trace_dir_in("Start profiling.") is None and http.trace_dir_in("") is None
    assert http.trace_dir_from_env({"SGLANG_TORCH_PROFILER_DIR": "/s"}) == "/s" and http.trace_dir_from_env({}) is None
    assert http.server_root("http://h:8000/v1/") == "http://h:8000"


def test_a_target_that_is_no_http_server_is_refused() -> None:
    with pytest.raises(ConfigError, match="--profile calls an HTTP server"):
        ServerProfiler("embedded:tiny", {}, str)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[dict[str, Handler]], Awaitable[str]]


@pytest.fixture
async def server() -> AsyncIterator[Serve]:
    runners: list[web.AppRunner] = []

    async def start(routes: dict[str, Handler]) -> str:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_post(path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for r in runners:
        await r.cleanup()


async def test_the_probe_runs_no_handler_and_tells_absent_from_present(server: Serve) -> None:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="Start profiling.")

    root = await server({"/start_profile": handler})
    async with aiohttp.ClientSession() as session:
        assert await http.probe(session, root, {}) == 405  # the route exists (for POST): not started
        assert await http.probe(session, "http://127.0.0.1:9", {}) is None
    await check(root + "/v1", {})
    assert hits == []
    bare = await server({})
    with pytest.raises(ConfigError, match=r"has no profiler endpoints \(/start_profile answered HTTP 404\)"):
        await check(bare + "/v1", {})


async def test_a_failing_stop_is_recorded_and_noted_and_a_key_never_shown(server: Serve) -> None:
    async def start(request: web.Request) -> web.Response:
        return web.Response(text="started with key sk-secret-123456")

    async def stop(request: web.Request) -> web.Response:
        return web.Response(status=500, text="trace flush failed for sk-secret-123456")

    root = await server({"/start_profile": start, "/stop_profile": stop})
    p = ServerProfiler(root + "/v1", {"Authorization": "Bearer sk-secret-123456"},
                       lambda text: text.replace("sk-secret-123456", "***"))
    await p.start()
    assert p.record.start_http_status == 200 and p.record.started_at is not None
    await p.stop()
    r = p.record
    assert (r.status, r.stop_http_status, r.stopped_at) == ("failed", 500, None)
    assert r.message == "/stop_profile: HTTP 500: trace flush failed for ***"
    assert p.notes == ["--profile: /stop_profile: HTTP 500: trace flush failed for ***; the measurement is unaffected"]
    await p.stop()  # nothing running: no second call


async def test_a_start_refused_as_absent_is_a_usage_error(server: Serve) -> None:
    async def gone(request: web.Request) -> web.Response:
        return web.Response(status=405)

    root = await server({"/start_profile": gone})
    p = ServerProfiler(root, {}, str)
    with pytest.raises(ConfigError, match="HTTP 405"):
        await p.start()
    assert p.record.status == "failed"


def test_summary_line_says_where_the_trace_is_or_why_there_is_none() -> None:
    done = ServerProfile(url="http://h", status="profiled", started_at="a", stopped_at="b", trace_dir="/t", message=None)
    assert server_profile_line(done) == ["Server profile a → b: the server wrote its trace under /t (on its machine)"]
    failed = ServerProfile(url="http://h", status="failed", message="/stop_profile: no answer within 1800 s")
    assert server_profile_line(failed) == ["Server profile: failed (/stop_profile: no answer within 1800 s)"]
    assert server_profile_line(None) == []
