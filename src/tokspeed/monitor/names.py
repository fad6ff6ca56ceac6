"""The exported Prometheus metric names (stable: dashboards and rules use them) and alert PromQL.

Latency families are summaries in base units with a `quantile` label
("0", "0.5", "0.9", "0.95", "0.99", "0.999", "1": min, percentiles, max) and
`_sum`/`_count` over the window, plus a `_mean_` gauge; every family carries `target`. `promql(rule)` is the
expression over these names that an `AlertRule` watches, so the rules file a
user loads into Prometheus alerts on exactly what the monitor alerts on.
"""

from __future__ import annotations

from tokspeed.monitor.rules import AlertRule, number

PREFIX = "tokspeed_monitor"
# per-request metric -> (family name, scale from the window's unit to the exported base unit, help)
LATENCY = {
    "ttft": (f"{PREFIX}_ttft_seconds", 1e-3, "Time to first token over the rolling window"),
    "itl": (f"{PREFIX}_itl_seconds", 1e-3, "Inter-token latency (per token) over the rolling window"),
    "tpot": (f"{PREFIX}_tpot_seconds", 1e-3, "Time per output token over the rolling window"),
    "e2e": (f"{PREFIX}_e2e_seconds", 1e-3, "End-to-end request latency over the rolling window"),
    "decode": (f"{PREFIX}_decode_tokens_per_second", 1.0, "Per-user decode speed over the rolling window"),
}
QUANTILE_OF_STAT = {"min": "0", "p50": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99", "p999": "0.999", "max": "1"}
RUN_LEVEL = {
    "error_rate": f"{PREFIX}_error_ratio",
    "requests_per_s": f"{PREFIX}_requests_per_second",
    "output_tokens_per_s": f"{PREFIX}_output_tokens_per_second",
    "total_tokens_per_s": f"{PREFIX}_total_tokens_per_second",
}
REQUESTS_TOTAL = f"{PREFIX}_requests_total"  # counter {target, outcome="ok"|"error"}
ERRORS_TOTAL = f"{PREFIX}_errors_total"  # counter {target, kind}
WINDOW_REQUESTS = f"{PREFIX}_window_requests"  # gauge {target}: probes ended inside the window
UP = f"{PREFIX}_target_up"  # gauge {target}: 1 when the last probe completed
LAST_PROBE = f"{PREFIX}_last_probe_timestamp_seconds"
ALERT_FIRING = f"{PREFIX}_alert_firing"  # gauge {alert, target}: 1 while firing
ALERT_PENDING = f"{PREFIX}_alert_pending"  # gauge {alert, target}: 1 while pending
ALERT_VALUE = f"{PREFIX}_alert_value"  # gauge {alert, target}: the value the alert last read
GPU_UTIL = f"{PREFIX}_gpu_utilization_percent"  # gauge {gpu}
GPU_MEMORY = f"{PREFIX}_gpu_memory_used_bytes"  # gauge {gpu}
WEBHOOK_FAILURES = f"{PREFIX}_webhook_failures_total"

# server-side (--server-metrics): from the engine's own histograms and counters, see monitor/server_window.py
SERVER_LATENCY = {
    "ttft": (f"{PREFIX}_server_ttft_seconds", "Server-side time to first token over the rolling window (from its histogram)"),
    "itl": (f"{PREFIX}_server_itl_seconds", "Server-side inter-token latency over the rolling window (from its histogram)"),
    "tpot": (f"{PREFIX}_server_tpot_seconds", "Server-side time per output token over the rolling window (from its histogram)"),
    "e2e": (f"{PREFIX}_server_e2e_seconds", "Server-side end-to-end latency over the rolling window (from its histogram)"),
}
SERVER_QUANTILE_OF_STAT = {"p50": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99", "p999": "0.999"}
# alert name -> exported gauge (same unit)
SERVER_SCALARS = {
    "server_requests_per_s": f"{PREFIX}_server_requests_per_second",
    "server_generation_tokens_per_s": f"{PREFIX}_server_generation_tokens_per_second",
    "server_running": f"{PREFIX}_server_requests_running",
    "server_waiting": f"{PREFIX}_server_requests_waiting",
    "server_kv_cache_usage_pct": f"{PREFIX}_server_kv_cache_usage_percent",
    "server_up": f"{PREFIX}_server_up",
}
SERVER_WINDOW_REQUESTS = f"{PREFIX}_server_window_requests"  # gauge: requests the server finished inside the window
SERVER_SCRAPES_TOTAL = f"{PREFIX}_server_scrapes_total"  # counter {outcome="ok"|"error"}
SERVER_RESETS_TOTAL = f"{PREFIX}_server_restarts_total"  # counter: restarts seen (counters went down); promtool rejects "counter" in a counter name
SERVER_LAST_SCRAPE = f"{PREFIX}_server_last_scrape_timestamp_seconds"  # gauge: Unix time of the last good scrape
SERVER_WINDOW_SECONDS = f"{PREFIX}_server_window_seconds"  # gauge: time the window's deltas cover, up to it


def server_mean_name(metric: str) -> str:
    """tokspeed_monitor_server_ttft_mean_seconds."""
    return SERVER_LATENCY[metric][0].removesuffix("_seconds") + "_mean_seconds"


def mean_name(metric: str) -> str:
    """The `_mean_` gauge of a latency family: tokspeed_monitor_ttft_mean_seconds."""
    family = LATENCY[metric][0]
    head, unit = family[len(PREFIX) + 1 :].split("_", 1)
    return f"{PREFIX}_{head}_mean_{unit}"


def exported_names() -> set[str]:
    """Every metric name the exporter can emit (counters with their `_total` suffix)."""
    summaries = {family for family, _, _ in LATENCY.values()} | {family for family, _ in SERVER_LATENCY.values()}
    names = summaries | {f"{family}_{part}" for family in summaries for part in ("sum", "count")}
    names |= {mean_name(m) for m in LATENCY}
    names |= set(RUN_LEVEL.values())
    names |= {REQUESTS_TOTAL, ERRORS_TOTAL, WINDOW_REQUESTS, UP, LAST_PROBE, ALERT_FIRING, ALERT_PENDING}
    names |= {ALERT_VALUE, GPU_UTIL, GPU_MEMORY, WEBHOOK_FAILURES}
    names |= {family for family, _ in SERVER_LATENCY.values()} | {server_mean_name(m) for m in SERVER_LATENCY}
    names |= set(SERVER_SCALARS.values()) | {SERVER_WINDOW_REQUESTS, SERVER_SCRAPES_TOTAL, SERVER_RESETS_TOTAL}
    names |= {SERVER_LAST_SCRAPE, SERVER_WINDOW_SECONDS}
    return names


def promql(rule: AlertRule) -> str:
    """The PromQL expression over exported metrics that is true when `rule` is met."""
    return f"{_series(rule)} {rule.op} {number(rule.value)}"


def _series(rule: AlertRule) -> str:
    if rule.name in SERVER_SCALARS:
        return SERVER_SCALARS[rule.name]
    if rule.metric.startswith("server_"):
        metric = rule.metric.removeprefix("server_")
        if rule.stat == "mean":
            return f"{server_mean_name(metric)} * 1000"
        return f'{SERVER_LATENCY[metric][0]}{{quantile="{SERVER_QUANTILE_OF_STAT[rule.stat or "p50"]}"}} * 1000'
    if rule.name in RUN_LEVEL:
        return RUN_LEVEL[rule.name]
    if rule.name == "gpu_utilization_pct":
        return f"avg without (gpu) ({GPU_UTIL})"
    family, scale, _ = LATENCY[rule.metric]
    to_rule_unit = "" if scale == 1.0 else f" * {1 / scale:g}"
    if rule.stat == "mean":
        return f"{mean_name(rule.metric)}{to_rule_unit}"
    return f'{family}{{quantile="{QUANTILE_OF_STAT[rule.stat or "p50"]}"}}{to_rule_unit}'
