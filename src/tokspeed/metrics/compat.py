"""Compatibility views: a run's metrics under a peer tool's names and formulas.

`tokspeed report DIR --as vllm|aiperf|guidellm` recomputes, from the same raw
request records, the numbers each peer benchmark tool would have printed, so a
user can reproduce a figure seen elsewhere and see why it differs from
tokspeed's (docs/numbers.md, "Compatibility views").

Each tool is a small set of pure functions over one `RequestRecord` (seconds
in, milliseconds out) plus a view builder. Every function names the peer's
version and the source file it follows. Where the peer times an event that
tokspeed does not keep (e.g. a role-only chat chunk or a finish-only chunk),
the function uses the nearest recorded time and the view lists that
approximation; nothing is invented.

Per-request inputs used here: `sent_ns`, `first_token_ns` (first content or
reasoning token), `chunk_ns` (token-bearing chunks only), `end_ns` (last byte)
and `output_tokens` (tokspeed's count: server usage, else tokenizer, else chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tokspeed.metrics.table import peer_metric
from tokspeed.records import RequestRecord

SCHEMA = "tokspeed.compat/1"
TOOLS = ("vllm", "aiperf", "guidellm")


class CompatTool(str, Enum):
    """The peer tools a view can imitate (`tokspeed report --as`)."""

    VLLM = "vllm"
    AIPERF = "aiperf"
    GUIDELLM = "guidellm"

_MS = 1e-6  # ns -> ms

# --------------------------------------------------------------------------------------
# vLLM 0.32 — `vllm bench serve`
#   vllm/benchmarks/lib/endpoint_request_func.py (async_request_openai_chat_completions,
#   async_request_openai_completions) records, per request: ttft at the first SSE event
#   with `choices` (for chat this can be the role-only chunk), itl = gaps between
#   consecutive `choices` events, latency = last `choices` event − start.
#   vllm/benchmarks/serve.py calculate_metrics: TPOT = (latency − ttft)/(N − 1) for N > 1,
#   ITL pooled over all requests, throughputs over the benchmark duration, N from
#   usage.completion_tokens else the tokenizer. Percentiles: np.percentile (linear);
#   by default only P99 is printed (--metric-percentiles 99) besides mean and median.
# --------------------------------------------------------------------------------------

VLLM_VERSION = "vLLM 0.32 (vllm bench serve)"
VLLM_SOURCE = "vllm/benchmarks/serve.py calculate_metrics; vllm/benchmarks/lib/endpoint_request_func.py"


def vllm_ttft_ms(r: RequestRecord) -> float | None:
    """vLLM TTFT: first `choices` event − start. Approximated by tokspeed's first token
    (the role-only chunk vLLM may time is not recorded)."""
    return None if r.first_token_ns is None else (r.first_token_ns - r.sent_ns) * _MS


def vllm_e2el_ms(r: RequestRecord) -> float | None:
    """vLLM E2EL (`latency`): last `choices` event − start. Approximated by the last
    token-bearing chunk (a trailing finish-only chunk is not recorded); not the last byte."""
    return (r.chunk_ns[-1] - r.sent_ns) * _MS if len(r.chunk_ns) else None


def vllm_itls_ms(r: RequestRecord) -> list[float]:
    """vLLM ITL: the gaps between consecutive chunks, one value per chunk gap (not per token)."""
    c = r.chunk_ns
    return [(c[i] - c[i - 1]) * _MS for i in range(1, len(c))]


def vllm_tpot_ms(r: RequestRecord) -> float | None:
    """vLLM TPOT: (latency − ttft) / (N − 1), only for N > 1."""
    ttft, e2el, n = vllm_ttft_ms(r), vllm_e2el_ms(r), r.output_tokens or 0
    if ttft is None or e2el is None or n < 2:
        return None
    return (e2el - ttft) / (n - 1)


# --------------------------------------------------------------------------------------
# NVIDIA AIPerf (ai-dynamo/aiperf main, 2025–26; src/aiperf/metrics/types/)
#   ttft_metric.py: first content response − request start (content responses carry
#   text or reasoning; usage-only and [DONE] are excluded).
#   request_latency_metric.py: last content response − request start.
#   inter_token_latency_metric.py: ITL = (request latency − TTFT) / (OSL − 1), OSL ≥ 2
#   (subtracts the first chunk's tokens instead of 1 only under --per-chunk-usage).
#   inter_chunk_latency_metric.py: ICL = gaps between consecutive content responses.
#   Throughputs: totals over the benchmark duration.
# --------------------------------------------------------------------------------------

AIPERF_VERSION = "NVIDIA AIPerf (ai-dynamo/aiperf main, 2025-26)"
AIPERF_SOURCE = "src/aiperf/metrics/types/{ttft,request_latency,inter_token_latency,inter_chunk_latency}_metric.py"


def aiperf_ttft_ms(r: RequestRecord) -> float | None:
    """AIPerf TTFT: first content (or reasoning) response − start = tokspeed's first chunk."""
    return (r.chunk_ns[0] - r.sent_ns) * _MS if len(r.chunk_ns) else None


