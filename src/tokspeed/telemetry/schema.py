"""What telemetry saves: summaries in run.json, one sample per line in telemetry.jsonl.

Samplers (GPU through NVML, the client process and host, a server's Prometheus
endpoint) run beside the load and append samples to `telemetry.jsonl` as they
are taken. When a load point (or the run) ends, its samples are summarised into
these models. Every field is optional: a missing GPU, driver or endpoint is a
note, never a failure.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

TELEMETRY_FILE = "telemetry.jsonl"


class SeriesStats(BaseModel):
    """A sampled quantity over a time window."""

    mean: float | None = None
    max: float | None = None
    min: float | None = None
    p99: float | None = None
    samples: int = 0


class GPUSummary(BaseModel):
    index: int
    name: str | None = None
    memory_total_mib: float | None = None
    utilization_pct: SeriesStats = Field(default_factory=SeriesStats)
    memory_used_mib: SeriesStats = Field(default_factory=SeriesStats)
    power_w: SeriesStats = Field(default_factory=SeriesStats)
    sm_clock_mhz: SeriesStats = Field(default_factory=SeriesStats)
    temperature_c: SeriesStats = Field(default_factory=SeriesStats)
    energy_j: float | None = Field(None, description="energy used over the window (NVML total-energy counter delta)")


class ClientSummary(BaseModel):
    """tokspeed's own process and the host it runs on."""

    process_cpu_pct: SeriesStats = Field(default_factory=SeriesStats, description="100 = one core busy")
    host_cpu_pct: SeriesStats = Field(default_factory=SeriesStats, description="all cores, 100 = every core busy")
    rss_mib: SeriesStats = Field(default_factory=SeriesStats)
    loop_lag_ms: SeriesStats = Field(default_factory=SeriesStats, description="event-loop lag: how late a timer fires")
    cpu_seconds: float | None = Field(None, description="CPU time (user+sys) the tokspeed process used in the window")
    cpu_ms_per_request: float | None = Field(None, description="cpu_seconds x 1000 / requests finished in the window")
    cpu_count: int | None = None


class SpecDecodeSummary(BaseModel):
    """Speculative decoding over the window, from the server's counters (vLLM's `vllm:spec_decode_*`)."""

    drafts: float = Field(description="drafts proposed (Δ num_drafts)")
    draft_tokens: float = Field(description="draft tokens proposed (Δ num_draft_tokens)")
    accepted_tokens: float = Field(description="draft tokens accepted (Δ num_accepted_tokens)")
    acceptance_rate: float | None = Field(None, description="accepted_tokens / draft_tokens, 0..1")
    mean_acceptance_length: float | None = Field(
        None, description="1 + accepted_tokens / drafts: tokens each verification step yields, the bonus token included"
    )
    per_position_acceptance_rate: list[float] = Field(
        default_factory=list, description="Δ accepted at draft position i / drafts, i = 0, 1, ..."
    )


class ServerSummary(BaseModel):
    """A scraped Prometheus endpoint, reduced to the figures that explain latency."""

    url: str
    engine: str | None = Field(None, description="vllm, sglang, tgi, llamacpp, tokspeed-sim, or None if unknown")
    scrapes: int = 0
    errors: int = 0
    running: SeriesStats = Field(default_factory=SeriesStats, description="requests being served")
    waiting: SeriesStats = Field(default_factory=SeriesStats, description="requests queued in the server")
    kv_cache_usage_pct: SeriesStats = Field(default_factory=SeriesStats)
    prefix_cache_hit_rate: float | None = Field(None, description="hits / queries over the window, 0..1")
    preemptions: float | None = Field(None, description="preemptions counted over the window")
    metrics: dict[str, float] = Field(
        default_factory=dict, description="other known metrics: counters as their rise over the window, gauges as their last value"
    )
    spec_decode: SpecDecodeSummary | None = Field(
        None, description="speculative decoding over the window; None when the server serves no spec-decode counters"
    )


class ServerProfile(BaseModel):
    """`--profile`: the server's profiler started before a load point's measured window and stopped after it."""

    url: str = Field(description="the server's root: POST {url}/start_profile, then {url}/stop_profile")
    status: str = Field("not started", description="profiled (both calls answered 2xx), failed, or not started")
    started_at: str | None = Field(None, description="when /start_profile answered (UTC, ISO 8601)")
    stopped_at: str | None = Field(None, description="when /stop_profile answered (UTC, ISO 8601)")
    start_http_status: int | None = None
    stop_http_status: int | None = None
    message: str | None = Field(None, description="what the server said (its answers' bodies), or why a call failed")
    trace_dir: str | None = Field(
        None, description="where the server writes its traces (on its own machine), when the server or the environment says"
    )


class TelemetrySummary(BaseModel):
    interval_s: float
    window_s: float | None = Field(None, description="length of the window summarised, seconds")
    gpus: list[GPUSummary] = Field(default_factory=list)
    client: ClientSummary | None = None
    server: ServerSummary | None = None
    energy_j: float | None = Field(
        None, description="energy of every GPU over the window, J (None unless every GPU gave its energy counter)"
    )
    energy_per_output_token_j: float | None = Field(
        None, description="energy of every GPU over the window / output tokens of the window's completed requests"
    )
    output_tokens_per_j: float | None = Field(
        None, description="output tokens of the window's completed requests / energy of every GPU over the window"
    )
    notes: list[str] = Field(default_factory=list, description="why a source is missing, e.g. no NVIDIA driver")
