"""Monitor --server-metrics: histogram deltas -> quantiles, counter resets, server alerts, exporter, sim histograms."""

from __future__ import annotations

import math
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tokspeed.errors import ConfigError
from tokspeed.monitor import histograms as hg
from tokspeed.monitor import names
from tokspeed.monitor.alerts import AlertTracker
from tokspeed.monitor.exporter import ExportState, make_registry, render
from tokspeed.monitor.rules import parse_alert, parse_alerts
from tokspeed.monitor.server_source import ServerSource
from tokspeed.monitor.server_window import (
    ServerNames,
    ServerWindow,
    parse_snapshot,
    snapshot_delta,
)
from tokspeed.sim.gate import FifoGate
from tokspeed.sim.log import LogEntry
from tokspeed.sim.metrics import TTFT_BUCKETS, SimMetrics
from tokspeed.telemetry.engines import ENGINES

VLLM = ServerNames.of(next(e for e in ENGINES if e.engine == "vllm"))
SIM = ServerNames.of(next(e for e in ENGINES if e.engine == "tokspeed-sim"))
TTFT_LE = (0.1, 0.25, 0.5, 1.0)


def vllm_text(ttft: dict[float, int], ttft_sum: float, success: int, tokens: int, waiting: int = 0,
              kv: tuple[float, float] = (0.25, 0.5)) -> str:
    """A vLLM-style scrape: TTFT histogram (cumulative counts by le, +Inf = all), counters, gauges; two engines."""
    lines = ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    total = max(ttft.values())
    for le in (*TTFT_LE, math.inf):
        n = ttft.get(le, total) if le != math.inf else total
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{"+Inf" if le == math.inf else le}",'
                     f'model_name="m"}} {float(n)}')
    lines += [f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft_sum}',
              f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {float(total)}',
              "# TYPE vllm:request_success counter",
              f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} {float(success - 1)}',
              'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0',
              "# TYPE vllm:generation_tokens counter",
              f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {float(tokens)}',
              "# TYPE vllm:num_requests_waiting gauge",
              f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {float(waiting)}',
              'vllm:num_requests_waiting{engine="1",model_name="m"} 1.0',
              "# TYPE vllm:num_requests_running gauge",
              'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
              "# TYPE vllm:kv_cache_usage_perc gauge",
              f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv[0]}',
              f'vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {kv[1]}']
    return "\n".join(lines) + "\n"


# --- histogram_quantile, by hand ------------------------------------------------------------

H = hg.from_buckets({0.1: 2, 0.2: 6, 0.5: 9, math.inf: 10}, total_sum=2.0, count=10)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.1, 0.05),  # rank 1 in (0, 0.1] holding 2: 0 + 0.1 × 1/2
        (0.5, 0.175),  # rank 5 in (0.1, 0.2] holding 4 above 2: 0.1 + 0.1 × 3/4
        (0.9, 0.5),  # rank 9 = the top of (0.2, 0.5]
        (0.75, 0.35),  # rank 7.5 in (0.2, 0.5] holding 3 above 6: 0.2 + 0.3 × 1.5/3
        (0.99, 0.5),  # rank 9.9 in +Inf: the highest finite bound
    ],
)
def test_histogram_quantile_interpolates_like_prometheus(q: float, expected: float) -> None:
    assert hg.quantile(q, H) == pytest.approx(expected)


def test_histogram_quantile_without_data_is_none() -> None:
    assert hg.quantile(0.5, hg.from_buckets({0.1: 0, math.inf: 0}, 0, 0)) is None
    assert hg.quantile(0.5, None) is None
    assert hg.quantile(0.5, hg.from_buckets({math.inf: 5}, 1, 5)) is None  # only +Inf: no resolution at all
    assert H.mean == pytest.approx(0.2)
    assert hg.bucket_of(0.3, H.bounds) == (0.2, 0.5) and hg.bucket_of(0.05, H.bounds) == (0.0, 0.1)


