"""Rules over records and telemetry: is the measurement valid, and why is it slow?

`tokspeed.diagnosis.rules.diagnose(result, records)` runs every rule and returns
`Finding`s (`tokspeed.results.findings`): the rule, a severity, a one-line title,
the numbers behind it and what to change. One module per family of rules:
`client` (client_bound), `gpu` (gpu_underutilised), `stability` (unstable,
cold_start, too_few_samples), `ttft` (ttft_queueing, ttft_prefill), `tokens`
(output_length, token_count), `errors` (errors). Every threshold is in
`thresholds`. This package imports nothing at import time.
"""
