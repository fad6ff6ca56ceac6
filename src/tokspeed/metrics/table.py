"""The distributions tokspeed reports, one row each: everything else about a metric derives from here.

A `Metric` names the `Summary` field that holds its distribution and its flat-name stem and unit
(`ttft` + `ms` gives `ttft_p99_ms`), the labels reports print, which requests it is over, the
per-request function it applies (`tokspeed.metrics.request`) or the pooled per-token series it reads,
how its percentiles' 95% intervals are computed, whether an SLO may name it per request (and what a
request's value is then), and what the peers it is compared with call it. Read from here: the summary
builder (`metrics.summary`), `Summary.flat()` names (and so CSV columns, SLO and gate names), the SLO
grammar's per-request metrics (`metrics.slo`), the console, Markdown and HTML rows, the interval lines,
the compatibility views' pairings (`metrics.compat`) and the metric-spec checks
(`tests/unit/metrics/test_metric_spec_doc.py`). Adding a row adds the metric to all of them.

The order is the file contract's: `Summary`'s fields, `flat()`'s names and the report rows follow it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tokspeed.metrics import request as rq
from tokspeed.records import RequestRecord

NS_PER_MS = 1_000_000

# which values a distribution holds: one per completed request; one per measured request (any outcome,
# where the formula applies); one per generated token or per chunk gap of the completed requests, pooled
Over = Literal["completed", "measured", "tokens", "chunks"]
# how the percentiles' 95% intervals are computed: distribution-free order statistics over independent
# requests, or a bootstrap resampling requests (per-token values of one request are not independent)
Interval = Literal["order-statistic", "request-bootstrap"]
# what a per-request SLO on the metric judges: the request's own value, or the largest of its pooled values
PerRequestSLO = Literal["value", "max"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One reported distribution. `value` and `divisor`: raw per-request value (ns, tokens) over divisor = unit."""

    field: str  # the Summary field (and the key in percentile_ci, percentiles, approximate)
    name: str  # flat-name stem and SLO metric: `ttft` in `ttft_p99_ms`
    unit: str  # flat-name unit suffix: `ms`, `tokens_per_s`, or "" for a count
    label: str  # the report row's label
    short: str  # the label in one-line mentions (interval lines)
    display_unit: str  # the report row's unit
    over: Over
    value: Callable[[RequestRecord], float | int | None] | None  # None: pooled per token/chunk (see `over`)
    divisor: int = 1  # raw value / divisor = the value in `unit`
    interval: Interval | None = None
    slo: PerRequestSLO | None = None
    open_loop: bool = False  # only with a schedule (--rate): empty for a closed loop
    spec: str | None = None  # its row in docs/metric-spec.md's per-request formulas (None: a record field)
    peers: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # tool -> its names for what comes closest

    @property
    def scale(self) -> float:
        """Raw value x scale = the value in `unit` (the factor `Distribution`s are built with)."""
        return 1 / self.divisor


METRICS: tuple[Metric, ...] = (
    Metric("ttft_ms", "ttft", "ms", "TTFT", "TTFT", "ms", "completed", rq.ttft_ns, NS_PER_MS, "order-statistic", "value",
           spec="TTFT", peers={"vllm": ("TTFT",), "aiperf": ("Time to First Token",), "guidellm": ("TTFT",)}),
    Metric("ttfa_ms", "ttfa", "ms", "Time to first answer", "TTFA", "ms", "completed", rq.ttfa_ns, NS_PER_MS,
           slo="value", spec="TTFA (time to first answer)"),
    Metric("itl_ms", "itl", "ms", "ITL (per token)", "ITL", "ms", "tokens", None, NS_PER_MS, "request-bootstrap", "max",
           spec="ITL (per token)", peers={"vllm": ("ITL",), "aiperf": ("Inter Chunk Latency",)}),
    Metric("chunk_gap_ms", "chunk_gap", "ms", "Gap between chunks", "chunk gap", "ms", "chunks", None, NS_PER_MS,
           spec="chunk gap"),
    Metric("tpot_ms", "tpot", "ms", "TPOT", "TPOT", "ms", "completed", rq.tpot_ns, NS_PER_MS, "order-statistic", "value",
           spec="TPOT", peers={"vllm": ("TPOT",), "aiperf": ("Inter Token Latency",), "guidellm": ("ITL", "TPOT")}),
    Metric("ntpot_ms", "ntpot", "ms", "NTPOT (E2E / token)", "NTPOT", "ms", "completed", rq.ntpot_ns, NS_PER_MS,
           slo="value", spec="NTPOT (normalized time per output token)"),
    Metric("e2e_ms", "e2e", "ms", "E2E latency", "E2E", "ms", "completed", rq.e2e_ns, NS_PER_MS, "order-statistic", "value",
           spec="E2E latency", peers={"vllm": ("E2EL",), "aiperf": ("Request Latency",), "guidellm": ("Request Latency",)}),
    Metric("lateness_ms", "lateness", "ms", "Send lateness", "lateness", "ms", "measured", rq.lateness_ns, NS_PER_MS,
           spec="send lateness"),
    Metric("connect_ms", "connect", "ms", "Connect (new connections)", "connect", "ms", "measured",
           lambda r: r.connect_duration_ns, NS_PER_MS, spec="connect"),
    Metric("ttft_from_scheduled_ms", "ttft_from_scheduled", "ms", "TTFT from schedule", "TTFT from schedule", "ms",
           "completed", rq.ttft_from_scheduled_ns, NS_PER_MS, slo="value", open_loop=True, spec="TTFT from schedule"),
    Metric("e2e_from_scheduled_ms", "e2e_from_scheduled", "ms", "E2E from schedule", "E2E from schedule", "ms",
           "completed", rq.e2e_from_scheduled_ns, NS_PER_MS, slo="value", open_loop=True, spec="E2E from schedule"),
    Metric("decode_tokens_per_s", "decode", "tokens_per_s", "Decode speed per user", "decode speed", "tok/s", "completed",
           rq.decode_tokens_per_s, slo="value", spec="decode speed"),
    Metric("input_tokens", "input_tokens", "", "Input tokens", "input tokens", "tok", "completed", lambda r: r.input_tokens),
    Metric("output_tokens", "output_tokens", "", "Output tokens", "output tokens", "tok", "completed",
           lambda r: r.output_tokens),
)
BY_FIELD: dict[str, Metric] = {m.field: m for m in METRICS}
WITH_INTERVALS: tuple[Metric, ...] = tuple(m for m in METRICS if m.interval is not None)
PER_REQUEST_SLOS: tuple[Metric, ...] = tuple(m for m in METRICS if m.slo is not None)


def peer_metric(tool: str, peer_name: str) -> Metric:
    """The metric tokspeed compares a peer's `peer_name` with (KeyError if the table pairs it with none)."""
    for m in METRICS:
        if peer_name in m.peers.get(tool, ()):
            return m
    raise KeyError(f"{tool}'s {peer_name!r} is paired with no metric in tokspeed.metrics.table")
