"""Which Prometheus metrics of each serving engine explain latency, and how to read them.

Names are sample names as parsed (a counter always ends in `_total`, which the parser adds
when a server such as TGI leaves it out), confirmed against each
engine's source or documentation: vLLM (v1 engine, and the v0 names it replaced), SGLang,
Hugging Face TGI, llama.cpp's llama-server (`--metrics`), Triton Inference Server (its own metrics
port, 8002 by default: name it with --server-metrics), and tokspeed's own simulator.
An engine is recognised by its metric-name prefix. For each role the first name the server
serves is used: `running`, `waiting`, `kv_usage` (a 0..1 fraction; max over label sets, i.e.
the fullest engine of a data-parallel server), prefix-cache counters (hit rate = Δhits / Δqueries)
or a hit-rate gauge, a preemption counter; `counters` are reported as deltas over the window and
`gauges` as their last value. Speculative decoding (vLLM's `vllm:spec_decode_num_drafts`,
`_num_draft_tokens`, `_num_accepted_tokens` and `_num_accepted_tokens_per_pos`, the last one
sample per `position` label, as vllm/v1/spec_decode/metrics.py exports them) is read as counters
too. Every other name in the scrape is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineMetrics:
    engine: str
    prefix: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()
    prefix_queries: tuple[str, ...] = ()
    prefix_hit_rate: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    counters: tuple[str, ...] = ()
    gauges: tuple[str, ...] = ()
    spec_decode: SpecDecodeNames | None = None

    @property
    def names(self) -> frozenset[str]:
        """Every sample name worth keeping from a scrape."""
        spec = self.spec_decode.names if self.spec_decode is not None else ()
        return frozenset(
            self.running + self.waiting + self.kv_usage + self.prefix_hits + self.prefix_queries
            + self.prefix_hit_rate + self.preemptions + self.counters + self.gauges + spec
        )

    @property
    def by_position(self) -> frozenset[str]:
        """Names kept one value per `position` label (`name[0]`, `name[1]`, ...), not summed over positions."""
        return frozenset((self.spec_decode.accepted_per_pos,)) if self.spec_decode is not None else frozenset()

    @property
    def maxed(self) -> frozenset[str]:
        """Names combined across label sets by max (fractions); the rest are summed."""
        return frozenset(self.kv_usage + self.prefix_hit_rate)


@dataclass(frozen=True)
class SpecDecodeNames:
    """Speculative decoding's counters: drafts proposed, draft tokens, of those accepted, accepted per position."""

    drafts: str
    draft_tokens: str
    accepted: str
    accepted_per_pos: str

    @property
    def names(self) -> tuple[str, ...]:
        return (self.drafts, self.draft_tokens, self.accepted, self.accepted_per_pos)


def _spec_names(prefix: str) -> SpecDecodeNames:
    """vLLM's spec-decode counter names under `prefix` (the simulator serves the same under its own)."""
    return SpecDecodeNames(
        drafts=f"{prefix}spec_decode_num_drafts_total",
        draft_tokens=f"{prefix}spec_decode_num_draft_tokens_total",
        accepted=f"{prefix}spec_decode_num_accepted_tokens_total",
        accepted_per_pos=f"{prefix}spec_decode_num_accepted_tokens_per_pos_total",
    )


# the server's TTFT histogram (_sum in seconds, _count), read as counters: Δsum / Δcount is its mean over a window
TTFT_HISTOGRAM: dict[str, tuple[str, str]] = {
    "vllm": ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"),
    "tokspeed-sim": ("tokspeed_sim:time_to_first_token_seconds_sum", "tokspeed_sim:time_to_first_token_seconds_count"),
}

