"""Every threshold the diagnosis rules use, in one place (docs/diagnosis.md lists them).

Rules receive a `Thresholds`; tests pass their own to move a boundary. The
defaults follow the seed article where it gives a number (5–10% run-to-run
spread is normal) and common practice elsewhere (Locust warns when the load
generator passes 90% CPU; p99 needs about 100 samples to be more than the max).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Thresholds:
    # client_bound
    lateness_p99_ms: float = 10.0  # open-loop schedule lag (sent − scheduled) p99 above this: warning
    lateness_critical_ms: float = 100.0  # ... above this: critical
    loop_lag_p99_ms: float = 20.0  # event-loop lag p99 (client telemetry)
    client_cpu_pct: float = 90.0  # tokspeed's process CPU mean, 100 = one core (its event loop is one thread)
    # gpu_underutilised
    gpu_util_low_pct: float = 50.0  # GPU utilisation mean below this ...
    busy_concurrency: int = 16  # ... while the server queues, or the client keeps this many requests in flight
    # unstable
    unstable_cv: float = 0.10  # coefficient of variation across iterations (the seed: 5–10% is normal)
    # cold_start
    cold_factor: float = 1.5  # a first request / first iteration this many times slower than the rest
    cold_min_ms: float = 5.0  # ... and slower by at least this much (ignores noise on tiny latencies)
    cold_min_requests: int = 5  # measured requests needed before judging
    # ttft_queueing / ttft_prefill
    queue_waiting_mean: float = 0.5  # server `waiting` mean above this: requests queue
    queue_growth: float = 2.0  # TTFT p50 at the highest load / at the lowest, across points
    same_input_ratio: float = 1.2  # ... while the mean prompt length changed by less than this factor
    prefill_r2: float = 0.5  # a line explains TTFT vs prompt tokens at least this well ...
    prefill_share: float = 0.5  # ... and prefill (slope × mean prompt) is at least this share of mean TTFT
    prefill_min_points: int = 10  # requests needed to fit within one load point
    prefill_min_spread: float = 2.0  # longest prompt / shortest within a point
    kv_cache_full_pct: float = 90.0  # server KV-cache usage max at or above this: the cache is the limit
    # output_length
    early_stop_share: float = 0.10  # share of responses shorter than max_tokens that fires the rule
    # errors
    error_critical_share: float = 0.05  # a cause failing at least this share of requests is critical
    max_error_groups: int = 5  # causes listed per load point (the rest are summed in one finding)
    # reconnects
    reconnect_share: float = 0.05  # measured requests that opened a new connection, above this share ...
    reconnect_min: int = 3  # ... and at least this many
    # too_few_samples
    min_samples_p99: int = 100  # completed requests below this: p99 is essentially the max
    # ttft_client_gap (server-reported timings)
    gap_min_ms: float = 20.0  # client TTFT p50 − the server's own TTFT p50 at least this ...
    gap_share: float = 0.25  # ... and at least this share of the client's TTFT p50
    gap_min_requests: int = 5  # requests with server timings needed
    # ttft_tail
    tail_factor: float = 5.0  # TTFT p99 at least this many times p50 ...
    tail_min_ms: float = 50.0  # ... and above it by at least this much (with ≥ min_samples_p99 requests)
    bimodal_min_share: float = 0.10  # each mode holds at least this share of the requests ...
    bimodal_ratio: float = 2.0  # ... the slower mode's fastest is at least this many times the faster's slowest
    bimodal_min_requests: int = 20
    bimodal_min_gap_ms: float = 10.0  # ... and the modes at least this far apart (a busy machine's jitter is not a mode)
    # itl_load_growth / throughput_knee (sweeps of one kind and target)
    itl_growth: float = 1.5  # ITL p50 at the highest load / at the lowest ...
    itl_growth_min_ms: float = 2.0  # ... and larger by at least this much
    knee_gain: float = 0.10  # past the knee, more load gains less than this share of throughput ...
    knee_latency_growth: float = 1.5  # ... while E2E p50 grows at least this many times
    # server_bound
    server_keep_up: float = 0.90  # an open-loop point completing below this share of the arrivals, the client on time


DEFAULT = Thresholds()
