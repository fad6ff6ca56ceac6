"""`tokspeed monitor --probe-rate 0 --server-metrics auto`: passive monitoring of the simulator's own /metrics.

Traffic comes from a small client in this test (threads streaming chat requests), never from
the monitor: the simulator's log must hold exactly the test's requests. The monitor scrapes
the simulator's vLLM-style histograms (vLLM's buckets); its server-side TTFT / ITL / E2E
quantiles must fall in the same bucket as the simulator's logged true quantiles (that is all a
histogram can resolve) and its means (Δsum / Δcount, exact) must match the logged means. Then the
simulator is slowed with `--control`: the server TTFT alert fires (not before its `for`); then it
is killed (target_up 0, the monitor keeps going) and restarted on the same port (a counter reset:
figures count from the restart, never negative).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import SimServer
from tokspeed.monitor.histograms import bucket_of
from tokspeed.sim.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS

ALERT = "server_ttft_p90_ms_gt_300"  # p90: ~20 requests in a 2 s window, a p99 alert needs 100
Key = tuple[str, frozenset[tuple[str, str]]]


class Load:
    """`threads` clients streaming small chat requests back to back until `stop()`; errors are counted, not raised."""

    def __init__(self, url: str, threads: int = 2) -> None:
        self.url = url + "/chat/completions"
        self.sent = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]
        for t in self._threads:
            t.start()

    def _loop(self) -> None:
        body = json.dumps({"model": "tokspeed-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                           "stream": True}).encode()
        while not self._stop.is_set():
            req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
            try:
                with self._lock:
                    self.sent += 1
                with urllib.request.urlopen(req, timeout=10) as resp:
                    resp.read()
            except (OSError, urllib.error.URLError):
                with self._lock:
                    self.failed += 1
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def scrape(url: str) -> dict[Key, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "target")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def plain(name: str) -> Key:
    return name, frozenset()


def q(name: str, quantile: str) -> Key:
    return name, frozenset({("quantile", quantile)})


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def control(sim_url: str, **timing: float) -> None:
    req = urllib.request.Request(sim_url.removesuffix("/v1") + "/sim/control", data=json.dumps(timing).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()


def truth(sim: SimServer, last_s: float, until_unix_s: float | None = None) -> dict[str, np.ndarray]:
    """The simulator's logged TTFT, ITL gaps and E2E (seconds) of ok requests that ended in the `last_s` seconds
    before `until_unix_s` (default: now)."""
    until = time.time() if until_unix_s is None else until_unix_s
    ok = [e for e in sim.entries().values() if e["status"] == "ok" and e["chunk_ns"]
          and until - last_s < (e["end_ns"] + e["epoch_offset_ns"]) / 1e9 <= until]
    return {
        "ttft": np.array([(e["chunk_ns"][0] - e["received_ns"]) / 1e9 for e in ok]),
        "itl": np.array([g / 1e9 for e in ok for g in np.diff(e["chunk_ns"])]),
        "e2e": np.array([(e["end_ns"] - e["received_ns"]) / 1e9 for e in ok]),
    }


def same_bucket(estimate: float, true_value: float, bounds: tuple[float, ...]) -> bool:
    low, high = bucket_of(true_value, bounds)
    return low <= estimate <= high


def test_passive_monitor_reads_the_servers_histograms_and_alerts(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--control", "--ttft-ms", "20", "--itl-ms", "5")
    port = sim.url.rsplit(":", 1)[1].split("/")[0]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    err_path = tmp_path / "monitor.err"
    stderr = err_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "monitor", "--target", sim.url, "--probe-rate", "0", "--server-metrics", "auto",
         "--interval", "0.5s", "--window", "2s", "--alert", "server_ttft_p90_ms>300 for 1s", "--prometheus-port", "0",
         "--no-gpu", "--duration", "90s"],
        stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
    )
    load: Load | None = None
    restarted: SimServer | None = None
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "(no probes)" in first and "scraping http://127.0.0.1:" in first, first
        metrics_url = first.split("exporter on ")[1].split(";")[0]
        load = Load(sim.url)
        wait_until(lambda: scrape(metrics_url).get(plain("tokspeed_monitor_server_window_requests"), 0) >= 20, 20,
                   "server-side requests in the window")
        time.sleep(2.5)  # a window full of traffic
        m = scrape(metrics_url)
        # the requests that ended inside the monitor's window: (last scrape - span, last scrape]
        span = m[plain("tokspeed_monitor_server_window_seconds")]
        t = truth(sim, span, m[plain("tokspeed_monitor_server_last_scrape_timestamp_seconds")])
        assert 1.5 <= span <= 3.0  # the deltas (0.5 s apart) that ended in the last 2 s
        assert m[plain("tokspeed_monitor_server_window_requests")] == pytest.approx(len(t["e2e"]), abs=2)
        # quantiles: in the same bucket as the logged truth (a histogram resolves no finer); means: exact
        for metric, bounds in (("ttft", TTFT_BUCKETS), ("itl", ITL_BUCKETS), ("e2e", E2E_BUCKETS)):
            for quantile, pct in (("0.5", 50), ("0.9", 90)):
                est = m[q(f"tokspeed_monitor_server_{metric}_seconds", quantile)]
                true_value = float(np.percentile(t[metric], pct))
                print(f"server {metric} p{pct}: monitor {est * 1000:.2f} ms, sim log {true_value * 1000:.2f} ms")
                assert same_bucket(est, true_value, bounds), (metric, quantile, est, true_value)
            mean = m[plain(f"tokspeed_monitor_server_{metric}_mean_seconds")]
            print(f"server {metric} mean: monitor {mean * 1000:.2f} ms, sim log {t[metric].mean() * 1000:.2f} ms")
            assert mean == pytest.approx(float(t[metric].mean()), abs=0.001), metric
        assert 0.020 < float(np.median(t["ttft"])) < 0.032  # the truth is the configured 20 ms (+ serving)
        assert m[q("tokspeed_monitor_server_ttft_seconds", "0.5")] == pytest.approx(0.030, abs=0.010)  # (0.02, 0.04]
        rate = m[plain("tokspeed_monitor_server_requests_per_second")]
        tokens = m[plain("tokspeed_monitor_server_generation_tokens_per_second")]
        print(f"server requests/s: monitor {rate:.1f}, sim log {len(t['e2e']) / span:.1f}; tokens/s {tokens:.1f}")
        assert rate == pytest.approx(len(t["e2e"]) / span, rel=0.1)
        assert 3.0 <= tokens / rate <= 5.0  # 4 tokens a request
        assert m[plain("tokspeed_monitor_server_requests_waiting")] == 0
        assert 0 <= m[plain("tokspeed_monitor_server_requests_running")] <= 2
        assert m[plain("tokspeed_monitor_target_up")] == 1 and m[plain("tokspeed_monitor_server_up")] == 1
        assert m[("tokspeed_monitor_requests_total", frozenset({("outcome", "ok")}))] == 0  # no probes

        # slow down: the server-side TTFT alert fires, not before its `for 1s`
        slowed = time.monotonic()
        control(sim.url, ttft_ms=400)
        fired_key = ("tokspeed_monitor_alert_firing", frozenset({("alert", ALERT)}))
        wait_until(lambda: scrape(metrics_url)[fired_key] == 1, 15, "the server TTFT alert")
        assert time.monotonic() - slowed >= 1.0 + 0.4
        time.sleep(2.5)  # only slow requests in the window
        m = scrape(metrics_url)
        slow = truth(sim, 2.0)
        p99 = m[q("tokspeed_monitor_server_ttft_seconds", "0.99")]
        print(f"slowed: server ttft p99 monitor {p99 * 1000:.1f} ms, sim log {np.percentile(slow['ttft'], 99) * 1000:.1f} ms;"
              f" mean {m[plain('tokspeed_monitor_server_ttft_mean_seconds')] * 1000:.1f} ms")
        assert same_bucket(p99, float(np.percentile(slow["ttft"], 99)), TTFT_BUCKETS)
        assert 0.25 < p99 <= 0.5
        assert m[plain("tokspeed_monitor_server_ttft_mean_seconds")] == pytest.approx(0.400, abs=0.03)

        # the server goes away: target_up 0, the monitor keeps running
        sim.stop()
        wait_until(lambda: scrape(metrics_url)[plain("tokspeed_monitor_target_up")] == 0, 10, "target down")
        assert proc.poll() is None
        # ... and comes back fast on the same port (counters from 0): a reset, counted from the restart
        restarted = SimServer(tmp_path, "--control", "--ttft-ms", "20", "--itl-ms", "5", "--port", port)
        wait_until(lambda: scrape(metrics_url)[plain("tokspeed_monitor_server_restarts_total")] >= 1, 15,
                   "the restart to be seen")
        wait_until(lambda: scrape(metrics_url)[fired_key] == 0, 15, "the alert to resolve")
        time.sleep(2.5)
        m = scrape(metrics_url)
        fast = truth(restarted, 2.0)
        assert m[plain("tokspeed_monitor_target_up")] == 1
        assert same_bucket(m[q("tokspeed_monitor_server_ttft_seconds", "0.5")], float(np.median(fast["ttft"])),
                           TTFT_BUCKETS)
        assert m[plain("tokspeed_monitor_server_requests_per_second")] > 0

        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
    finally:
        if load is not None:
            load.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
        if restarted is not None:
            restarted.stop()

    log = err_path.read_text()
    assert f"ALERT FIRING {ALERT}" in log and f"ALERT RESOLVED {ALERT}" in log, log
    assert "server restarted" in log and "not answering" in log
    assert "no probes (passive)" in log and "server metrics:" in log
    # passive: every request the simulator saw came from this test's clients
    assert load is not None
    assert len(sim.entries()) + len(restarted.entries() if restarted else {}) <= load.sent


def test_passive_monitor_of_a_server_without_metrics_stops_with_a_usage_error() -> None:
    """A target whose /metrics is not Prometheus text of a known engine: auto turns scraping off; passive, nothing is left."""
    import asyncio

    from aiohttp import web

    async def main() -> tuple[int, str]:
        async def not_prometheus(request: web.Request) -> web.Response:
            return web.Response(text="nothing here\n")

        app = web.Application()
        app.add_routes([web.get("/metrics", not_prometheus)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tokspeed", "monitor", "--target", f"http://127.0.0.1:{port}/v1", "--probe-rate", "0",
            "--server-metrics", "auto", "--interval", "0.3s", "--window", "1s", "--no-prometheus", "--no-gpu",
            "--duration", "2s", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        await runner.cleanup()
        return proc.returncode or 0, err.decode()

    code, err = asyncio.run(main())
    assert code == 2, err
    assert "server metrics off" in err and "serves no metric tokspeed knows" in err
    assert "Hint:" in err