def aiperf_request_latency_ms(r: RequestRecord) -> float | None:
    """AIPerf Request Latency: last content response − start (not the last byte)."""
    return (r.chunk_ns[-1] - r.sent_ns) * _MS if len(r.chunk_ns) else None


def aiperf_itl_ms(r: RequestRecord) -> float | None:
    """AIPerf ITL: (request latency − TTFT) / (OSL − 1), OSL ≥ 2 (the default, without --per-chunk-usage)."""
    ttft, lat, n = aiperf_ttft_ms(r), aiperf_request_latency_ms(r), r.output_tokens or 0
    if ttft is None or lat is None or n < 2:
        return None
    return (lat - ttft) / (n - 1)


def aiperf_icls_ms(r: RequestRecord) -> list[float]:
    """AIPerf ICL: gaps between consecutive content responses (≥ 2 of them)."""
    c = r.chunk_ns
    return [(c[i] - c[i - 1]) * _MS for i in range(1, len(c))]


# --------------------------------------------------------------------------------------
# guidellm (vllm-project/guidellm main, 2025–26; src/guidellm/schemas/request_stats.py
# GenerativeRequestStats):
#   time_to_first_token_ms = first_token_iteration − request_start
#   time_per_output_token_ms = (last_token_iteration − request_start) / output_tokens
#       ("including first token": TTFT is inside the numerator, N is the divisor)
#   inter_token_latency_ms = (last_token_iteration − first_token_iteration) / (output_tokens − 1)
#   request_latency = request_end − request_start
#   output_tokens = usage when given, else the number of token iterations (chunks).
# --------------------------------------------------------------------------------------

GUIDELLM_VERSION = "guidellm (vllm-project/guidellm main, 2025-26)"
GUIDELLM_SOURCE = "src/guidellm/schemas/request_stats.py GenerativeRequestStats"


def guidellm_ttft_ms(r: RequestRecord) -> float | None:
    """guidellm time_to_first_token_ms: first token iteration − request start."""
    return (r.chunk_ns[0] - r.sent_ns) * _MS if len(r.chunk_ns) else None


def guidellm_tpot_ms(r: RequestRecord) -> float | None:
    """guidellm time_per_output_token_ms: (last token − start) / N — the first token included."""
    n = r.output_tokens or 0
    last = r.chunk_ns[-1] if len(r.chunk_ns) else r.end_ns
    if last is None or n < 1:
        return None
    return (last - r.sent_ns) * _MS / n


def guidellm_itl_ms(r: RequestRecord) -> float | None:
    """guidellm inter_token_latency_ms: (last token − first token) / (N − 1), N > 1."""
    n = r.output_tokens or 0
    if len(r.chunk_ns) == 0 or n < 2:
        return None
    return (r.chunk_ns[-1] - r.chunk_ns[0]) * _MS / (n - 1)


def guidellm_request_latency_ms(r: RequestRecord) -> float | None:
    """guidellm request_latency: request end − request start (tokspeed's E2E, to the last byte)."""
    return None if r.end_ns is None else (r.end_ns - r.sent_ns) * _MS


# --------------------------------------------------------------------------------------
# The view
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompatMetric:
    """One metric under a peer's name: its stats, tokspeed's own figure, and how they differ."""

    name: str  # the peer's label
    unit: str  # "ms", "req/s", "tok/s"
    stats: dict[str, float | None]  # mean/p50/p90/p99 for distributions, {"value": x} for scalars
    tokspeed: dict[str, float | None]  # tokspeed's figure for the same stats
    tokspeed_metric: str  # which tokspeed metric it is compared with
    note: str  # one line: how the peer's formula differs from tokspeed's

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "stats": self.stats,
            "tokspeed_metric": self.tokspeed_metric,
            "tokspeed": self.tokspeed,
            "note": self.note,
        }


@dataclass(frozen=True)
class CompatView:
    """One load point seen through one tool."""

    tool: str
    version: str
    source: str
    benchmark: str
    requests: int  # completed requests the view is computed over
    duration_s: float | None
    metrics: list[CompatMetric]
    approximations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "version": self.version,
            "source": self.source,
            "benchmark": self.benchmark,
            "requests": self.requests,
            "duration_s": self.duration_s,
            "metrics": [m.to_json() for m in self.metrics],
            "approximations": self.approximations,
        }


