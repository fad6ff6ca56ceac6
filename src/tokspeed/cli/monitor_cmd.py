"""`tokspeed monitor`: watch a live target continuously, export Prometheus metrics, alert on thresholds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokspeed.cli import tls_flags as tf

HELP = """Watch a live OpenAI-compatible target: low-rate probes, rolling-window
percentiles, a Prometheus exporter and alerts with durations.

  tokspeed monitor --target http://127.0.0.1:8000/v1 --interval 15s --probe-rate 0.2 \\
      --prometheus-port 9464 --alert 'ttft_p99_ms>800 for 2m' --alert 'error_rate>0.02' \\
      --alert-webhook http://127.0.0.1:9000/hook --out monitor/

Every --interval the figures over the last --window (TTFT, ITL, TPOT, E2E
percentiles, decode speed, throughput of the probes, error rate, GPU
utilisation when NVML sees a GPU) are logged, exported on
http://HOST:PORT/metrics (names tokspeed_monitor_*, see
dashboards/tokspeed-monitor.json) and checked against each --alert.

An alert is NAME OP VALUE, optionally followed by 'for DURATION'; NAME as in --slo (ttft_p99_ms,
e2e_p50_ms, itl_p95_ms, decode_p50_tokens_per_s, error_rate,
output_tokens_per_s, ...) or gpu_utilization_pct. It goes pending when its
condition holds, fires once it has held for DURATION, and resolves when it
stops holding; firing and resolving are logged to stderr, appended to
DIR/alerts.jsonl and POSTed (Alertmanager-style JSON) to --alert-webhook.
A window with no data for a name never meets its condition.