def test_delta_quantiles_see_only_the_new_observations() -> None:
    # 100 fast requests before, then 10 more: 8 in (0.25, 0.5] and 2 in (0.5, 1]
    old = parse_snapshot(vllm_text({0.1: 100}, 5.0, success=100, tokens=10_000), VLLM, at_s=10)
    new = parse_snapshot(vllm_text({0.1: 100, 0.25: 100, 0.5: 108, 1.0: 110}, 9.0, success=110, tokens=10_500), VLLM,
                         at_s=12)
    d = snapshot_delta(new, old)
    assert not d.reset and d.span_s == 2
    ttft = d.histograms["ttft"]
    assert ttft.total == 10 and ttft.mean == pytest.approx(0.4)
    assert hg.quantile(0.5, ttft) == pytest.approx(0.25 + 0.25 * 5 / 8)  # rank 5 of 8 in (0.25, 0.5]
    assert hg.quantile(0.9, ttft) == pytest.approx(0.5 + 0.5 * 1 / 2)  # rank 9: 1 of 2 in (0.5, 1]
    assert hg.quantile(0.5, new.histograms["ttft"]) < 0.1  # the cumulative one is dominated by the old requests
    assert d.counters == {"requests": 10, "tokens": 500}


def test_window_figures_rates_gauges_and_expiry() -> None:
    w = ServerWindow(window_s=4, interval_s=2)
    w.observe(parse_snapshot(vllm_text({0.1: 100}, 5.0, 100, 10_000), VLLM, at_s=10))
    w.observe(parse_snapshot(vllm_text({0.1: 100, 0.25: 100, 0.5: 108, 1.0: 110}, 9.0, 110, 10_500, waiting=4), VLLM,
                             at_s=12))
    w.observe(parse_snapshot(vllm_text({0.1: 110, 0.25: 110, 0.5: 118, 1.0: 120}, 9.5, 120, 11_500, waiting=2), VLLM,
                             at_s=14))
    f = w.figures(now_s=14)
    assert f.span_s == 4 and f.requests == 20  # no E2E histogram: vllm:request_success_total, both label sets
    assert f.requests_per_s == pytest.approx(5.0) and f.generation_tokens_per_s == pytest.approx(375.0)
    assert f.observations["ttft"] == 20 and f.means["ttft"] == pytest.approx(4.5 / 20)
    # merged: (0, 0.1] 10, (0.25, 0.5] 8, (0.5, 1] 2 -> p50 at rank 10 = top of (0, 0.1]
    assert f.quantiles["ttft"]["p50"] == pytest.approx(0.1)
    assert f.quantiles["ttft"]["p90"] == pytest.approx(0.25 + 0.25 * 8 / 8)
    assert (f.waiting, f.running, f.kv_cache_usage_pct) == (3, 3, 50)  # summed over engines; KV: the fullest
    v = f.values()
    assert v["server_ttft_p50_ms"] == pytest.approx(100) and v["server_waiting"] == 3 and v["server_up"] == 1
    assert v["server_itl_p99_ms"] is None  # this scrape has no ITL histogram: no data, not 0
    later = w.figures(now_s=16.5)  # the first delta (ended at 12) has left the 4 s window
    assert later.observations["ttft"] == 10 and later.requests == 10
    w.failed()
    down = w.figures(now_s=16.5)
    assert not down.up and down.waiting is None and down.values()["server_up"] == 0


def test_counter_reset_counts_from_the_restart() -> None:
    w = ServerWindow(window_s=10, interval_s=1)
    w.observe(parse_snapshot(vllm_text({0.1: 500}, 20.0, 500, 50_000), VLLM, at_s=0))
    w.failed()  # the server went away ...
    d = w.observe(parse_snapshot(vllm_text({0.1: 0, 0.25: 0, 0.5: 4}, 1.6, 4, 300), VLLM, at_s=3))  # ... came back
    assert d is not None and d.reset and w.resets == 1
    f = w.figures(now_s=3)
    assert f.up and f.requests == 4 and f.generation_tokens_per_s == pytest.approx(100)  # 300 tokens over 3 s
    assert f.quantiles["ttft"]["p50"] == pytest.approx(0.25 + 0.25 * 2 / 4)  # never negative, never the old 500
    assert f.means["ttft"] == pytest.approx(0.4)