ENGINES: tuple[EngineMetrics, ...] = (
    EngineMetrics(
        engine="tokspeed-sim",
        prefix="tokspeed_sim:",
        running=("tokspeed_sim:num_requests_running",),
        waiting=("tokspeed_sim:num_requests_waiting",),
        kv_usage=("tokspeed_sim:kv_cache_usage_perc",),
        prefix_hits=("tokspeed_sim:prefix_cache_hits_total",),
        prefix_queries=("tokspeed_sim:prefix_cache_queries_total",),
        counters=("tokspeed_sim:prompt_tokens_total", "tokspeed_sim:generation_tokens_total", "tokspeed_sim:requests_total",
                  *TTFT_HISTOGRAM["tokspeed-sim"]),
        spec_decode=_spec_names("tokspeed_sim:"),
    ),
    EngineMetrics(
        engine="vllm",
        prefix="vllm:",
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        prefix_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),
        preemptions=("vllm:num_preemptions_total",),
        counters=("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                  *TTFT_HISTOGRAM["vllm"]),
        gauges=("vllm:num_requests_swapped",),
        spec_decode=_spec_names("vllm:"),
    ),
    EngineMetrics(
        engine="sglang",
        prefix="sglang:",
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",),
        prefix_hit_rate=("sglang:cache_hit_rate",),
        preemptions=("sglang:num_retracted_requests_total",),
        counters=(
            "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
            "sglang:num_requests_total",
        ),
        gauges=("sglang:gen_throughput", "sglang:num_used_tokens"),
    ),
    EngineMetrics(
        engine="tgi",
        prefix="tgi_",
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        counters=("tgi_request_count_total", "tgi_request_success_total"),
        gauges=("tgi_batch_current_max_tokens",),
    ),
    # as llama-server (llama-cpp-python 0.3.36's vendored llama.cpp, tools/server/server-task.cpp) serves them:
    # prompt_tokens_total leaves out the tokens reused from a slot's cache, counted in prompt_tokens_cached_total;
    # the *_seconds_total are the slots' summed prefill and decode time. kv_cache_usage_ratio and kv_cache_tokens
    # are older builds' (the current one serves no KV-cache figure). Spec-decode counters as vLLM's, same names.
    EngineMetrics(
        engine="llamacpp",
        prefix="llamacpp:",
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        kv_usage=("llamacpp:kv_cache_usage_ratio",),
        counters=("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_seconds_total",
                  "llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total", "llamacpp:n_decode_total"),
        gauges=("llamacpp:kv_cache_tokens", "llamacpp:n_busy_slots_per_decode"),
        spec_decode=_spec_names("llamacpp:"),
    ),
    # Triton Inference Server 2.51 (nvidia-pytriton 0.7's bundled binary; the names are core/src/metrics.cc's): per-model
    # counters summed over models; the *_us are cumulative microseconds (for a decoupled model, until its execute
    # returned, not until its last response). No running-requests figure; pending = queued, not yet executing.
    EngineMetrics(
        engine="triton",
        prefix="nv_",
        running=(),
        waiting=("nv_inference_pending_request_count",),
        counters=("nv_inference_request_success_total", "nv_inference_request_failure_total", "nv_inference_count_total",
                  "nv_inference_exec_count_total", "nv_inference_request_duration_us_total",
                  "nv_inference_queue_duration_us_total", "nv_inference_compute_infer_duration_us_total"),
    ),
)


# what the "serves no metric tokspeed knows" notes name: every engine above, so a new one is named there too
KNOWN_ENGINES = ", ".join(e.engine for e in ENGINES)


def detect_engine(names: Iterable[str]) -> EngineMetrics | None:
    """The engine whose metric prefix the scrape's names carry (the most names wins)."""
    seen = list(names)
    counts = [(sum(n.startswith(e.prefix) for n in seen), e) for e in ENGINES]
    best, engine = max(counts, key=lambda c: c[0])
    return engine if best else None


def first_present(names: tuple[str, ...], values: dict[str, float]) -> float | None:
    """The value of the first of `names` the scrape had."""
    for name in names:
        if name in values:
            return values[name]
    return None
