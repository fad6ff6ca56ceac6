"""Server /metrics: engine recognition, reading a scrape, and the window summary of scrapes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from locations import NATIVE
from tokspeed.telemetry import server as srv
from tokspeed.telemetry.engines import detect_engine
from tokspeed.telemetry.summary import Mark, Setup, summarise

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_running{engine="1",model_name="m"} 10.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} {queries}
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} {hits}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} {preempted}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} {generated}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
"""


def vllm_text(queries: int = 1000, hits: int = 250, preempted: int = 2, generated: int = 5000) -> str:
    return (VLLM.replace("{queries}", str(queries)).replace("{hits}", str(hits))
            .replace("{preempted}", str(preempted)).replace("{generated}", str(generated)))


def read(text: str) -> dict[str, object]:
    engine = detect_engine(srv.sample_values(text))
    assert engine is not None
    return {"engine": engine.engine, **srv.reading(engine, srv.sample_values(text, engine.names, engine.maxed))}


def test_vllm_sums_label_sets_and_takes_the_fullest_kv_cache() -> None:
    r = read(vllm_text())
    assert r["engine"] == "vllm"
    assert (r["running"], r["waiting"], r["kv_cache_usage_pct"]) == (22.0, 3.0, 75.0)
    values = r["values"]
    assert isinstance(values, dict)
    assert values["vllm:prefix_cache_hits_total"] == 250.0
    assert "vllm:num_requests_waiting_by_reason" not in values  # a near name is not taken for the real one
    assert not any("bucket" in k or "created" in k for k in values)


def test_older_vllm_names_are_read_too() -> None:
    text = """vllm:num_requests_running{model_name="m"} 4
vllm:num_requests_waiting{model_name="m"} 1
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:num_requests_swapped{model_name="m"} 0
"""
    r = read(text)
    assert (r["engine"], r["running"], r["waiting"], r["kv_cache_usage_pct"]) == ("vllm", 4.0, 1.0, 25.0)


@pytest.mark.parametrize(
    ("text", "engine", "running", "waiting", "kv"),
    [
        (('# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 7.0\n'
          'sglang:num_queue_reqs{model_name="m"} 2.0\nsglang:token_usage{model_name="m"} 0.28\n'
          'sglang:cache_hit_rate{model_name="m"} 0.5\n'), "sglang", 7.0, 2.0, 28.0),
        (("# TYPE tgi_queue_size gauge\ntgi_queue_size 4\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 16\n"
          "# TYPE tgi_request_count counter\ntgi_request_count 120\n"), "tgi", 16.0, 4.0, None),
        (("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
          "llamacpp:requests_deferred 3\nllamacpp:kv_cache_usage_ratio 0.63\n"), "llamacpp", 1.0, 3.0, 63.0),
        (('tokspeed_sim:num_requests_running{model_name="s"} 2\ntokspeed_sim:num_requests_waiting{model_name="s"} 6\n'
          'tokspeed_sim:kv_cache_usage_perc{model_name="s"} 0.5\n'), "tokspeed-sim", 2.0, 6.0, 50.0),
    ],
)
def test_each_engine_is_recognised_and_read(text: str, engine: str, running: float, waiting: float, kv: float | None) -> None:
    r = read(text)
    assert (r["engine"], r["running"], r["waiting"]) == (engine, running, waiting)
    assert r["kv_cache_usage_pct"] == (None if kv is None else pytest.approx(kv))


def test_llama_server_metrics_as_served_are_read() -> None:
    # was: tokspeed kept only prompt_tokens_total and tokens_predicted_total of llama-server's scrape and
    # looked for kv_cache_usage_ratio / kv_cache_tokens, which the current server no longer serves.
    # Recorded from llama-server (llama-cpp-python 0.3.36's llama.cpp) with --metrics.

    text = (NATIVE / "llamacpp_server_metrics.txt").read_text()
    r = read(text)
    assert (r["engine"], r["running"], r["waiting"], r["kv_cache_usage_pct"]) == ("llamacpp", 0.0, 0.0, None)
    assert r["values"] == {
        "llamacpp:prompt_tokens_total": 23.0, "llamacpp:prompt_tokens_cached_total": 14.0,
        "llamacpp:prompt_seconds_total": 0.002454, "llamacpp:tokens_predicted_total": 12.0,
        "llamacpp:tokens_predicted_seconds_total": 0.002306, "llamacpp:n_decode_total": 12.0,
        "llamacpp:n_busy_slots_per_decode": 1.0, "llamacpp:requests_processing": 0.0,
        "llamacpp:requests_deferred": 0.0, "llamacpp:spec_decode_num_drafts_total": 0.0,
        "llamacpp:spec_decode_num_draft_tokens_total": 0.0, "llamacpp:spec_decode_num_accepted_tokens_total": 0.0,
    }