# --- alerts on server figures -----------------------------------------------------------------

def test_server_alert_names_parse_and_map_to_exported_series() -> None:
    rule = parse_alert("server_ttft_p99_ms>800 for 2m")
    assert (rule.metric, rule.stat, rule.for_s) == ("server_ttft", "p99", 120)
    assert names.promql(rule) == 'tokspeed_monitor_server_ttft_seconds{quantile="0.99"} * 1000 > 800'
    waiting = parse_alert("server_waiting>10")
    assert names.promql(waiting) == "tokspeed_monitor_server_requests_waiting > 10"
    assert parse_alert("server_kv_cache_usage_pct>=90").alert_name == "server_kv_cache_usage_pct_ge_90"
    for bad in ("server_ttft_p42_ms>1", "server_bogus>1", "server_ttft_max_ms>1"):
        with pytest.raises(ConfigError) as info:
            parse_alert(bad)
        assert info.value.hint


def test_alert_fires_on_a_server_figure() -> None:
    rules = parse_alerts(["server_ttft_p99_ms>300 for 1s", "server_waiting>10"])
    tracker = AlertTracker(rules)
    w = ServerWindow(window_s=4, interval_s=1)
    w.observe(parse_snapshot(vllm_text({0.1: 50}, 2.0, 50, 1000), VLLM, at_s=0))
    w.observe(parse_snapshot(vllm_text({0.1: 60}, 2.5, 60, 1200), VLLM, at_s=1))
    assert tracker.evaluate(w.figures(1).values(), now=100) == []
    w.observe(parse_snapshot(vllm_text({0.1: 60, 0.25: 60, 0.5: 70}, 6.5, 70, 1400, waiting=20), VLLM, at_s=2))
    (waiting,) = tracker.evaluate(w.figures(2).values(), now=101)  # no `for`: at once
    assert waiting.rule.name == "server_waiting" and waiting.value == 21
    w.observe(parse_snapshot(vllm_text({0.1: 60, 0.25: 60, 0.5: 80}, 10.5, 80, 1600, waiting=20), VLLM, at_s=3))
    (fired,) = tracker.evaluate(w.figures(3).values(), now=102)
    assert fired.rule.name == "server_ttft_p99_ms" and fired.status == "firing"
    # window (0.1, 0.25] 0, (0.25, 0.5] 20 of 30: rank 29.7 -> 0.25 + 0.25 × 19.7/20
    assert fired.value == pytest.approx((0.25 + 0.25 * 19.7 / 20) * 1000)


# --- exporter ---------------------------------------------------------------------------------

