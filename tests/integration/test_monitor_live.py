"""`tokspeed monitor` end to end on loopback: a controllable simulator, a webhook receiver, the exporter.

The simulator (`tokspeed sim --control`) is slowed down and sped up on command; the
monitor's TTFT alert must fire (not before its `for`) and resolve (not before the slow
samples leave the window), the webhook must receive both, the exporter's text must parse
with prometheus_client and carry the simulator's true timings; then the simulator is
killed and restarted on the same port, and the monitor must raise and clear its
error-rate alert and keep running until Ctrl-C (exit 130 with a summary).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from harness import SimServer, free_port

FAKES = str(Path(__file__).parents[1] / "fakes")
GPUS = {"gpus": [{"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 2048, "utilization_pct": 60,
                  "power_w": 300, "sm_clock_mhz": 1980, "temperature_c": 45}]}
# p90, not p99: ~20 probes in a 2 s window, and a p99 alert needs 100 (issue 24: one outlier decided it)
TTFT_ALERT, ERROR_ALERT = "ttft_p90_ms_gt_250", "error_rate_gt_0_5"


class Hook:
    """An aiohttp webhook receiver on its own thread and loop; `events` holds every JSON body."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def hook(request: web.Request) -> web.Response:
            self.events.append({**await request.json(), "_received": time.monotonic()})
            return web.Response(text="ok")

        app = web.Application()
        app.add_routes([web.post("/hook", hook)])
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/hook"
        ready.set()
        self.loop.run_forever()

    def wait_for(self, alert: str, status: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in list(self.events):
                if e["alerts"][0]["labels"]["alertname"] == alert and e["status"] == status:
                    return e
            time.sleep(0.05)
        raise AssertionError(f"webhook never got {alert} {status}; got {[_brief(e) for e in self.events]}")

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _brief(e: dict[str, Any]) -> tuple[str, str]:
    return e["alerts"][0]["labels"]["alertname"], e["status"]


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.stop()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "target")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def q(name: str, quantile: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset({("quantile", quantile)})


def alert_key(name: str, alert: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset({("alert", alert)})


def control(sim_url: str, **timing: float) -> None:
    req = urllib.request.Request(sim_url.removesuffix("/v1") + "/sim/control", data=json.dumps(timing).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    assert json.loads(urllib.request.urlopen(req, timeout=5).read())["ttft_ms"] == timing["ttft_ms"]


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sim_control_is_off_by_default(start_sim: Callable[..., SimServer]) -> None:
    sim = start_sim()
    with pytest.raises(urllib.error.HTTPError) as info:
        control(sim.url, ttft_ms=900)
    assert info.value.code in (404, 405)


def test_monitor_alerts_fire_resolve_and_survive_a_restart(
    start_sim: Callable[..., SimServer], hook: Hook, tmp_path: Path
) -> None:
    sim = start_sim("--control", "--ttft-ms", "20", "--itl-ms", "5")
    port = sim.url.rsplit(":", 1)[1].split("/")[0]
    out = tmp_path / "mon"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([FAKES, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "TOKSPEED_FAKE_NVML": json.dumps(GPUS)}
    env.pop("OPENAI_API_KEY", None)
    stderr = (tmp_path / "monitor.err").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "monitor", "--target", sim.url, "--interval", "0.5s", "--window", "2s",
         "--probe-rate", "10", "--max-tokens", "4", "--max-in-flight", "8", "--timeout", "5s", "--max-backoff", "0.5s",
         "--alert", "ttft_p90_ms>250 for 1s", "--alert", "error_rate>0.5 for 1s", "--alert-webhook", hook.url,
         "--prometheus-port", "0", "--out", str(out), "--duration", "90s"],
        stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
    )
    restarted: SimServer | None = None
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        metrics_url = first.split("exporter on ")[1].split(";")[0]

        # steady state: the exported figures are the simulator's true timings
        wait_until(lambda: scrape(metrics_url)[("tokspeed_monitor_window_requests", frozenset())] >= 10, 15, "probes")
        m = scrape(metrics_url)
        assert 0.020 <= m[q("tokspeed_monitor_ttft_seconds", "0.5")] < 0.032
        # ITL against the simulator's log: a gap can be shorter than 5 ms when the chunk before it
        # was written late (deadlines are absolute), so the truth is the logged gaps, not 5 ms
        true_gaps = [g for e in sim.entries().values() if e["status"] == "ok" for g in np.diff(e["chunk_ns"])]
        true_itl_s = float(np.median(true_gaps)) / 1e9
        assert m[q("tokspeed_monitor_itl_seconds", "0.5")] == pytest.approx(true_itl_s, abs=0.0006)
        assert 0.035 <= m[q("tokspeed_monitor_e2e_seconds", "0.5")] < 0.050
        assert m[("tokspeed_monitor_error_ratio", frozenset())] == 0
        assert m[alert_key("tokspeed_monitor_alert_firing", TTFT_ALERT)] == 0
        assert m[("tokspeed_monitor_gpu_utilization_percent", frozenset({("gpu", "0")}))] == 60
        assert m[("tokspeed_monitor_target_up", frozenset())] == 1

        # slow down: the alert fires, not before its `for 1s`
        slowed = time.monotonic()
        control(sim.url, ttft_ms=400)
        fired = hook.wait_for(TTFT_ALERT, "firing", 15)
        assert fired["_received"] - slowed >= 1.0 + 0.4  # first slow answer, then 1 s pending
        assert float(fired["alerts"][0]["annotations"]["value"]) == pytest.approx(400, abs=40)
        m = scrape(metrics_url)
        assert m[alert_key("tokspeed_monitor_alert_firing", TTFT_ALERT)] == 1
        # the slowest TTFT in the window: at least the 400 ms asked, and late by at most what the simulator's own
        # log says it was late (a loaded machine delayed its timer: 445 ms against a 440 ms bound once) plus 40 ms
        slow_ttft_s = [(e["chunk_ns"][0] - e["received_ns"]) / 1e9 for e in sim.entries().values()
                       if e["chunk_ns"] and e["chunk_ns"][0] - e["received_ns"] >= 0.4e9]
        assert slow_ttft_s, "the simulator logged no slow answer"
        assert 0.400 <= m[q("tokspeed_monitor_ttft_seconds", "1")] < max(slow_ttft_s) + 0.040, max(slow_ttft_s)

        # speed up: it resolves once the slow samples have left the 2 s window
        sped = time.monotonic()
        control(sim.url, ttft_ms=20)
        resolved = hook.wait_for(TTFT_ALERT, "resolved", 15)
        assert resolved["_received"] - sped >= 1.5
        assert resolved["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"

        # the target goes away: probes fail, error_rate alert fires; the monitor keeps running
        sim.stop()
        down = hook.wait_for(ERROR_ALERT, "firing", 20)
        m = scrape(metrics_url)
        assert m[("tokspeed_monitor_target_up", frozenset())] == 0
        assert m[("tokspeed_monitor_errors_total", frozenset({("kind", "connect")}))] >= 1
        assert proc.poll() is None

        # ... and comes back on the same port: the alert resolves, probes complete again
        restarted = SimServer(tmp_path, "--control", "--ttft-ms", "20", "--itl-ms", "5", "--port", port)
        back = hook.wait_for(ERROR_ALERT, "resolved", 20)
        assert back["_received"] > down["_received"]
        wait_until(lambda: scrape(metrics_url)[("tokspeed_monitor_target_up", frozenset())] == 1, 10, "target up")
        assert len(restarted.entries()) >= 1

        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
        if restarted is not None:
            restarted.stop()

    log = (tmp_path / "monitor.err").read_text()
    assert "alerts: 2 fired, 2 resolved" in log, log
    assert f"ALERT FIRING {TTFT_ALERT}" in log and f"ALERT RESOLVED {ERROR_ALERT}" in log
    assert [_brief(e) for e in hook.events] == [
        (TTFT_ALERT, "firing"), (TTFT_ALERT, "resolved"), (ERROR_ALERT, "firing"), (ERROR_ALERT, "resolved")
    ]
    events = [json.loads(x) for x in (out / "alerts.jsonl").read_text().splitlines()]
    assert [(e["alert"], e["status"]) for e in events] == [_brief(e) for e in hook.events]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    kinds = {r["error_kind"] for r in records if r["status"] == "error"}
    assert "connect" in kinds
    assert sum(r["status"] == "ok" for r in records) >= 20


def test_monitor_waits_for_a_target_that_is_down_at_start(tmp_path: Path) -> None:
    port = free_port()  # nothing listens on it (yet)
    out = tmp_path / "mon"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokspeed", "monitor", "--target", f"http://127.0.0.1:{port}/v1", "--interval", "0.5s",
         "--window", "2s", "--probe-rate", "5", "--max-tokens", "3", "--max-backoff", "0.5s", "--no-prometheus",
         "--no-gpu", "--alert", "error_rate>0.5", "--out", str(out), "--duration", "6s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )
    sim: SimServer | None = None
    try:
        time.sleep(2)
        sim = SimServer(tmp_path, "--ttft-ms", "20", "--itl-ms", "5", "--port", str(port))
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if sim is not None:
            sim.stop()
    assert proc.returncode == 0, err  # --duration ended it
    assert "target not usable yet" in err and "target up: model tokspeed-sim" in err
    assert "ALERT FIRING error_rate_gt_0_5" in err and "ALERT RESOLVED error_rate_gt_0_5" in err
    assert "alerts: 1 fired, 1 resolved" in err
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in records if r["status"] == "ok"]
    assert records[0]["error_kind"] == "connect" and len(ok) >= 5
    ttft_ms = sorted((r["first_token_ns"] - r["sent_ns"]) / 1e6 for r in ok)
    assert 20 <= ttft_ms[len(ttft_ms) // 2] < 32
