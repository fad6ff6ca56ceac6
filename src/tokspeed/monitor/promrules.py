"""The monitor's alerts as a Prometheus alerting-rules file (for users who alert in Prometheus).

One group, `tokspeed-monitor`, one rule per `--alert`: `alert` is the rule's
stable name, `expr` the PromQL over the exported metrics (`names.promql`),
`for` the rule's duration in Prometheus' format, and labels/annotations that
match what the webhook sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokspeed.monitor.names import promql
from tokspeed.monitor.rules import AlertRule, prom_duration


def rules_document(rules: Sequence[AlertRule], severity: str = "warning") -> dict[str, Any]:
    entries = []
    for rule in rules:
        entry: dict[str, Any] = {"alert": rule.alert_name, "expr": promql(rule)}
        if rule.for_s:
            entry["for"] = prom_duration(rule.for_s)
        entry["labels"] = {"severity": severity, "metric": rule.name}
        entry["annotations"] = {
            "summary": f"{rule.expression} on {{{{ $labels.target }}}}",
            "description": f"tokspeed monitor: {rule} (value {{{{ $value }}}})",
        }
        entries.append(entry)
    return {"groups": [{"name": "tokspeed-monitor", "rules": entries}]}


def rules_yaml(rules: Sequence[AlertRule]) -> str:
    import yaml  # type: ignore[import-untyped]

    header = "# Prometheus alerting rules written by `tokspeed monitor --write-prometheus-rules`\n"
    return header + yaml.safe_dump(rules_document(rules), sort_keys=False, allow_unicode=True)
