"""Monitor mode: probe a live target on a schedule, keep rolling-window figures, export and alert.

    probe.py     sends low-rate probe requests through the OpenAI backend, backs off when the target is down
    window.py    time-bucketed ring of per-interval samples (bounded memory) -> rolling figures
    rules.py     `ttft_p99_ms>800 for 2m` -> AlertRule (reuses metrics.slo's name grammar)
    alerts.py    the pending -> firing -> resolved state machine (injected clock)
    names.py     the exported Prometheus metric names and the PromQL of each alert metric
    exporter.py  a prometheus_client collector on its own registry, served over HTTP
    webhook.py   Alertmanager-like JSON POSTs; failures logged, never raised
    promrules.py the same alerts as a Prometheus alerting-rules YAML file
    files.py     size-capped JSON-lines files (requests.jsonl, alerts.jsonl)
    histograms.py    Prometheus histogram deltas, sums and histogram_quantile (linear within buckets)
    server_window.py a scrape of the server's own /metrics -> Snapshot; deltas in a bounded ring -> ServerFigures
    server_source.py scrapes that endpoint once per interval (--server-metrics); failures are data, not crashes
    loop.py      the monitor itself: ties the above together until a duration or a signal
"""