def test_exporter_serves_server_families() -> None:
    w = ServerWindow(window_s=4, interval_s=2)
    w.observe(parse_snapshot(vllm_text({0.1: 100}, 5.0, 100, 10_000), VLLM, at_s=10))
    w.observe(parse_snapshot(vllm_text({0.1: 100, 0.25: 100, 0.5: 108, 1.0: 110}, 9.0, 110, 10_500), VLLM, at_s=12))
    state = ExportState(target="t", server=w.figures(12), server_scrapes_ok=2, server_scrapes_failed=1)
    text = render(make_registry(lambda: state)).decode()
    s = {(x.name, tuple(sorted(x.labels.items()))): x.value for f in text_string_to_metric_families(text) for x in f.samples}
    t = ("target", "t")
    assert s[("tokspeed_monitor_server_ttft_seconds", (("quantile", "0.5"), t))] == pytest.approx(0.25 + 0.25 * 5 / 8)
    assert s[("tokspeed_monitor_server_ttft_mean_seconds", (t,))] == pytest.approx(0.4)
    assert math.isnan(s[("tokspeed_monitor_server_e2e_seconds", (("quantile", "0.99"), t))])
    assert s[("tokspeed_monitor_server_requests_per_second", (t,))] == pytest.approx(5.0)
    assert s[("tokspeed_monitor_server_generation_tokens_per_second", (t,))] == pytest.approx(250.0)
    assert s[("tokspeed_monitor_server_kv_cache_usage_percent", (t,))] == pytest.approx(50)
    assert s[("tokspeed_monitor_server_scrapes_total", (("outcome", "error"), t))] == 1
    assert s[("tokspeed_monitor_server_up", (t,))] == 1
    assert {name for name, _ in s} <= names.exported_names()
    plain = render(make_registry(lambda: ExportState(target="t"))).decode()
    assert "server" not in plain  # not scraping: no server series at all


# --- the simulator's histograms, read back -------------------------------------------------------

async def test_sim_histograms_read_back_exactly() -> None:
    metrics = SimMetrics(FifoGate(4), "m", kv_capacity_tokens=1000)
    ttfts_ms = (15, 30, 30, 35, 450)
    for i, ttft in enumerate(ttfts_ms):
        e = LogEntry(id=f"r{i}", api="chat", epoch_offset_ns=0, received_ns=0)
        e.chunk_ns = [ttft * 1_000_000 + k * 20_000_000 for k in range(4)]  # 3 gaps of 20 ms
        e.end_ns, e.completion_tokens = e.chunk_ns[-1] + 1_000_000, 4
        metrics.admitted(e)
        metrics.released(e)
    snap = parse_snapshot(metrics.render(), SIM, at_s=0)
    ttft = snap.histograms["ttft"]
    assert ttft.bounds == (*TTFT_BUCKETS, math.inf)
    assert ttft.total == 5 and ttft.sum == pytest.approx(0.56)
    assert hg.quantile(0.5, ttft) == pytest.approx(0.02 + 0.02 * (2.5 - 1) / 3)  # 3 in (0.02, 0.04] above 1
    assert snap.histograms["itl"].total == 15 and hg.quantile(0.5, snap.histograms["itl"]) == pytest.approx(0.0175)
    assert snap.histograms["e2e"].total == 5 and snap.counters == {"requests": 5, "tokens": 20}


# --- the source: a server that is not there ---------------------------------------------------

async def test_source_survives_a_server_that_is_not_there() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    notes: list[str] = []
    src = ServerSource(f"http://127.0.0.1:{port}/metrics", auto=False, headers={}, window=ServerWindow(4, 1),
                       log=notes.append)
    try:
        await src.poll()
        await src.poll()
    finally:
        await src.close()
    assert (src.scrapes, src.failures, src.disabled) == (0, 2, False)
    assert not src.figures().up
    assert len(notes) == 1 and "not answering (cannot connect)" in notes[0]  # logged once, not every interval


@pytest.mark.parametrize(
    "args",
    [
        ["--probe-rate", "0"],  # passive, but nothing to watch
        ["--server-metrics", "ftp://x"],
    ],
)
def test_cli_server_metrics_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from tokspeed.cli import main

    assert main(["monitor", "--target", "http://127.0.0.1:1/v1", *args]) == 2
    err = capsys.readouterr().err
    assert "Error:" in err and "Hint:" in err