STATS = ("mean", "p50", "p90", "p99")


def describe(values: Iterable[float | None]) -> dict[str, float | None]:
    """mean, p50, p90, p99 as the peers compute them (numpy mean, np.percentile linear)."""
    import numpy as np  # lazy: the CLI imports CompatTool at start-up

    xs = np.asarray([v for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return {s: None for s in STATS}
    p50, p90, p99 = np.percentile(xs, [50, 90, 99])
    return {"mean": float(xs.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def measured_ok(records: Iterable[RequestRecord], benchmark: int) -> list[RequestRecord]:
    """The completed, measured (non-warm-up) records of one load point."""
    return [r for r in records if r.benchmark == benchmark and not r.warmup and r.ok]


def duration_s(records: Iterable[RequestRecord], benchmark: int) -> float | None:
    """First send to last end among the load point's measured records (any status)."""
    rs = [(r.sent_ns, r.end_ns) for r in records if r.benchmark == benchmark and not r.warmup and r.end_ns is not None]
    if not rs:
        return None
    span = max(e for _, e in rs) - min(s for s, _ in rs)
    return span / 1e9 if span > 0 else None


def _dist(per_request: Callable[[RequestRecord], float | None], ok: Sequence[RequestRecord]) -> dict[str, float | None]:
    return describe(per_request(r) for r in ok)


def _pooled(per_request: Callable[[RequestRecord], list[float]], ok: Sequence[RequestRecord]) -> dict[str, float | None]:
    return describe(v for r in ok for v in per_request(r))


def _scalar(x: float | None) -> dict[str, float | None]:
    return {"value": x}


def _ts(summary: Any, key: str) -> dict[str, float | None]:
    """tokspeed's own figure for the view's stats from a benchmark summary (None without one)."""
    if summary is None:
        return {s: None for s in STATS}
    d = getattr(summary, key)
    return {s: getattr(d, s) for s in STATS}


def _peer(tool: str, name: str, stats: dict[str, float | None], summary: Any, note: str) -> CompatMetric:
    """A peer's latency distribution (ms) beside the tokspeed metric the metric table pairs it with."""
    ours = peer_metric(tool, name).field
    return CompatMetric(name, "ms", stats, _ts(summary, ours), ours, note)


def _ts_scalar(summary: Any, key: str) -> dict[str, float | None]:
    return {"value": None if summary is None else getattr(summary.throughput, key)}


def _throughputs(ok: Sequence[RequestRecord], dur: float | None, summary: Any, note_window: str) -> list[CompatMetric]:
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.input_tokens or 0 for r in ok)

    def per_s(x: float) -> float | None:
        return None if not dur else x / dur

    return [
        CompatMetric("Request throughput", "req/s", _scalar(per_s(len(ok))), _ts_scalar(summary, "requests_per_s"), "requests_per_s", note_window),
        CompatMetric("Output token throughput", "tok/s", _scalar(per_s(out_tokens)), _ts_scalar(summary, "output_tokens_per_s"), "output_tokens_per_s", note_window),
        CompatMetric("Total token throughput", "tok/s", _scalar(per_s(out_tokens + in_tokens)), _ts_scalar(summary, "total_tokens_per_s"), "total_tokens_per_s", note_window),
    ]


_WINDOW = "same counts; the peer divides by its benchmark duration, here first send to last end"


def vllm_view(records: Sequence[RequestRecord], benchmark: int = 0, name: str = "", summary: Any = None) -> CompatView:
    ok = measured_ok(records, benchmark)
    dur = duration_s(records, benchmark)
    metrics = [
        _peer("vllm", "TTFT", _dist(vllm_ttft_ms, ok), summary,
                     "vLLM may stop the clock at a role-only chat chunk; tokspeed waits for the first real token"),
        _peer("vllm", "TPOT", _dist(vllm_tpot_ms, ok), summary,
                     "same (E2E − TTFT)/(N − 1), but vLLM's E2E ends at the last chunk, tokspeed's at the last byte"),
        _peer("vllm", "ITL", _pooled(vllm_itls_ms, ok), summary,
                     "vLLM: one value per chunk gap; tokspeed spreads a k-token chunk's gap over its k tokens"),
        _peer("vllm", "E2EL", _dist(vllm_e2el_ms, ok), summary,
                     "vLLM ends at the last choices chunk; tokspeed at the last byte (usage trailer, [DONE])"),
        *_throughputs(ok, dur, summary, _WINDOW),
    ]
    approx = [
        (
            "TTFT: vLLM times the first SSE event with `choices` (a chat role-only chunk counts); tokspeed does not keep "
            "that chunk's time, so TTFT is approximated as the first content-or-reasoning token (TPOT shifts with it)"
        ),
        "E2EL: vLLM ends at the last `choices` event (often a finish-only chunk); approximated as the last token-bearing chunk",
        "ITL: the gap to a finish-only chunk and from a role-only chunk are not recorded, so they are missing from the pool",
        "output tokens N: tokspeed's count (usage, else tokenizer, else chunks) stands in for vLLM's usage-or-tokenizer count",
        "benchmark duration: approximated as first send to last end of the load point's measured requests",
    ]
    return CompatView("vllm", VLLM_VERSION, VLLM_SOURCE, name, len(ok), dur, metrics, approx)


def aiperf_view(records: Sequence[RequestRecord], benchmark: int = 0, name: str = "", summary: Any = None) -> CompatView:
    ok = measured_ok(records, benchmark)
    dur = duration_s(records, benchmark)
    metrics = [
        _peer("aiperf", "Time to First Token", _dist(aiperf_ttft_ms, ok), summary,
                     "same first content-or-reasoning response"),
        _peer("aiperf", "Inter Token Latency", _dist(aiperf_itl_ms, ok), summary,
                     "AIPerf's ITL is tokspeed's TPOT (one value per request), ending at the last chunk, not the last byte"),
        _peer("aiperf", "Inter Chunk Latency", _pooled(aiperf_icls_ms, ok), summary,
                     "AIPerf: raw chunk gaps; tokspeed's ITL spreads a k-token chunk's gap over its k tokens"),
        _peer("aiperf", "Request Latency", _dist(aiperf_request_latency_ms, ok), summary,
                     "AIPerf ends at the last content response; tokspeed at the last byte"),
        *_throughputs(ok, dur, summary, _WINDOW),
    ]
    approx = [
        "output sequence length: tokspeed's count (usage, else tokenizer, else chunks) stands in for AIPerf's",
        "AIPerf also puts failed requests into TTFT/ITL percentiles; this view uses completed requests only",
        "benchmark duration: approximated as first send to last end of the load point's measured requests",
    ]
    return CompatView("aiperf", AIPERF_VERSION, AIPERF_SOURCE, name, len(ok), dur, metrics, approx)


def guidellm_view(records: Sequence[RequestRecord], benchmark: int = 0, name: str = "", summary: Any = None) -> CompatView:
    ok = measured_ok(records, benchmark)
    dur = duration_s(records, benchmark)
    metrics = [
        _peer("guidellm", "TTFT", _dist(guidellm_ttft_ms, ok), summary,
                     "same first token iteration"),
        _peer("guidellm", "TPOT", _dist(guidellm_tpot_ms, ok), summary,
                     "guidellm includes the first token: (last token − start)/N, so TTFT is inside it"),
        _peer("guidellm", "ITL", _dist(guidellm_itl_ms, ok), summary,
                     "guidellm's ITL is per request, (last − first token)/(N − 1): tokspeed's TPOT without the tail to the last byte"),
        _peer("guidellm", "Request Latency", _dist(guidellm_request_latency_ms, ok), summary,
                     "same request end − start"),
        CompatMetric("Request throughput", "req/s", _scalar(None if not dur else len(ok) / dur),
                     _ts_scalar(summary, "requests_per_s"), "requests_per_s", _WINDOW),
    ]
    approx = [
        "output tokens N: tokspeed's count stands in for guidellm's (usage, else the number of token iterations)",
        "percentiles: numpy linear interpolation; guidellm's own distribution summary may interpolate differently",
        "request throughput: approximated as completed requests over first send to last end",
    ]
    return CompatView("guidellm", GUIDELLM_VERSION, GUIDELLM_SOURCE, name, len(ok), dur, metrics, approx)


VIEWS: dict[str, Callable[..., CompatView]] = {"vllm": vllm_view, "aiperf": aiperf_view, "guidellm": guidellm_view}


def views(tool: str, result: Any, records: Sequence[RequestRecord]) -> list[CompatView]:
    """One view per load point of a loaded run (`tokspeed.results.load_run`)."""
    build = VIEWS[tool]
    return [build(records, i, b.name, b.summary) for i, b in enumerate(result.benchmarks)]


def to_json(tool: str, vs: Sequence[CompatView]) -> dict[str, Any]:
    return {"schema": SCHEMA, "tool": tool, "benchmarks": [v.to_json() for v in vs]}
