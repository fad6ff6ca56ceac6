"""Alert delivery to a webhook: an Alertmanager-like JSON POST per event, with a timeout.

`payload(event, target)` builds the body (Alertmanager webhook format, version 4:
`status`, `alerts[]` with `labels`, `annotations`, `startsAt`, `endsAt`).
`WebhookSender.send` POSTs it; a failure (refused, timeout, non-2xx) is
reported through `on_failure` and counted, never raised: the monitor goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import orjson

from tokspeed.backends.redact import Redactor
from tokspeed.monitor.alerts import AlertEvent
from tokspeed.monitor.names import promql

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended" endsAt


def rfc3339(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def payload(event: AlertEvent, target: str, severity: str = "warning") -> dict[str, Any]:
    """The Alertmanager-style webhook body for one firing or resolved event."""
    rule = event.rule
    labels = {"alertname": rule.alert_name, "severity": severity, "target": target, "metric": rule.name}
    value = "no data" if event.value is None else f"{event.value:g}"
    annotations = {
        "summary": f"{rule.expression} {'is' if event.status == 'firing' else 'no longer'} met on {target}",
        "description": f"{rule} (value {value}); tokspeed monitor",
        "value": value,
        "expression": str(rule),
        "promql": promql(rule),
    }
    alert = {
        "status": event.status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(event.fired_at_s),
        "endsAt": rfc3339(event.at_s) if event.status == "resolved" else ZERO_TIME,
        "generatorURL": "",
        "fingerprint": rule.alert_name,
    }
    return {
        "version": "4",
        "receiver": "tokspeed-monitor",
        "status": event.status,
        "groupKey": f"tokspeed-monitor:{rule.alert_name}",
        "groupLabels": {"alertname": rule.alert_name},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "",
        "truncatedAlerts": 0,
        "alerts": [alert],
    }


def shown_url(url: str) -> tuple[str, Redactor]:
    """The webhook as it may be logged (scheme, host and port: Slack-style URLs carry their token in the
    path), and a redactor for messages that might quote the rest (path, query, password)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}", Redactor([url, parts.path, parts.query, parts.password or ""])


class WebhookSender:
    """POSTs events to `url` on one aiohttp session; counts and reports failures."""

    def __init__(self, url: str, target: str, on_failure: Callable[[str], None], timeout_s: float = 5.0) -> None:
        self.url = url
        self.target = target
        self.failures = 0
        self.sent = 0
        self._on_failure = on_failure
        self._timeout_s = timeout_s
        self._session: Any = None

    async def send(self, event: AlertEvent) -> bool:
        """Deliver one event; False (after reporting it) when delivery failed."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        body = orjson.dumps(payload(event, self.target))
        try:
            async with self._session.post(self.url, data=body, headers={"Content-Type": "application/json"},
                                          allow_redirects=False) as resp:  # a redirect is a failed delivery
                await resp.read()
                if resp.status >= 300:
                    return self._failed(f"HTTP {resp.status}", event)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}", event)
        self.sent += 1
        return True

    def _failed(self, why: str, event: AlertEvent) -> bool:
        self.failures += 1
        where, redact = shown_url(self.url)
        self._on_failure(f"webhook {where}: {event.rule.alert_name} {event.status} not delivered ({redact(why)})")
        return False

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
