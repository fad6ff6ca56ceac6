"""Alert rules: parsing `ttft_p99_ms>800 for 2m` into an `AlertRule`.

The condition is a metric name, an operator and a threshold, parsed by
`tokspeed.metrics.slo.parse_slo` (names follow `<metric>_<stat>_<unit>`), so a
monitor alert and a run's `--slo` read the same names. Unlike an SLO, the
expression says when the alert is *on*: `ttft_p99_ms>800` fires while the
rolling p99 TTFT is above 800 ms. `for D` (D a duration such as `30s`, `2m`)
makes the condition hold that long before the alert fires; without it the
alert fires on the first evaluation that meets it.

A percentile alert needs enough samples in the window for its percentile to be more
than one value: `min_samples` = ceil(1 / (1 − q)) (p50 2, p90 10, p95 20, p99 100,
p99.9 1000), so that one outlier weighs at most 1/n of the figure; below it the alert
reads "no data" and cannot fire (the monitor says so at start when the probe rate and
window cannot supply them, and `AlertTracker.short` tells while they are missing).
min, max and mean need one.

Names a monitor can watch: percentile names of ttft/itl/tpot/e2e (ms) and
decode (tokens_per_s) with stat p50, p90, p95, p99, p999, min, max or mean;
error_rate, requests_per_s, output_tokens_per_s, total_tokens_per_s;
gpu_utilization_pct (mean over GPUs, when NVML telemetry is available); and, with
--server-metrics, the server's own figures: server_<ttft|itl|tpot|e2e>_<stat>_ms (stat p50,
p90, p95, p99, p999 or mean), server_requests_per_s, server_generation_tokens_per_s,
server_running, server_waiting, server_kv_cache_usage_pct, server_up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tokspeed.errors import ConfigError
from tokspeed.metrics.slo import SLO, parse_slo
from tokspeed.units import parse_duration

WINDOW_METRICS = ("ttft", "itl", "tpot", "e2e", "decode")  # per-request metrics kept in the window
ALERT_STATS = ("p50", "p90", "p95", "p99", "p999", "min", "max", "mean")
_FOR_RE = re.compile(r"^(?P<cond>.*?)\s+for\s+(?P<dur>\S+)\s*$")
_GPU_RE = re.compile(r"^\s*(gpu_utilization_pct)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")
_SERVER_RE = re.compile(r"^\s*(server_[a-z0-9_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")
_SERVER_LATENCY_RE = re.compile(r"^server_(ttft|itl|tpot|e2e)_(p50|p90|p95|p99|p999|mean)_ms$")
SERVER_SCALAR_NAMES = (
    "server_requests_per_s", "server_generation_tokens_per_s", "server_running", "server_waiting",
    "server_kv_cache_usage_pct", "server_up",
)
_QUANTILE = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
_HINT = "write NAME OP VALUE [for DURATION], e.g. --alert 'ttft_p99_ms>800 for 2m' or --alert 'error_rate>0.02'"


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alert: `name` (the value it reads), `op`, `value`, and how long it must hold (`for_s`)."""

    name: str  # e.g. ttft_p99_ms, error_rate, gpu_utilization_pct
    op: str
    value: float
    for_s: float = 0.0
    metric: str = ""  # base metric (ttft, ...) or the run-level name
    stat: str | None = None

    @property
    def expression(self) -> str:
        """The condition as the user wrote it, normalised: `ttft_p99_ms>800`."""
        return f"{self.name}{self.op}{number(self.value)}"

    @property
    def alert_name(self) -> str:
        """A stable identifier valid as a Prometheus alert and label value: `ttft_p99_ms_gt_800`."""
        op = {">": "gt", ">=": "ge", "<": "lt", "<=": "le"}[self.op]
        value = number(self.value).replace("-", "neg").replace("+", "").replace(".", "_")
        return f"{self.name}_{op}_{value}"

    def __str__(self) -> str:
        return self.expression + (f" for {prom_duration(self.for_s)}" if self.for_s else "")

    @property
    def min_samples(self) -> int:
        """Samples the window needs before this alert reads its value: ceil(1 / (1 − q)) for a percentile, else 1."""
        q = _QUANTILE.get(self.stat or "")
        return 1 if q is None else math.ceil(round(1 / (1 - q), 9))

    def met(self, observed: float | None) -> bool:
        """True when the alert condition holds; a missing value (no data in the window) never does."""
        return SLO(metric=self.metric, stat=self.stat, unit="", op=self.op, value=self.value).holds(observed)


