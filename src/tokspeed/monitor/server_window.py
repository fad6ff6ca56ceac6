"""Server-side rolling figures from a serving engine's own /metrics, scrape by scrape (bounded memory).

Each scrape becomes a `Snapshot`: the engine's latency histograms (TTFT, ITL, TPOT,
E2E — whichever it serves, names below), its request and generated-token counters, and its
running / waiting / KV-cache gauges, every name summed over its label sets (max for the KV
fraction). Consecutive snapshots give a `Delta` (histograms.delta: a count that went down is a
server restart and the newer scrape counts whole); `ServerWindow` keeps the deltas that end
inside the rolling window (a ring of ceil(window / interval) + 1) and reads:

* quantiles p50 … p99.9 of each histogram over the window — Prometheus `histogram_quantile`
  linear interpolation inside buckets, so only as fine as the server's buckets — and its exact
  mean (Δ_sum / Δ_count);
* requests_per_s = finished requests (Δ of the E2E histogram's count, else a request counter)
  / covered span, generation_tokens_per_s = Δ generated tokens / covered span, where the
  covered span is the sum of the deltas' scrape-to-scrape gaps (a delta counts when more than half
  of it lies inside the window, so the span is the window asked to within half an interval);
* running, waiting, kv_cache_usage_pct from the newest scrape (None while the server is down).

Alert names (`values()`): server_<ttft|itl|tpot|e2e>_<p50|p90|p95|p99|p999|mean>_ms,
server_requests_per_s, server_generation_tokens_per_s, server_running, server_waiting,
server_kv_cache_usage_pct, server_up. No data is None, never 0.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from tokspeed.monitor import histograms as hg
from tokspeed.telemetry.engines import EngineMetrics, first_present

SERVER_METRICS = ("ttft", "itl", "tpot", "e2e")
SERVER_STATS = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
SERVER_SCALARS = (
    "server_requests_per_s", "server_generation_tokens_per_s", "server_running", "server_waiting",
    "server_kv_cache_usage_pct", "server_up",
)

# engine -> role -> histogram family names (the first the server serves is used)
HISTOGRAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "tokspeed-sim": {
        "ttft": ("tokspeed_sim:time_to_first_token_seconds",),
        "itl": ("tokspeed_sim:inter_token_latency_seconds",),
        "e2e": ("tokspeed_sim:e2e_request_latency_seconds",),
    },
    "vllm": {
        "ttft": ("vllm:time_to_first_token_seconds",),
        # v1 observes per engine step and request (a token gap); newer versions renamed it
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "tpot": ("vllm:request_time_per_output_token_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
    },
    "sglang": {
        "ttft": ("sglang:time_to_first_token_seconds",),
        "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e": ("sglang:e2e_request_latency_seconds",),
    },
    "tgi": {
        "tpot": ("tgi_request_mean_time_per_token_duration",),
        "e2e": ("tgi_request_duration",),
    },
}
REQUEST_COUNTERS: dict[str, tuple[str, ...]] = {
    "tokspeed-sim": ("tokspeed_sim:requests_total",),
    "vllm": ("vllm:request_success_total",),
    "sglang": ("sglang:num_requests_total",),
    "tgi": ("tgi_request_success_total",),
    "triton": ("nv_inference_request_success_total",),
}
TOKEN_COUNTERS: dict[str, tuple[str, ...]] = {
    "tokspeed-sim": ("tokspeed_sim:generation_tokens_total",),
    "vllm": ("vllm:generation_tokens_total",),
    "sglang": ("sglang:generation_tokens_total",),
    "llamacpp": ("llamacpp:tokens_predicted_total",),
}


@dataclass(frozen=True)
class ServerNames:
    """What to read from one engine's scrape."""

    engine: EngineMetrics
    histograms: dict[str, tuple[str, ...]]
    requests: tuple[str, ...]
    tokens: tuple[str, ...]

    @classmethod
    def of(cls, engine: EngineMetrics) -> ServerNames:
        key = engine.engine
        return cls(engine, HISTOGRAMS.get(key, {}), REQUEST_COUNTERS.get(key, ()), TOKEN_COUNTERS.get(key, ()))

    @property
    def scalars(self) -> frozenset[str]:
        e = self.engine
        return frozenset(e.running + e.waiting + e.kv_usage + self.requests + self.tokens)

    @property
    def families(self) -> frozenset[str]:
        return frozenset(n for names in self.histograms.values() for n in names)


