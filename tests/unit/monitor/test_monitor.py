"""Monitor mode: alert rules, the pending/firing/resolved machine, the bounded window, exporter, rules, dashboard."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from locations import FAKES, ROOT
from tokspeed.errors import ConfigError
from tokspeed.monitor import names
from tokspeed.monitor.alerts import AlertState, AlertTracker
from tokspeed.monitor.exporter import ExportState, make_registry, render
from tokspeed.monitor.files import CappedJsonl
from tokspeed.monitor.promrules import rules_document, rules_yaml
from tokspeed.monitor.rules import AlertRule, parse_alert, parse_alerts, prom_duration
from tokspeed.monitor.server_window import (
    ServerFigures,
    ServerNames,
    ServerWindow,
    parse_snapshot,
)
from tokspeed.monitor.webhook import ZERO_TIME, payload
from tokspeed.monitor.window import RollingWindow
from tokspeed.records import ErrorKind, RequestRecord, Status
from tokspeed.sim.config import SimConfig
from tokspeed.sim.control import updated
from tokspeed.sim.gate import FifoGate
from tokspeed.sim.log import LogEntry
from tokspeed.sim.metrics import SimMetrics
from tokspeed.telemetry.engines import ENGINES

MS = 1_000_000
DASHBOARD = ROOT / "dashboards" / "tokspeed-monitor.json"


# --- rules ---------------------------------------------------------------------------------

def test_parse_alert_with_duration() -> None:
    rule = parse_alert("ttft_p99_ms>800 for 2m")
    assert (rule.name, rule.op, rule.value, rule.for_s, rule.metric, rule.stat) == ("ttft_p99_ms", ">", 800, 120, "ttft", "p99")
    assert rule.alert_name == "ttft_p99_ms_gt_800"
    assert str(rule) == "ttft_p99_ms>800 for 2m"
    assert rule.met(800.5) and not rule.met(800) and not rule.met(None)


@pytest.mark.parametrize(
    ("text", "name", "for_s"),
    [
        ("error_rate>0.02", "error_rate", 0.0),
        ("e2e_p50_ms >= 1500 for 30s", "e2e_p50_ms", 30.0),
        ("decode_p50_tokens_per_s<20 for 1m", "decode_p50_tokens_per_s", 60.0),
        ("gpu_utilization_pct>=95 for 90s", "gpu_utilization_pct", 90.0),
        ("output_tokens_per_s<1", "output_tokens_per_s", 0.0),
        ("itl_max_ms>100 for 250ms", "itl_max_ms", 0.25),
    ],
)
def test_parse_alert_names(text: str, name: str, for_s: float) -> None:
    rule = parse_alert(text)
    assert rule.name == name and rule.for_s == pytest.approx(for_s)


@pytest.mark.parametrize(
    "text", ["ttft_ms>800", "ttfa_p99_ms>1", "ttft_stdev_ms>5", "bogus>1", "ttft_p99_ms>800 for ever", "ttft_p99_ms"]
)
def test_parse_alert_rejects(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_alert(text)
    assert info.value.hint


def test_duplicate_alerts_rejected() -> None:
    with pytest.raises(ConfigError):
        parse_alerts(["error_rate>0.02", "error_rate > 0.02 for 1m"])


def test_prom_duration() -> None:
    assert [prom_duration(s) for s in (0, 0.5, 1, 90, 120, 3600, 3725.25)] == [
        "0s", "500ms", "1s", "1m30s", "2m", "1h", "1h2m5s250ms"
    ]


# --- state machine (fake clock) ---------------------------------------------------------

def test_pending_firing_resolved_with_for() -> None:
    rule = parse_alert("ttft_p99_ms>800 for 2m")
    tracker = AlertTracker([rule])
    assert tracker.evaluate({"ttft_p99_ms": 900}, now=1000) == []
    assert tracker.state(rule) is AlertState.PENDING
    assert tracker.evaluate({"ttft_p99_ms": 950}, now=1119.9) == []
    (fired,) = tracker.evaluate({"ttft_p99_ms": 990}, now=1120)
    assert (fired.status, fired.value, fired.active_since_s, fired.fired_at_s) == ("firing", 990, 1000, 1120)
    assert tracker.state(rule) is AlertState.FIRING
    assert tracker.evaluate({"ttft_p99_ms": 1000}, now=1135) == []  # still firing: no repeat event
    (resolved,) = tracker.evaluate({"ttft_p99_ms": 700}, now=1150)
    assert (resolved.status, resolved.at_s, resolved.fired_at_s) == ("resolved", 1150, 1120)
    assert tracker.state(rule) is AlertState.INACTIVE


def test_pending_that_clears_never_fires_and_restarts_its_clock() -> None:
    rule = parse_alert("error_rate>0.1 for 10s")
    tracker = AlertTracker([rule])
    tracker.evaluate({"error_rate": 0.5}, now=0)
    assert tracker.evaluate({"error_rate": 0.0}, now=9) == []
    assert tracker.state(rule) is AlertState.INACTIVE
    assert tracker.evaluate({"error_rate": 0.5}, now=12) == []
    assert tracker.evaluate({"error_rate": 0.5}, now=21.9) == []  # 9.9 s since it held again
    assert [e.status for e in tracker.evaluate({"error_rate": 0.5}, now=22)] == ["firing"]


def test_no_for_fires_at_once_and_missing_data_resolves() -> None:
    rule = parse_alert("error_rate>0.02")
    other = parse_alert("ttft_p50_ms>100")
    tracker = AlertTracker([rule, other])
    events = tracker.evaluate({"error_rate": 0.5, "ttft_p50_ms": None}, now=5)
    assert [(e.rule.name, e.status) for e in events] == [("error_rate", "firing")]
    assert [e.status for e in tracker.evaluate({}, now=6)] == ["resolved"]
    assert tracker.firing() == []


# --- rolling window ----------------------------------------------------------------------

def _record(ttft_ms: int, itl_ms: int, tokens: int, status: Status = Status.OK) -> RequestRecord:
    sent = 10_000 * MS
    chunks = [sent + (ttft_ms + i * itl_ms) * MS for i in range(tokens)]
    if status is not Status.OK:
        return RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent, end_ns=sent,
                             status=status, error_kind=ErrorKind.CONNECT)
    return RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent,
                         first_token_ns=chunks[0], first_content_ns=chunks[0], end_ns=chunks[-1], chunk_ns=chunks,
                         output_tokens=tokens, input_tokens=10)


def test_window_figures_exact() -> None:
    w = RollingWindow(window_s=10, bucket_s=1, started_s=0)
    for i, ttft in enumerate((100, 200, 300, 400)):
        w.add(_record(ttft, 10, 5), now_s=1.5 + i)
    w.add(_record(0, 0, 0, Status.ERROR), now_s=5.5)
    f = w.figures(now_s=10)
    assert f.completed == 4 and f.errored == 1
    assert f.error_rate == pytest.approx(0.2)
    assert f.dists["ttft"].p50 == pytest.approx(250) and f.dists["ttft"].max == pytest.approx(400)
    assert f.dists["itl"].count == 16 and f.dists["itl"].p99 == pytest.approx(10)
    assert f.dists["e2e"].min == pytest.approx(140)
    assert f.dists["tpot"].mean == pytest.approx(10)
    assert f.requests_per_s == pytest.approx(0.4)  # 4 completed over the 10 s covered
    assert f.output_tokens_per_s == pytest.approx(2.0)
    assert f.total_tokens_per_s == pytest.approx(6.0)
    assert f.error_kinds == {"connect": 1}
    v = f.values()
    assert v["ttft_p50_ms"] == pytest.approx(250) and v["error_rate"] == pytest.approx(0.2)


def test_window_forgets_old_buckets_and_early_span_is_elapsed_time() -> None:
    w = RollingWindow(window_s=3, bucket_s=1, started_s=100)
    w.add(_record(100, 10, 3), now_s=100.5)
    early = w.figures(now_s=102)
    assert early.span_s == pytest.approx(2) and early.requests_per_s == pytest.approx(0.5)
    w.add(_record(900, 10, 3), now_s=102.5)
    assert w.figures(now_s=103.2).dists["ttft"].count == 2  # bucket 100 overlaps (100.2, 103.2]
    late = w.figures(now_s=104.0)  # bucket 100 has left the window
    assert late.dists["ttft"].count == 1 and late.dists["ttft"].p50 == pytest.approx(900)
    empty = w.figures(now_s=200)
    assert empty.error_rate is None and empty.dists["ttft"].p99 is None and empty.requests_per_s is None


def test_window_memory_is_bounded() -> None:
    w = RollingWindow(window_s=60, bucket_s=5, started_s=0, max_samples=100, seed=1)
    for i in range(200_000):  # 500 values a bucket, 400 buckets
        w.add_value("itl", float(i % 1000), now_s=i * 0.01)
    assert w.bucket_count == 13  # ceil(60 / 5) + 1
    assert w.stored_samples() <= 13 * 100
    f = w.figures(now_s=2000)
    assert f.dists["itl"].count == 1200  # the reservoir keeps a sample of each bucket
    assert 300 < f.dists["itl"].p50 < 700  # ... representative of the uniform 0..999 values


# --- exporter ------------------------------------------------------------------------------

def _state() -> ExportState:
    w = RollingWindow(window_s=10, bucket_s=1, started_s=0)
    for ttft in (100, 200, 300, 400):
        w.add(_record(ttft, 10, 5), now_s=5)
    w.add(_record(0, 0, 0, Status.ERROR), now_s=5)
    return ExportState(
        target="http://127.0.0.1:1/v1", figures=w.figures(10), ok_total=40, error_total=3,
        errors_by_kind={"connect": 3}, up=True, last_probe_s=1.7e9,
        alerts=[("ttft_p99_ms_gt_800", "firing", 950.0), ("error_rate_gt_0_5", "pending", 0.6)],
        gpus=[{"gpu": 0, "utilization_pct": 87.0, "memory_used_mib": 1024.0}], webhook_failures=1,
        server=_server_figures(), server_scrapes_ok=3,
    )


def _server_figures() -> ServerFigures:
    """Two sim scrapes: the server-side families (--server-metrics) for the exporter and dashboard tests."""
    names_ = ServerNames.of(next(e for e in ENGINES if e.engine == "tokspeed-sim"))
    metrics = SimMetrics(FifoGate(2), "m", kv_capacity_tokens=100)
    w = ServerWindow(window_s=10, interval_s=1)
    w.observe(parse_snapshot(metrics.render(), names_, at_s=1))
    entry = LogEntry(id="a", api="chat", epoch_offset_ns=0, received_ns=0)
    entry.chunk_ns, entry.end_ns, entry.completion_tokens = [30 * MS, 40 * MS], 45 * MS, 2
    metrics.admitted(entry)
    metrics.released(entry)
    w.observe(parse_snapshot(metrics.render(), names_, at_s=2))
    return w.figures(2)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_exporter_output_parses_with_the_right_values() -> None:
    text = render(make_registry(_state)).decode()
    s = _samples(text)
    t = ("target", "http://127.0.0.1:1/v1")
    assert s[("tokspeed_monitor_ttft_seconds", (("quantile", "0.5"), t))] == pytest.approx(0.25)
    assert s[("tokspeed_monitor_ttft_seconds", (("quantile", "1"), t))] == pytest.approx(0.4)
    assert s[("tokspeed_monitor_ttft_mean_seconds", (t,))] == pytest.approx(0.25)
    assert s[("tokspeed_monitor_error_ratio", (t,))] == pytest.approx(0.2)
    assert s[("tokspeed_monitor_requests_total", (("outcome", "ok"), t))] == 40
    assert s[("tokspeed_monitor_errors_total", (("kind", "connect"), t))] == 3
    assert s[("tokspeed_monitor_alert_firing", (("alert", "ttft_p99_ms_gt_800"), t))] == 1
    assert s[("tokspeed_monitor_alert_firing", (("alert", "error_rate_gt_0_5"), t))] == 0
    assert s[("tokspeed_monitor_alert_pending", (("alert", "error_rate_gt_0_5"), t))] == 1
    assert s[("tokspeed_monitor_gpu_utilization_percent", (("gpu", "0"), t))] == 87
    assert s[("tokspeed_monitor_gpu_memory_used_bytes", (("gpu", "0"), t))] == 2**30
    assert s[("tokspeed_monitor_target_up", (t,))] == 1
    emitted = {name for name, _ in s}
    assert emitted <= names.exported_names()


def test_exporter_before_any_data_reports_nan_not_zero() -> None:
    s = _samples(render(make_registry(lambda: ExportState(target="x"))).decode())
    assert math.isnan(s[("tokspeed_monitor_ttft_seconds", (("quantile", "0.99"), ("target", "x")))])
    assert math.isnan(s[("tokspeed_monitor_error_ratio", (("target", "x"),))])


# --- Prometheus rules and the dashboard -----------------------------------------------------

def test_rules_yaml_structure() -> None:
    rules = parse_alerts(["ttft_p99_ms>800 for 2m", "error_rate>0.02", "e2e_mean_ms>=2000 for 90s",
                          "gpu_utilization_pct>95 for 5m", "decode_p50_tokens_per_s<20"])
    doc = yaml.safe_load(rules_yaml(rules))
    assert doc == rules_document(rules)
    (group,) = doc["groups"]
    assert group["name"] == "tokspeed-monitor"
    by_name = {r["alert"]: r for r in group["rules"]}
    assert by_name["ttft_p99_ms_gt_800"]["expr"] == 'tokspeed_monitor_ttft_seconds{quantile="0.99"} * 1000 > 800'
    assert by_name["ttft_p99_ms_gt_800"]["for"] == "2m"
    assert by_name["error_rate_gt_0_02"]["expr"] == "tokspeed_monitor_error_ratio > 0.02"
    assert "for" not in by_name["error_rate_gt_0_02"]
    assert by_name["e2e_mean_ms_ge_2000"]["expr"] == "tokspeed_monitor_e2e_mean_seconds * 1000 >= 2000"
    assert by_name["e2e_mean_ms_ge_2000"]["for"] == "1m30s"
    assert by_name["gpu_utilization_pct_gt_95"]["for"] == "5m"
    for rule in group["rules"]:
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["alert"])
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert set(_metric_names(rule["expr"])) <= names.exported_names()


def _metric_names(expr: str) -> list[str]:
    return re.findall(r"\btokspeed_monitor_[a-z0-9_]+", expr)


def test_dashboard_uses_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    emitted = {name for name, _ in _samples(render(make_registry(_state)).decode())}
    for expr in exprs:
        used = _metric_names(expr)
        assert used, expr
        for name in used:
            assert name in emitted, f"{name} in dashboard expr {expr!r} is not exported"
    # every latency family is on the dashboard
    for family, _, _ in names.LATENCY.values():
        assert any(family in e for e in exprs), family
    for family, _ in names.SERVER_LATENCY.values():
        assert any(family in e for e in exprs), family
    variable = dash["templating"]["list"][1]["query"]["query"]
    assert set(_metric_names(variable)) <= emitted


# --- webhook payload, files, sim control --------------------------------------------------

def test_webhook_payload_is_alertmanager_like() -> None:
    rule = parse_alert("ttft_p99_ms>800 for 2m")
    tracker = AlertTracker([rule])
    tracker.evaluate({"ttft_p99_ms": 900}, now=1_700_000_000)
    (fired,) = tracker.evaluate({"ttft_p99_ms": 900}, now=1_700_000_120)
    body = payload(fired, "http://h/v1")
    assert body["status"] == "firing" and body["version"] == "4"
    (alert,) = body["alerts"]
    assert alert["labels"]["alertname"] == "ttft_p99_ms_gt_800" and alert["labels"]["target"] == "http://h/v1"
    assert alert["startsAt"] == "2023-11-14T22:15:20.000Z" and alert["endsAt"] == ZERO_TIME
    assert alert["annotations"]["value"] == "900"
    (resolved,) = tracker.evaluate({"ttft_p99_ms": 10}, now=1_700_000_180)
    alert = payload(resolved, "http://h/v1")["alerts"][0]
    assert alert["status"] == "resolved" and alert["endsAt"] == "2023-11-14T22:16:20.000Z"


def test_capped_jsonl_rotates(tmp_path: Path) -> None:
    f = CappedJsonl(tmp_path / "requests.jsonl", max_bytes=1000)
    for i in range(100):
        f.write({"i": i, "pad": "x" * 40})
    f.close()
    current = (tmp_path / "requests.jsonl").read_text().splitlines()
    older = (tmp_path / "requests.jsonl.1").read_text().splitlines()
    assert (tmp_path / "requests.jsonl").stat().st_size <= 1000
    assert json.loads(current[-1])["i"] == 99
    assert json.loads(older[-1])["i"] + 1 == json.loads(current[0])["i"]  # nothing lost across the rotation


def test_sim_control_updates_validate() -> None:
    cfg = SimConfig(ttft_ms=50, control=True)
    new = updated(cfg, {"ttft_ms": 900, "itl_ms": 2})
    assert (new.ttft_ms, new.itl_ms, new.control) == (900, 2, True)
    for bad in ({"ttft_ms": -1}, {"model": "x"}, {}, [1]):
        with pytest.raises(ValueError):
            updated(cfg, bad)


def test_rule_is_a_frozen_value() -> None:
    rule = AlertRule(name="error_rate", op=">", value=0.5, metric="error_rate")
    assert rule.expression == "error_rate>0.5" and rule.alert_name == "error_rate_gt_0_5"


# --- the CLI's offline paths ------------------------------------------------------------------

def test_cli_writes_prometheus_rules(tmp_path: Path) -> None:
    from tokspeed.cli import main

    path = tmp_path / "rules.yml"
    rc = main(["monitor", "--alert", "ttft_p99_ms>800 for 2m", "--alert", "error_rate>0.02",
               "--write-prometheus-rules", str(path)])
    assert rc == 0
    rules = yaml.safe_load(path.read_text())["groups"][0]["rules"]
    assert [(r["alert"], r.get("for")) for r in rules] == [("ttft_p99_ms_gt_800", "2m"), ("error_rate_gt_0_02", None)]


@pytest.mark.parametrize(
    "args",
    [
        ["monitor"],  # no target
        ["monitor", "--target", "http://127.0.0.1:1/v1", "--alert", "ttft_ms>5"],
        ["monitor", "--target", "http://127.0.0.1:1/v1", "--interval", "10s", "--window", "5s"],
        ["monitor", "--write-prometheus-rules", "-"],  # no alerts to write
    ],
)
def test_cli_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from tokspeed.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Error:" in err and "Hint:" in err


# --- webhook failures and GPU figures inside the monitor ----------------------------------

async def test_webhook_failure_is_reported_not_raised() -> None:
    import socket

    from tokspeed.monitor.webhook import WebhookSender

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    notes: list[str] = []
    sender = WebhookSender(f"http://127.0.0.1:{port}/hook", "t", notes.append, timeout_s=2)
    tracker = AlertTracker([parse_alert("error_rate>0.5")])
    (event,) = tracker.evaluate({"error_rate": 1.0}, now=0)
    assert await sender.send(event) is False
    await sender.close()
    assert sender.failures == 1 and sender.sent == 0
    assert "error_rate_gt_0_5 firing not delivered" in notes[0]


async def test_monitor_evaluates_gpu_utilisation_from_nvml(tmp_path: Path) -> None:
    import importlib.util

    from tokspeed.monitor.loop import Monitor, MonitorSettings
    from tokspeed.monitor.probe import ProbeSettings

    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKES / "pynvml.py")
    assert spec is not None and spec.loader is not None
    nvml = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nvml)
    gpu = {"name": "G", "memory_total_mib": 1000, "memory_used_mib": 512, "utilization_pct": 80, "power_w": 1,
           "sm_clock_mhz": 1, "temperature_c": 1}
    nvml.configure({"gpus": [gpu, {**gpu, "utilization_pct": 90}]})
    settings = MonitorSettings(
        probe=ProbeSettings(target="http://127.0.0.1:1/v1", rate=1), rules=parse_alerts(["gpu_utilization_pct>=85"]),
        interval_s=1, window_s=5, prometheus_port=None, out_dir=tmp_path, quiet=True,
    )
    lines: list[str] = []
    monitor = Monitor(settings, lines.append, nvml=nvml)
    monitor._open_gpus()
    monitor._open_files()
    (event,) = await monitor.evaluate()
    assert event.status == "firing" and event.value == pytest.approx(85)
    assert [g["utilization_pct"] for g in monitor.state.gpus] == [80, 90]
    assert any("ALERT FIRING gpu_utilization_pct_ge_85" in line for line in lines)
    s = _samples(render(make_registry(lambda: monitor.state)).decode())
    assert s[("tokspeed_monitor_gpu_memory_used_bytes", (("gpu", "1"), ("target", "http://127.0.0.1:1/v1")))] == 512 * 2**20
    assert s[("tokspeed_monitor_alert_firing", (("alert", "gpu_utilization_pct_ge_85"), ("target", "http://127.0.0.1:1/v1")))] == 1
    monitor._alerts_file.close()  # type: ignore[union-attr]
    (line,) = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert json.loads(line)["status"] == "firing"


def test_the_window_is_what_was_asked_not_up_to_a_bucket_more() -> None:
    """Issue 24: `--window 30s` read 'window 33s' (every bucket overlapping the window counted whole)."""
    w = RollingWindow(window_s=30, bucket_s=3, started_s=0)
    for i in range(100):  # a probe every 0.5 s, TTFT = its end time in ms
        w.add(_record(100 + i, 10, 3), now_s=0.5 * i + 0.25)
    f = w.figures(now_s=50.0)  # the window is (20, 50]: probes ended at 20.25 ... 49.75
    from tokspeed.monitor.loop import status_line

    assert f.span_s == pytest.approx(30) and "window 30s" in status_line(f)
    assert f.completed == 60 and f.dists["ttft"].count == 60 and f.dists["ttft"].min == pytest.approx(100 + 40)
    assert f.requests_per_s == pytest.approx(2.0)


def test_a_p99_alert_needs_100_samples_so_one_outlier_cannot_fire_it() -> None:
    """Issue 24: 60 probes in a window, one 695 ms stall kept p99 high and fired the alert for the whole window."""
    from tokspeed.monitor.alerts import AlertTracker

    rule = parse_alert("ttft_p99_ms>250")
    assert rule.min_samples == 100 and parse_alert("ttft_p90_ms>1").min_samples == 10
    assert parse_alert("ttft_p999_ms>1").min_samples == 1000 and parse_alert("ttft_max_ms>1").min_samples == 1
    w = RollingWindow(window_s=60, bucket_s=1, started_s=0)
    for i in range(60):
        w.add_value("ttft", 695.0 if i == 30 else 20.0, now_s=0.5 + i)
    f = w.figures(60.0)
    assert f.values()["ttft_p99_ms"] > 250  # one stall decides it: 0.41 of the way from 20 to 695 ms
    tracker = AlertTracker([rule])
    assert tracker.evaluate(f.values(), 60.0, f.counts()) == [] and tracker.short(rule) == (60, 100)
    for i in range(80):  # a real slow-down, with enough samples (30 + 80 in (30, 90]): it fires
        w.add_value("ttft", 900.0, now_s=60.5 + i * 0.25)
    f = w.figures(90.0)
    (event,) = tracker.evaluate(f.values(), 90.0, f.counts())
    assert event.status == "firing" and tracker.short(rule) is None


async def test_the_monitor_says_when_a_percentile_alert_cannot_fire() -> None:
    from tokspeed.monitor.loop import Monitor, MonitorSettings
    from tokspeed.monitor.probe import ProbeSettings

    lines: list[str] = []
    settings = MonitorSettings(probe=ProbeSettings(target="http://127.0.0.1:1/v1", rate=1.0),
                               rules=[parse_alert("ttft_p99_ms>800")], window_s=30, interval_s=3, prometheus_port=None)
    Monitor(settings, lines.append)._warn_unreachable()
    assert lines and "needs 100 probes" in lines[0] and "about 30" in lines[0] and "--window" in lines[0]