def test_triton_metrics_as_served_are_read() -> None:
    # Recorded from Triton Inference Server 2.51 (nvidia-pytriton 0.7.0) on its metrics port after 7 requests
    # to a decoupled model; before, tokspeed knew none of its names and reported no server metrics.

    text = (NATIVE / "triton_server_metrics.txt").read_text()
    r = read(text)
    assert (r["engine"], r["running"], r["waiting"], r["kv_cache_usage_pct"]) == ("triton", None, 0.0, None)
    assert r["values"] == {
        "nv_inference_request_success_total": 7.0, "nv_inference_request_failure_total": 0.0,
        "nv_inference_count_total": 7.0, "nv_inference_exec_count_total": 7.0,
        "nv_inference_request_duration_us_total": 5410.0, "nv_inference_queue_duration_us_total": 219.0,
        "nv_inference_compute_infer_duration_us_total": 4474.0, "nv_inference_pending_request_count": 0.0,
    }


def test_a_counter_served_without_total_is_kept_under_its_total_name() -> None:
    r = read("# TYPE tgi_request_count counter\ntgi_request_count 120\ntgi_queue_size 0\n")
    assert r["values"] == {"tgi_request_count_total": 120.0, "tgi_queue_size": 0.0}


def test_unknown_metrics_name_no_engine() -> None:
    assert detect_engine(srv.sample_values("process_cpu_seconds_total 3\npython_info 1\n")) is None


def test_not_prometheus_text_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        srv.sample_values("<html><body>Not Found</body></html>")


def test_summary_of_scrapes_uses_counter_deltas_and_leaves_out_other_samples() -> None:
    engine = detect_engine(["vllm:num_requests_running"])
    assert engine is not None
    scrapes = [vllm_text(1000, 250, 2, 5000), vllm_text(1400, 350, 5, 9000), vllm_text(2000, 550, 5, 12000)]
    lines = [{"kind": "server", "t_ns": 10 + i, **read(t)} for i, t in enumerate(scrapes)]
    lines.append({"kind": "server", "t_ns": 13, "ok": False, "error": "cannot connect"})
    lines.append({"kind": "server", "t_ns": 99, **read(vllm_text(9999, 0, 0, 0))})  # after the window
    setup = Setup(interval_s=0.25, server_url="http://h/metrics", engine=engine)
    s = summarise(lines, Mark(t_ns=10, cpu_s=0), Mark(t_ns=13, cpu_s=0), setup).server
    assert s is not None
    assert (s.engine, s.scrapes, s.errors) == ("vllm", 3, 1)
    assert s.running.max == 22.0 and s.waiting.mean == 3.0 and s.kv_cache_usage_pct.max == 75.0
    assert s.prefix_cache_hit_rate == (550 - 250) / (2000 - 1000)
    assert s.preemptions == 3.0
    # the TTFT histogram is read only as its _sum and _count (constant in these scrapes), its buckets left out
    assert s.metrics == {"vllm:generation_tokens_total": 7000.0, "vllm:time_to_first_token_seconds_sum": 0.0,
                         "vllm:time_to_first_token_seconds_count": 0.0}


def test_a_counter_that_went_down_has_no_delta() -> None:
    engine = detect_engine(["vllm:num_requests_running"])
    assert engine is not None
    lines = [{"kind": "server", "t_ns": i, **read(vllm_text(1000 - i, 10, 9 - i, 100))} for i in range(3)]
    s = summarise(lines, Mark(t_ns=0, cpu_s=0), Mark(t_ns=5, cpu_s=0), Setup(0.25, server_url="u", engine=engine)).server
    assert s is not None and s.prefix_cache_hit_rate is None and s.preemptions is None


def test_default_url_is_the_target_root_and_credentials_stay_on_its_origin() -> None:
    assert srv.default_metrics_url("http://10.0.0.5:8000/v1") == "http://10.0.0.5:8000/metrics"
    assert srv.default_metrics_url("https://gw.example/llm/v1/") == "https://gw.example/llm/metrics"
    assert srv.default_metrics_url("embedded:tiny") is None and srv.default_metrics_url(None) is None
    assert srv.same_origin("http://h:8000/metrics", "http://h:8000/v1")
    assert not srv.same_origin("http://other:9400/metrics", "http://h:8000/v1")


@pytest.fixture
async def metrics_server() -> AsyncIterator[str]:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=vllm_text())

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_probe_and_scrape_a_live_endpoint(metrics_server: str) -> None:
    async with aiohttp.ClientSession() as session:
        endpoint, note = await srv.probe(session, metrics_server + "/metrics", {})
        assert note is None and endpoint is not None and endpoint.engine.engine == "vllm"
        fields = await srv.scrape(session, endpoint)
        assert fields["ok"] and fields["running"] == 22.0
        missing, note = await srv.probe(session, metrics_server + "/nothing", {})
        assert missing is None and note is not None and "HTTP 404" in note
        gone = srv.Endpoint(url="http://127.0.0.1:9/metrics", engine=endpoint.engine, headers={})
        assert await srv.scrape(session, gone) == {"ok": False, "error": "cannot connect"}