@dataclass(frozen=True)
class Snapshot:
    """One scrape reduced to what the window needs."""

    at_s: float  # monotonic seconds
    histograms: dict[str, hg.Histogram]  # by role
    counters: dict[str, float]  # "requests", "tokens"
    running: float | None
    waiting: float | None
    kv_usage: float | None  # 0..1
    unix_s: float | None = None  # wall-clock time of the scrape


def parse_snapshot(text: str, names: ServerNames, at_s: float, unix_s: float | None = None) -> Snapshot:
    """A scrape's text as a Snapshot; raises ValueError when it is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    scalars, families, maxed = names.scalars, names.families, names.engine.maxed
    wanted = _wanted_sample_names(scalars, families)
    body = "\n".join(line for line in text.splitlines() if _sample_name(line) in wanted) + "\n"
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if math.isnan(s.value):
                continue
            name = s.name if s.name in scalars or s.name + "_total" not in scalars else s.name + "_total"
            if name in scalars:
                old = values.get(name)
                values[name] = s.value if old is None else (max(old, s.value) if name in maxed else old + s.value)
            elif s.name.endswith("_bucket") and s.name[: -len("_bucket")] in families:
                per = buckets.setdefault(s.name[: -len("_bucket")], {})
                le = float(s.labels.get("le", "inf"))
                per[le] = per.get(le, 0.0) + s.value
            elif s.name.endswith("_sum") and s.name[: -len("_sum")] in families:
                sums[s.name[: -len("_sum")]] = sums.get(s.name[: -len("_sum")], 0.0) + s.value
            elif s.name.endswith("_count") and s.name[: -len("_count")] in families:
                counts[s.name[: -len("_count")]] = counts.get(s.name[: -len("_count")], 0.0) + s.value
    hists: dict[str, hg.Histogram] = {}
    for role, candidates in names.histograms.items():
        served = next((f for f in candidates if f in buckets), None)
        if served is not None:
            hists[role] = hg.from_buckets(buckets[served], sums.get(served, 0.0), counts.get(served, 0.0))
    counters = {}
    for key, candidates in (("requests", names.requests), ("tokens", names.tokens)):
        v = first_present(candidates, values)
        if v is not None:
            counters[key] = v
    e = names.engine
    return Snapshot(at_s, hists, counters, first_present(e.running, values), first_present(e.waiting, values),
                    first_present(e.kv_usage, values), unix_s)


def _wanted_sample_names(scalars: frozenset[str], families: frozenset[str]) -> frozenset[str]:
    out = set(scalars) | {n.removesuffix("_total") for n in scalars}
    for f in families:
        out |= {f + "_bucket", f + "_sum", f + "_count"}
    return frozenset(out)


def _sample_name(line: str) -> str:
    """The sample name a text-format line starts with ('' for comments and blanks)."""
    if not line or line[0] == "#":
        return ""
    end = len(line)
    for sep in ("{", " ", "\t"):
        i = line.find(sep)
        if 0 <= i < end:
            end = i
    return line[:end]


@dataclass(frozen=True)
class Delta:
    """What happened between two good scrapes: histogram deltas, counter increases, the gap."""

    at_s: float
    span_s: float
    histograms: dict[str, hg.Histogram]
    counters: dict[str, float]
    reset: bool


def snapshot_delta(new: Snapshot, old: Snapshot) -> Delta:
    """The Delta from `old` to `new`; a count that went down is a restart (the new value counts whole)."""
    reset = False
    hists = {}
    for role, h in new.histograms.items():
        before = old.histograms.get(role)
        reset = reset or (before is not None and hg.is_reset(h, before))
        hists[role] = hg.delta(h, before)
    counters = {}
    for key, v in new.counters.items():
        before_v = old.counters.get(key)
        if before_v is None or v < before_v:
            reset = reset or before_v is not None
            counters[key] = v
        else:
            counters[key] = v - before_v
    return Delta(new.at_s, max(new.at_s - old.at_s, 0.0), hists, counters, reset)


@dataclass(frozen=True)
class ServerFigures:
    """The server-side figures at one moment (seconds for latencies)."""

    up: bool
    span_s: float
    quantiles: dict[str, dict[str, float | None]]  # role -> stat -> seconds
    means: dict[str, float | None]  # role -> seconds
    observations: dict[str, float]  # role -> observations in the window
    requests: float | None  # finished in the window
    requests_per_s: float | None
    generation_tokens_per_s: float | None
    running: float | None
    waiting: float | None
    kv_cache_usage_pct: float | None
    resets: int = 0
    bounds: dict[str, tuple[float, ...]] = field(default_factory=dict)
    last_scrape_unix_s: float | None = None  # the window ends at the last good scrape; it covers span_s before it

    def values(self) -> dict[str, float | None]:
        """Flat alert names -> value (latencies in ms)."""
        out: dict[str, float | None] = {
            "server_requests_per_s": self.requests_per_s,
            "server_generation_tokens_per_s": self.generation_tokens_per_s,
            "server_running": self.running,
            "server_waiting": self.waiting,
            "server_kv_cache_usage_pct": self.kv_cache_usage_pct,
            "server_up": 1.0 if self.up else 0.0,
        }
        for role in SERVER_METRICS:
            for stat in SERVER_STATS:
                out[f"server_{role}_{stat}_ms"] = _ms(self.quantiles.get(role, {}).get(stat))
            out[f"server_{role}_mean_ms"] = _ms(self.means.get(role))
        return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


class ServerWindow:
    """The ring of scrape deltas; `observe` each good scrape, `failed` each failed one, `figures(now)` to read."""

    def __init__(self, window_s: float, interval_s: float) -> None:
        self.window_s = window_s
        self._deltas: deque[Delta] = deque(maxlen=math.ceil(window_s / interval_s) + 1)
        self._last: Snapshot | None = None
        self.up = False
        self.resets = 0

    def observe(self, snap: Snapshot) -> Delta | None:
        """A good scrape: fold its delta against the previous good one into the ring."""
        self.up = True
        last, self._last = self._last, snap
        if last is None:
            return None
        d = snapshot_delta(snap, last)
        self.resets += d.reset
        self._deltas.append(d)
        return d

    def failed(self) -> None:
        """A scrape that failed: the server is down (its last good scrape stays the base of the next delta)."""
        self.up = False

    def figures(self, now_s: float) -> ServerFigures:
        # a delta is indivisible (two scrapes' difference): it counts when most of it lies in the window,
        # so the covered span is the window asked to within half an interval, never a whole one more
        live = [d for d in self._deltas if d.at_s - d.span_s / 2 > now_s - self.window_s]
        span = sum(d.span_s for d in live)
        merged = {role: hg.merge(d.histograms[role] for d in live if role in d.histograms) for role in SERVER_METRICS}
        quantiles = {role: {stat: hg.quantile(q, h) for stat, q in SERVER_STATS.items()} for role, h in merged.items()}
        means = {role: (h.mean if h is not None else None) for role, h in merged.items()}
        observed = {role: h.total for role, h in merged.items() if h is not None}
        requests = observed.get("e2e")
        if requests is None and live and all("requests" in d.counters for d in live):
            requests = sum(d.counters["requests"] for d in live)
        tokens = sum(d.counters["tokens"] for d in live) if live and all("tokens" in d.counters for d in live) else None
        snap = self._last if self.up else None
        kv = snap.kv_usage if snap is not None else None
        return ServerFigures(
            up=self.up,
            span_s=span,
            quantiles=quantiles,
            means=means,
            observations=observed,
            requests=requests,
            requests_per_s=requests / span if requests is not None and span > 0 else None,
            generation_tokens_per_s=tokens / span if tokens is not None and span > 0 else None,
            running=snap.running if snap is not None else None,
            waiting=snap.waiting if snap is not None else None,
            kv_cache_usage_pct=None if kv is None else kv * 100,
            resets=self.resets,
            bounds={role: h.bounds for role, h in merged.items() if h is not None},
            last_scrape_unix_s=self._last.unix_s if self._last is not None else None,
        )
