"""Monitor alerts: thresholds keep their exact value in names, expressions and PromQL;
a webhook URL's secret (Slack-style token path, password, query key) never reaches the log."""

from __future__ import annotations

import socket

from tokspeed.monitor.alerts import AlertTracker
from tokspeed.monitor.names import promql
from tokspeed.monitor.promrules import rules_document
from tokspeed.monitor.rules import parse_alert, parse_alerts
from tokspeed.monitor.webhook import WebhookSender


def test_large_threshold_is_not_rounded_to_six_digits() -> None:
    rule = parse_alert("output_tokens_per_s<1234567 for 1m")
    assert rule.expression == "output_tokens_per_s<1234567"
    assert promql(rule) == "tokspeed_monitor_output_tokens_per_second < 1234567"
    assert rules_document([rule])["groups"][0]["rules"][0]["expr"].endswith("< 1234567")
    assert rule.alert_name == "output_tokens_per_s_lt_1234567"


def test_two_thresholds_that_differ_past_six_digits_are_two_alerts() -> None:
    rules = parse_alerts(["total_tokens_per_s<1000000", "total_tokens_per_s<1000001"])
    assert len({r.alert_name for r in rules}) == 2


def test_usual_thresholds_keep_their_names() -> None:
    assert parse_alert("ttft_p99_ms>800 for 2m").alert_name == "ttft_p99_ms_gt_800"
    assert parse_alert("error_rate>0.02").alert_name == "error_rate_gt_0_02"
    assert promql(parse_alert("ttft_p99_ms>800")) == 'tokspeed_monitor_ttft_seconds{quantile="0.99"} * 1000 > 800'


async def test_a_failed_webhook_is_logged_without_its_secret_path() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = "T000/B000/XXXXSECRETXXXX"
    notes: list[str] = []
    url = f"http://user:pw-SECRET@127.0.0.1:{port}/services/{secret}?token=q-SECRET"
    sender = WebhookSender(url, "t", notes.append, timeout_s=2)
    (event,) = AlertTracker([parse_alert("error_rate>0.5")]).evaluate({"error_rate": 1.0}, now=0)
    assert await sender.send(event) is False
    await sender.close()
    assert len(notes) == 1 and f"127.0.0.1:{port}" in notes[0] and "firing not delivered" in notes[0]
    assert "SECRET" not in notes[0]
