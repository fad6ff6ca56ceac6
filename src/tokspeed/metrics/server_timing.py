"""Server-side timing decomposition: the server's own timings beside the client's, per request and summarised.

Only requests whose record holds `server_timing` (native protocols whose server reports timings:
Ollama, llama.cpp, TGI's headers, SGLang's e2e_latency) take part. Per completed request:

* server_ttft_ms = queue_ms + load_ms + prefill_ms (absent parts count 0; needs prefill_ms)
* network_ms = client TTFT (ms) − server_ttft_ms: both network legs, the client's own delay and
  any wait the server does not report (llama.cpp reports no queue time, so its queue lands here)
* server decode speed = (server output_tokens − 1) / (decode_ms / 1000): the first token comes out
  of the prefill, so a server's decode time (llama.cpp's predicted_ms, Ollama's eval_duration)
  holds the N − 1 steps after it — the same definition as the client's
  `metrics.request.decode_tokens_per_s`, (output_tokens − 1) / (E2E − TTFT), over the same requests
  (llama.cpp's own predicted_per_second and Ollama's eval_count / eval_duration divide all N)
* decode_speed_ratio = mean client decode speed / mean server decode speed (< 1: the client saw
  tokens arrive slower than the server made them: network, proxies or the client itself)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from tokspeed.metrics import request as rq
from tokspeed.metrics.buffered import BufferedSample, sample_mean
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.distribution import Distribution

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
    return _network_ms(server_ttft_ms(r), rq.ttft_ns(r))


def _network_ms(server_ttft: float | None, client_ttft_ns: int | None) -> float | None:
    if server_ttft is None or client_ttft_ns is None:
        return None
    return client_ttft_ns / NS_PER_MS - server_ttft


def server_decode_tokens_per_s(r: RequestRecord) -> float | None:
    """(Server output tokens − 1) / decode seconds (None without both, or with fewer than 2 tokens)."""
    st = r.server_timing
    if not st:
        return None
    tokens = st.get("output_tokens", r.output_tokens)
    decode = st.get("decode_ms")
    if tokens is None or decode is None or decode <= 0 or tokens < 2:
        return None
    return float(tokens - 1) * 1000.0 / float(decode)


def summarize_server_timing(records: Iterable[RequestRecord]) -> ServerTimingSummary | None:
    """The decomposition over the measured, completed records with server timings; None when there are none."""
    acc = ServerTimingAccumulator()
    for r in records:
        acc.add(r)
    return acc.summary()


# the server-reported durations summarised as they are
_KEYS: tuple[str, ...] = ("queue_ms", "load_ms", "prefill_ms", "decode_ms", "total_ms")


class ServerTimingAccumulator:
    """The decomposition built one record at a time, in bounded memory (a BoundedSample per distribution).

    `add` takes every record of a load point and keeps the measured, completed ones with server
    timings; `summary()` equals `summarize_server_timing` of the records fed (bit for bit while
    the samples are exact).
    """

    __slots__ = ("_client_speed", "_client_ttft", "_keys", "_network", "_pair_client", "_pair_server",
                 "_requests", "_server_speed", "_server_ttft")

    def __init__(self) -> None:
        self._requests = 0
        self._keys = {key: BufferedSample() for key in _KEYS}
        self._server_ttft = BufferedSample()
        self._client_ttft = BufferedSample()  # ns
        self._network = BufferedSample()
        self._server_speed = BufferedSample()
        self._client_speed = BufferedSample()
        # decode speeds of the requests that have both (the ratio's means)
        self._pair_server = BufferedSample()
        self._pair_client = BufferedSample()

    def add(self, r: RequestRecord) -> None:
        """Take one record; only measured, completed ones with server timings count."""
        if not r.server_timing or r.warmup or r.status is not Status.OK:
            return
        self._add_timed(r)

    def _add_timed(self, r: RequestRecord) -> None:
        st = r.server_timing or {}
        self._requests += 1
        for key, column in self._keys.items():
            column.append(st.get(key))
        server, client = server_ttft_ms(r), rq.ttft_ns(r)
        self._server_ttft.append(server)
        self._client_ttft.append(client)
        self._network.append(_network_ms(server, client))
        server_speed, client_speed = server_decode_tokens_per_s(r), rq.decode_tokens_per_s(r)
        self._server_speed.append(server_speed)
        self._client_speed.append(client_speed)
        if server_speed is not None and client_speed is not None and not (
            math.isnan(server_speed) or math.isnan(client_speed)
        ):
            self._pair_server.append(server_speed)
            self._pair_client.append(client_speed)

    @property
    def requests(self) -> int:
        """Measured, completed records with server timings taken so far."""
        return self._requests

    def pending(self) -> int:
        """The most values waiting in any one sample's list (never more than buffered.FLUSH_AT)."""
        columns = [*self._keys.values(), self._server_ttft, self._client_ttft, self._network, self._server_speed,
                   self._client_speed, self._pair_server, self._pair_client]
        return max(c.pending for c in columns)

    def summary(self) -> ServerTimingSummary | None:
        """The decomposition of the records taken; None when none had server timings."""
        if not self._requests:
            return None
        client_mean, server_mean = sample_mean(self._pair_client.read()), sample_mean(self._pair_server.read())
        ratio = client_mean / server_mean if client_mean is not None and server_mean is not None else None
        keys = {key: column.read().distribution() for key, column in self._keys.items()}
        return ServerTimingSummary(
            requests=self._requests,
            **keys,
            server_ttft_ms=self._server_ttft.read().distribution(),
            client_ttft_ms=self._client_ttft.read().distribution(1 / NS_PER_MS),
            network_ms=self._network.read().distribution(),
            server_decode_tokens_per_s=self._server_speed.read().distribution(),
            client_decode_tokens_per_s=self._client_speed.read().distribution(),
            decode_speed_ratio=ratio,
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