--server-metrics auto (or a URL) also scrapes the server's own Prometheus
/metrics (vLLM, SGLang, TGI, llama.cpp, Triton, tokspeed sim) every --interval: from
the deltas of its latency histograms between scrapes come server-side rolling
TTFT / ITL / TPOT / E2E quantiles (Prometheus histogram_quantile: linear
interpolation within the server's buckets, so only as fine as those buckets)
and means, from its counters requests/s and generated tokens/s, plus running,
waiting and KV-cache usage. They are exported as tokspeed_monitor_server_* and
alertable as server_ttft_p99_ms, server_itl_p50_ms, server_e2e_mean_ms,
server_requests_per_s, server_generation_tokens_per_s, server_running,
server_waiting, server_kv_cache_usage_pct, server_up. A server restart (its
counters going down) is counted from the restart. --probe-rate 0 with
--server-metrics sends no requests at all (passive monitoring; target_up then
follows the scrapes).

  tokspeed monitor --target http://127.0.0.1:8000/v1 --probe-rate 0 --server-metrics auto \\
      --alert 'server_ttft_p99_ms>800 for 2m' --alert 'server_waiting>10'

The target going down is measured, not fatal: failed probes count as errors
(error_rate goes to 1) and probing backs off up to --max-backoff until the
target answers again. Runs until --duration or Ctrl-C (exit 130, with a
summary).

  tokspeed monitor --alert 'ttft_p99_ms>800 for 2m' --write-prometheus-rules rules.yml

writes the same alerts as Prometheus alerting rules over the exported names
and exits (no --target needed).
"""


def monitor(
    target: Annotated[str | None, typer.Option("--target", "-t", help="Server base URL ending in /v1. [default: required]", envvar="TOKSPEED_TARGET")] = None,
    interval: Annotated[str, typer.Option("--interval", help="How often figures are computed, exported and alerts evaluated (also the window's bucket width).")] = "15s",
    window: Annotated[str, typer.Option("--window", help="Rolling window for percentiles, rates and error rate.")] = "5m",
    probe_rate: Annotated[float, typer.Option("--probe-rate", help="Probe requests per second; 0: no probes (needs --server-metrics).", min=0.0)] = 0.2,
    server_metrics: Annotated[str, typer.Option("--server-metrics", metavar="URL|auto|off", help="Also scrape the server's own Prometheus metrics every --interval: auto (the target's /metrics, if it serves one tokspeed knows), a URL, or off.")] = "off",
    arrival: Annotated[str, typer.Option("--arrival", help="Probe spacing: constant or poisson.")] = "constant",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="max_tokens of each probe (keep it small).", min=1)] = 16,
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt of each probe.")] = "Count from 1 to 20.",
    api: Annotated[str, typer.Option("--api", help="chat or completions.")] = "chat",
    model: Annotated[str | None, typer.Option("--model", help="Model name; discovered from /v1/models when omitted. [default: first of GET /v1/models]")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Bearer token. Never written to files or logs. [default: none]", envvar="OPENAI_API_KEY")] = None,
    timeout: Annotated[str, typer.Option("--timeout", help="A probe that has not completed by then is an error.")] = "30s",
    ca_cert: tf.CaCert = None,
    insecure: tf.Insecure = False,
    client_cert: tf.ClientCert = None,
    client_key: tf.ClientKey = None,
    max_in_flight: Annotated[int, typer.Option("--max-in-flight", help="Probes out at once; a probe due beyond that is skipped.", min=1)] = 4,
    max_backoff: Annotated[str, typer.Option("--max-backoff", help="Longest gap between probes while the target is unreachable.")] = "30s",
    alert: Annotated[list[str] | None, typer.Option("--alert", metavar="EXPR", help="NAME OP VALUE, optionally 'for DURATION', e.g. 'ttft_p99_ms>800 for 2m' (repeatable). [default: none]")] = None,
    alert_webhook: Annotated[str | None, typer.Option("--alert-webhook", metavar="URL", help="POST firing/resolved alerts here (Alertmanager webhook JSON). [default: none]")] = None,
    prometheus_port: Annotated[int, typer.Option("--prometheus-port", help="Port of the /metrics exporter (0 picks a free one, printed at start).", min=0, max=65535)] = 9464,
    prometheus_host: Annotated[str, typer.Option("--prometheus-host", help="Address the exporter binds.")] = "127.0.0.1",
    no_prometheus: Annotated[bool, typer.Option("--no-prometheus", help="Do not serve the exporter.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write DIR/requests.jsonl (each probe) and DIR/alerts.jsonl (each event). [default: none]")] = None,
    max_file_mb: Annotated[float, typer.Option("--max-file-mb", help="Rotate each file to NAME.1 past this size.", min=0.001)] = 100.0,
    duration: Annotated[str | None, typer.Option("--duration", help="Stop after this long (30s, 5m). [default: until Ctrl-C]")] = None,
    no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Do not read GPU telemetry (NVML).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log alerts and notes only, not the per-interval status line.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of Poisson probe spacing.")] = 0,
    write_prometheus_rules: Annotated[str | None, typer.Option("--write-prometheus-rules", metavar="FILE|-", help="Write the --alert rules as Prometheus alerting rules YAML and exit. [default: none]")] = None,
) -> int:
    from tokspeed.monitor.rules import parse_alerts

    rules = parse_alerts(alert)
    if write_prometheus_rules is not None:
        return _write_rules(write_prometheus_rules, rules)
    settings = _settings(locals(), rules)
    return _run(settings)


def _write_rules(dest: str, rules: list[Any]) -> int:
    from tokspeed.errors import ConfigError
    from tokspeed.monitor.promrules import rules_yaml

    if not rules:
        raise ConfigError("--write-prometheus-rules needs at least one --alert", hint="add e.g. --alert 'ttft_p99_ms>800 for 2m'")
    text = rules_yaml(rules)
    if dest == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(dest).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {dest}: {exc}") from exc
    print(f"wrote {len(rules)} Prometheus alerting rule(s) to {dest}", file=sys.stderr)
    return 0


def _settings(opts: dict[str, Any], rules: list[Any]) -> Any:
    from tokspeed.errors import ConfigError
    from tokspeed.monitor.loop import MonitorSettings
    from tokspeed.monitor.probe import ProbeSettings
    from tokspeed.units import parse_duration

    if not opts["target"]:
        raise ConfigError("tokspeed monitor needs --target", hint="e.g. --target http://127.0.0.1:8000/v1")
    from tokspeed.backends.http_policy import refuse_proxy

    refuse_proxy(opts["target"])  # before the first probe: it would not go through the proxy either
    if opts["arrival"] not in ("constant", "poisson"):
        raise ConfigError(f"--arrival {opts['arrival']!r}", hint="use constant or poisson")
    if opts["api"] not in ("chat", "completions"):
        raise ConfigError(f"--api {opts['api']!r}", hint="use chat or completions")
    server_metrics = _server_metrics(opts["server_metrics"], opts["probe_rate"])
    if server_metrics and server_metrics.startswith(("http://", "https://")):
        refuse_proxy(server_metrics, what="--server-metrics")
    interval_s, window_s = parse_duration(opts["interval"]), parse_duration(opts["window"])
    if interval_s <= 0 or window_s < interval_s:
        raise ConfigError("--window must be at least --interval, and --interval above 0", hint="e.g. --interval 15s --window 5m")
    probe = ProbeSettings(
        target=opts["target"],
        rate=opts["probe_rate"],
        api=opts["api"],
        model=opts["model"],
        api_key=opts["api_key"],
        max_tokens=opts["max_tokens"],
        prompt=opts["prompt"],
        arrival=opts["arrival"],
        timeout_s=parse_duration(opts["timeout"]),
        max_in_flight=opts["max_in_flight"],
        max_backoff_s=parse_duration(opts["max_backoff"]),
        seed=opts["seed"],
        policy=tf.policy(ca_cert=opts["ca_cert"], insecure=opts["insecure"], client_cert=opts["client_cert"],
                         client_key=opts["client_key"]),
    )
    return MonitorSettings(
        probe=probe,
        rules=rules,
        interval_s=interval_s,
        window_s=window_s,
        webhook_url=opts["alert_webhook"],
        prometheus_host=opts["prometheus_host"],
        prometheus_port=None if opts["no_prometheus"] else opts["prometheus_port"],
        out_dir=opts["out"],
        max_file_bytes=int(opts["max_file_mb"] * 2**20),
        duration_s=parse_duration(opts["duration"]) if opts["duration"] else None,
        gpu=not opts["no_gpu"],
        quiet=opts["quiet"],
        server_metrics=server_metrics,
    )


def _server_metrics(spec: str, probe_rate: float) -> str | None:
    """--server-metrics as the settings take it: "auto", a URL, or None (off); passive needs it."""
    from tokspeed.errors import ConfigError

    value = spec.strip()
    chosen = None if value.lower() == "off" else ("auto" if value.lower() == "auto" else value)
    if chosen not in (None, "auto") and not chosen.startswith(("http://", "https://")):
        raise ConfigError(f"--server-metrics {spec!r}", hint="use auto, off or an http(s):// URL such as http://127.0.0.1:8000/metrics")
    if probe_rate <= 0 and chosen is None:
        raise ConfigError("--probe-rate 0 leaves nothing to monitor without --server-metrics",
                          hint="add --server-metrics auto (passive: the server's own metrics only) or a probe rate above 0")
    return chosen


def _run(settings: Any) -> int:
    import asyncio

    from tokspeed.cli.exit_codes import EXIT_INTERRUPTED
    from tokspeed.errors import ConfigError
    from tokspeed.monitor.loop import Monitor

    def log(line: str) -> None:
        print(f"[monitor] {line}", file=sys.stderr, flush=True)

    def ready(mon: Monitor) -> None:
        where = f"exporter on http://{settings.prometheus_host}:{mon.exporter_port}/metrics" if mon.exporter_port else "no exporter"
        rules = ", ".join(str(r) for r in settings.rules) or "no alerts"
        probing = f"probing {mon.target} at {settings.probe.rate:g}/s" if not mon.passive else f"watching {mon.target} (no probes)"
        scraping = f"; scraping {mon.server.url}" if mon.server is not None else ""
        print(f"tokspeed monitor: {probing}{scraping}; {where}; {rules}", flush=True)

    try:
        summary = asyncio.run(Monitor(settings, log).run(ready))
    except OSError as exc:  # the exporter's port is taken, or DIR cannot be written
        raise ConfigError(f"cannot start the monitor: {exc}", hint="pick another --prometheus-port (0: any free one) or --out") from exc
    for line in summary.lines():
        print(f"[monitor] {line}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED if summary.interrupted else 0
