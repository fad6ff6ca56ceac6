"""Server-side timing decomposition: the server's own timings beside the client's, per request and summarised.

Only requests whose record holds `server_timing` (native protocols whose server reports timings:
Ollama, llama.cpp, TGI's headers, SGLang's e2e_latency) take part. Per completed request:

* server_ttft_ms = queue_ms + load_ms + prefill_ms (absent parts count 0; needs prefill_ms)
* network_ms = client TTFT (ms) − server_ttft_ms: both network legs, the client's own delay and
  any wait the server does not report (llama.cpp reports no queue time, so its queue lands here)
* server decode speed = server output_tokens / (decode_ms / 1000) (llama.cpp's predicted_per_second,
  Ollama's eval_count / eval_duration); the client's is `metrics.request.decode_tokens_per_s`
  (output_tokens / (E2E − TTFT)) over the same requests
* decode_speed_ratio = mean client decode speed / mean server decode speed (< 1: the client saw
  tokens arrive slower than the server made them: network, proxies or the client itself)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from tokspeed.metrics import request as rq
from tokspeed.metrics.stats import Distribution, distribution
from tokspeed.records import RequestRecord, Status

NS_PER_MS = 1_000_000


class ServerTimingSummary(BaseModel):
    """The decomposition over one load point's completed requests that carried server timings."""

    model_config = ConfigDict(frozen=True)

    requests: int = 0  # completed requests with server timings
    queue_ms: Distribution = Distribution()
    load_ms: Distribution = Distribution()
    prefill_ms: Distribution = Distribution()
    decode_ms: Distribution = Distribution()
    total_ms: Distribution = Distribution()
    server_ttft_ms: Distribution = Distribution()  # queue + load + prefill, as the server reported them
    client_ttft_ms: Distribution = Distribution()  # the same requests' TTFT as the client measured it
    network_ms: Distribution = Distribution()  # client TTFT − server TTFT
    server_decode_tokens_per_s: Distribution = Distribution()
    client_decode_tokens_per_s: Distribution = Distribution()  # the same requests, as the client saw them
    decode_speed_ratio: float | None = None  # mean client decode speed / mean server decode speed


def server_ttft_ms(r: RequestRecord) -> float | None:
    """queue_ms + load_ms + prefill_ms as the server reported them; None without prefill_ms."""
    st = r.server_timing
    if not st or st.get("prefill_ms") is None:
        return None
    return float(st.get("queue_ms", 0.0)) + float(st.get("load_ms", 0.0)) + float(st["prefill_ms"])


def network_ms(r: RequestRecord) -> float | None:
    """Client TTFT − server TTFT (ms): what the server's report does not account for."""
    server = server_ttft_ms(r)
    client = rq.ttft_ns(r)
    if server is None or client is None:
        return None
    return client / NS_PER_MS - server


def server_decode_tokens_per_s(r: RequestRecord) -> float | None:
    """Server output tokens / decode seconds (None without both, or with fewer than 2 tokens)."""
    st = r.server_timing
    if not st:
        return None
    tokens = st.get("output_tokens", r.output_tokens)
    decode = st.get("decode_ms")
    if tokens is None or decode is None or decode <= 0 or tokens < 2:
        return None
    return float(tokens) * 1000.0 / float(decode)


def summarize_server_timing(records: Sequence[RequestRecord]) -> ServerTimingSummary | None:
    """The decomposition over the measured, completed records with server timings; None when there are none."""
    with_timing = [r for r in records if r.server_timing and r.status is Status.OK and not r.warmup]
    if not with_timing:
        return None
    server_speed = _column(server_decode_tokens_per_s, with_timing)
    client_speed = _column(rq.decode_tokens_per_s, with_timing)
    both = ~np.isnan(server_speed) & ~np.isnan(client_speed)
    ratio = float(np.mean(client_speed[both]) / np.mean(server_speed[both])) if both.any() else None
    return ServerTimingSummary(
        requests=len(with_timing),
        queue_ms=distribution(_key("queue_ms", with_timing)),
        load_ms=distribution(_key("load_ms", with_timing)),
        prefill_ms=distribution(_key("prefill_ms", with_timing)),
        decode_ms=distribution(_key("decode_ms", with_timing)),
        total_ms=distribution(_key("total_ms", with_timing)),
        server_ttft_ms=distribution(_column(server_ttft_ms, with_timing)),
        client_ttft_ms=distribution(_column(rq.ttft_ns, with_timing), 1 / NS_PER_MS),
        network_ms=distribution(_column(network_ms, with_timing)),
        server_decode_tokens_per_s=distribution(server_speed),
        client_decode_tokens_per_s=distribution(client_speed),
        decode_speed_ratio=ratio,
    )


def _key(key: str, records: Sequence[RequestRecord]) -> np.ndarray:
    return _column(lambda r: (r.server_timing or {}).get(key), records)


def _column(value: Callable[[RequestRecord], float | int | None], records: Sequence[RequestRecord]) -> np.ndarray:
    """`value(r)` per record as float64, NaN where None (the distributions skip NaN)."""
    return np.fromiter(
        (np.nan if (v := value(r)) is None else v for r in records), dtype=np.float64, count=len(records)
    )


class HistogramTTFT(BaseModel):
    """A server's aggregate TTFT (its Prometheus histogram over a window) beside the client's mean.

    server_mean_ms = Δ histogram _sum / Δ _count × 1000 between the window's first and last scrape;
    difference_ms = client mean − server mean (the network legs and client delay, on average; the
    two means cover nearly, not exactly, the same requests).
    """

    model_config = ConfigDict(frozen=True)

    server_mean_ms: float
    server_requests: float
    client_mean_ms: float
    difference_ms: float


def histogram_ttft(
    engine: str | None, counters: dict[str, float], client_mean_ms: float | None
) -> HistogramTTFT | None:
    """Compare a scraped TTFT histogram's mean (vLLM, the simulator) with the client's mean TTFT."""
    from tokspeed.telemetry.engines import TTFT_HISTOGRAM

    names = TTFT_HISTOGRAM.get(engine or "")
    if names is None or client_mean_ms is None:
        return None
    total_s, count = counters.get(names[0]), counters.get(names[1])
    if total_s is None or not count:
        return None
    server = total_s / count * 1000.0
    return HistogramTTFT(server_mean_ms=server, server_requests=count, client_mean_ms=client_mean_ms,
                         difference_ms=client_mean_ms - server)