async def test_auto_switches_off_when_the_target_has_no_metrics_endpoint() -> None:
    from aiohttp import web

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="not found")

    app = web.Application()
    app.add_routes([web.get("/metrics", missing)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    notes: list[str] = []
    auto = ServerSource(url, auto=True, headers={}, window=ServerWindow(4, 1), log=notes.append)
    explicit = ServerSource(url, auto=False, headers={}, window=ServerWindow(4, 1), log=notes.append)
    try:
        for _ in range(2):
            await auto.poll()
            await explicit.poll()
    finally:
        await auto.close()
        await explicit.close()
        await runner.cleanup()
    assert auto.disabled and auto.failures == 0  # auto: a target without /metrics is not a failure, just off
    assert not explicit.disabled and explicit.failures == 2  # a URL the user gave keeps being tried
    assert notes[0] == f"server metrics off: {url} answered HTTP 404"


def test_server_alerts_as_prometheus_rules_use_exported_names() -> None:
    import re

    from tokspeed.monitor.promrules import rules_document

    rules = parse_alerts(["server_ttft_p99_ms>800 for 2m", "server_e2e_mean_ms>2000", "server_up<1 for 30s"])
    for entry in rules_document(rules)["groups"][0]["rules"]:
        used = re.findall(r"\btokspeed_monitor_[a-z0-9_]+", entry["expr"])
        assert used and set(used) <= names.exported_names(), entry["expr"]


def test_the_status_line_puts_the_exact_mean_beside_the_bucket_quantiles() -> None:
    """Issue 24: the server's quantiles came from bucket interpolation (+46% at p50) with no exact mean beside them."""
    from tokspeed.monitor.loop import server_status

    w = ServerWindow(window_s=4, interval_s=2)
    w.observe(parse_snapshot(vllm_text({0.1: 100}, 5.0, 100, 10_000), VLLM, at_s=10))
    w.observe(parse_snapshot(vllm_text({0.1: 100, 0.25: 100, 0.5: 108, 1.0: 110}, 9.0, 110, 10_500), VLLM, at_s=12))
    line = server_status(w.figures(now_s=12))
    assert "ttft mean 400.0 p50 ~" in line and "bucket-interpolated" in line  # Δsum/Δcount = 4.0 s / 10


def test_the_server_window_covers_what_was_asked() -> None:
    w = ServerWindow(window_s=30, interval_s=3)
    for k in range(20):  # scrapes every 3 s
        w.observe(parse_snapshot(vllm_text({0.1: 10 * k}, 0.5 * k, 10 * k, 100 * k), VLLM, at_s=3.0 * k + 0.4))
    assert w.figures(now_s=57.2).span_s == pytest.approx(30)  # not 33: the delta ending 0.2 s inside the window is out


def test_the_exporter_passes_promtool_check_metrics() -> None:
    """Issue 24: `promtool check metrics` rejected the exporter (a quantile label on gauges). promtool comes with
    Debian's prometheus package (`apt-get install -y prometheus`); without it the test says so and skips."""
    import shutil
    import subprocess

    from tokspeed.monitor.window import RollingWindow

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install -y prometheus provides it)")
    w = ServerWindow(window_s=4, interval_s=2)
    w.observe(parse_snapshot(vllm_text({0.1: 100}, 5.0, 100, 10_000), VLLM, at_s=10))
    w.observe(parse_snapshot(vllm_text({0.1: 100, 0.25: 100, 0.5: 108, 1.0: 110}, 9.0, 110, 10_500), VLLM, at_s=12))
    window = RollingWindow(window_s=10, bucket_s=1, started_s=0)
    for i in range(5):
        window.add_value("ttft", 20.0 + i, now_s=1.0 + i)
    state = ExportState(target="t", figures=window.figures(6.0), server=w.figures(12), server_scrapes_ok=2,
                        ok_total=5, alerts=[("ttft_p99_ms_gt_800", "inactive", None)],
                        gpus=[{"gpu": 0, "utilization_pct": 50.0, "memory_used_mib": 100.0}])
    for text in (render(make_registry(lambda: state)), render(make_registry(lambda: ExportState(target="x")))):
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert done.returncode == 0, (done.stdout + done.stderr).decode()
    parsed = {s.name: s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples}
    assert parsed["tokspeed_monitor_ttft_seconds_count"] == 0.0  # the empty state: a count of 0, quantiles NaN