def number(value: float) -> str:
    """A threshold written exactly (15 significant digits; `:g` would round 1234567 to 1.23457e+06)."""
    return f"{value:.15g}"


def prom_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: 120 -> "2m", 90 -> "1m30s", 0.5 -> "500ms"."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


def parse_alert(text: str) -> AlertRule:
    """Parse `ttft_p99_ms>800 for 2m`, `error_rate>0.02`, `gpu_utilization_pct>=95 for 5m`."""
    cond, for_s = _split_for(text)
    server = _SERVER_RE.match(cond)
    if server:
        name, op, raw = server.groups()
        return _server_rule(text, name, op, raw, for_s)
    gpu = _GPU_RE.match(cond)
    if gpu:
        name, op, raw = gpu.groups()
        return AlertRule(name=name, op=op, value=float(raw), for_s=for_s, metric=name)
    try:
        slo = parse_slo(cond)
    except ConfigError as exc:
        raise ConfigError(f"--alert {text!r}: {exc}", hint=exc.hint or _HINT) from None
    if slo.kind == "run":
        return AlertRule(name=slo.name, op=slo.op, value=slo.value, for_s=for_s, metric=slo.metric)
    if slo.metric not in WINDOW_METRICS or slo.stat not in ALERT_STATS:
        raise ConfigError(
            f"--alert {text!r}: the monitor cannot watch {slo.name!r}",
            hint=f"use {', '.join(WINDOW_METRICS)} with a stat in {', '.join(ALERT_STATS)} "
            "(e.g. ttft_p99_ms), error_rate, requests_per_s, output_tokens_per_s, total_tokens_per_s "
            "or gpu_utilization_pct",
        )
    return AlertRule(name=slo.name, op=slo.op, value=slo.value, for_s=for_s, metric=slo.metric, stat=slo.stat)


def _server_rule(text: str, name: str, op: str, raw: str, for_s: float) -> AlertRule:
    """`server_ttft_p99_ms>800`, `server_waiting>10`: a figure read from the server's own /metrics."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"--alert {text!r}: {raw!r} is not a number", hint=_HINT) from None
    latency = _SERVER_LATENCY_RE.match(name)
    if latency:
        return AlertRule(name=name, op=op, value=value, for_s=for_s, metric=f"server_{latency.group(1)}",
                         stat=latency.group(2))
    if name in SERVER_SCALAR_NAMES:
        return AlertRule(name=name, op=op, value=value, for_s=for_s, metric=name)
    raise ConfigError(
        f"--alert {text!r}: the monitor has no server figure {name!r}",
        hint="use server_<ttft|itl|tpot|e2e>_<p50|p90|p95|p99|p999|mean>_ms or one of " + ", ".join(SERVER_SCALAR_NAMES),
    )


def _split_for(text: str) -> tuple[str, float]:
    m = _FOR_RE.match(text.strip())
    if not m:
        return text, 0.0
    try:
        seconds = parse_duration(m.group("dur"))
    except ConfigError:
        raise ConfigError(f"--alert {text!r}: cannot parse duration {m.group('dur')!r}", hint=_HINT) from None
    return m.group("cond"), seconds


def parse_alerts(texts: list[str] | None) -> list[AlertRule]:
    """Parse every `--alert`; two alerts with the same condition are one too many."""
    rules = [parse_alert(t) for t in texts or ()]
    seen: set[str] = set()
    for rule in rules:
        if rule.alert_name in seen:
            raise ConfigError(f"--alert {rule.expression!r} is given twice", hint="give each condition once")
        seen.add(rule.alert_name)
    return rules
