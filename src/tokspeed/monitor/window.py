"""Rolling-window figures with bounded memory: a ring of time buckets of per-request samples.

Time is cut into buckets `bucket_s` wide (the monitor's `--interval`); the ring
keeps the ceil(window_s / bucket_s) + 1 newest buckets and drops older ones as
time moves on. The window at `now` is exactly (now − window_s, now]: every bucket
inside it, and of the oldest bucket, which it only partly overlaps, the probes that
ended inside it (each value and each probe keeps its end time). A bucket keeps up to
`max_samples` probe events; past that, a partly overlapping bucket counts whole and
`span_s` says how much more than window_s that covers. Each bucket counts completed
and failed probes and tokens, and keeps
the per-request values (TTFT, ITL, TPOT, E2E, decode speed, from
`tokspeed.metrics.request`) in a reservoir of at most `max_samples` per metric
(Algorithm R, seeded), so memory is bounded by
buckets × metrics × max_samples whatever the probe rate or run length.

Figures over the window (`WindowFigures`):
* distributions as `tokspeed.stats.distribution.Distribution` (ms; decode in tokens/s)
  of the values of every bucket inside the window;
* error_rate = failed / (completed + failed) probes ended in the window;
* requests_per_s, output_tokens_per_s, total_tokens_per_s = completed probes
  (their tokens) / covered span: window_s (or, early on, the time since the
  monitor's start).
A value with no data is None (never 0).
"""

from __future__ import annotations

import math
import random
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tokspeed.metrics.request import (
    decode_tokens_per_s,
    e2e_ns,
    itl_values_ns,
    tpot_ns,
    ttft_ns,
)
from tokspeed.monitor.rules import WINDOW_METRICS
from tokspeed.records import RequestRecord, Status
from tokspeed.stats.distribution import Distribution, distribution

NS_PER_MS = 1_000_000
DEFAULT_MAX_SAMPLES = 2000
_UNITS = {"ttft": "ms", "itl": "ms", "tpot": "ms", "e2e": "ms", "decode": "tokens_per_s"}


@dataclass
class Bucket:
    """Everything that ended in [index × bucket_s, (index + 1) × bucket_s)."""

    index: int
    ok: int = 0
    errors: int = 0
    output_tokens: int = 0
    input_tokens: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    values: dict[str, array] = field(default_factory=dict)  # type: ignore[type-arg]
    times: dict[str, array] = field(default_factory=dict)  # type: ignore[type-arg]  # each value's end time
    seen: dict[str, int] = field(default_factory=dict)
    # each probe that ended here: (end time, ok, output tokens, input tokens, error kind), up to max_samples
    events: list[tuple[float, bool, int, int, str | None]] = field(default_factory=list)
    events_complete: bool = True  # False once more probes ended here than `events` keeps


@dataclass(frozen=True)
class WindowFigures:
    """The rolling figures at one moment."""

    span_s: float
    completed: int
    errored: int
    dists: dict[str, Distribution]
    error_rate: float | None
    requests_per_s: float | None
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    error_kinds: dict[str, int]

    def counts(self) -> dict[str, int]:
        """Samples in the window per metric (ttft, itl, ...): what a percentile alert needs enough of."""
        return {metric: dist.count for metric, dist in self.dists.items()}

    def values(self) -> dict[str, float | None]:
        """Flat `<metric>_<stat>_<unit>` -> value, the names alert rules read."""
        out: dict[str, float | None] = {
            "error_rate": self.error_rate,
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s,
        }
        for metric, dist in self.dists.items():
            for stat in ("mean", "stdev", "min", "p50", "p90", "p95", "p99", "p999", "max"):
                out[f"{metric}_{stat}_{_UNITS[metric]}"] = getattr(dist, stat)
        return out


class RollingWindow:
    """The ring of buckets; `add` a finished probe record, `figures(now)` to read the window."""

    def __init__(
        self,
        window_s: float,
        bucket_s: float,
        started_s: float,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        seed: int = 0,
    ) -> None:
        if bucket_s <= 0 or window_s < bucket_s:
            raise ValueError("need 0 < bucket_s <= window_s")
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.started_s = started_s
        self.max_samples = max_samples
        self.n_buckets = math.ceil(window_s / bucket_s) + 1
        self._buckets: deque[Bucket] = deque(maxlen=self.n_buckets)
        self._rng = random.Random(seed)

    def add(self, record: RequestRecord, now_s: float) -> None:
        """Count a probe that ended at `now_s` (monotonic seconds); incomplete (cancelled) probes do not count."""
        if record.status is Status.INCOMPLETE:
            return
        bucket = self._bucket(now_s)
        if record.status is not Status.OK:
            bucket.errors += 1
            kind = record.error_kind.value if record.error_kind is not None else "other"
            bucket.error_kinds[kind] = bucket.error_kinds.get(kind, 0) + 1
            self._event(bucket, (now_s, False, 0, 0, kind))
            return
        bucket.ok += 1
        bucket.output_tokens += record.output_tokens or 0
        bucket.input_tokens += record.input_tokens or 0
        self._event(bucket, (now_s, True, record.output_tokens or 0, record.input_tokens or 0, None))
        for metric, values in _per_request(record).items():
            for v in values:
                self._keep(bucket, metric, v, now_s)

    def add_value(self, metric: str, value: float, now_s: float) -> None:
        """Keep one value of `metric` directly (tests and non-probe sources)."""
        self._keep(self._bucket(now_s), metric, value, now_s)

    def _event(self, bucket: Bucket, event: tuple[float, bool, int, int, str | None]) -> None:
        if len(bucket.events) < self.max_samples:
            bucket.events.append(event)
        else:
            bucket.events_complete = False

    def _bucket(self, now_s: float) -> Bucket:
        index = math.floor(now_s / self.bucket_s)
        if not self._buckets or self._buckets[-1].index < index:
            self._buckets.append(Bucket(index))  # maxlen drops the oldest
        return self._buckets[-1]  # a late arrival (clock order) joins the newest bucket

    def _keep(self, bucket: Bucket, metric: str, value: float, now_s: float) -> None:
        store = bucket.values.get(metric)
        if store is None:
            store = bucket.values[metric] = array("d")
            bucket.times[metric] = array("d")
        times = bucket.times[metric]
        seen = bucket.seen.get(metric, 0) + 1
        bucket.seen[metric] = seen
        if len(store) < self.max_samples:
            store.append(value)
            times.append(now_s)
        else:
            j = self._rng.randrange(seen)
            if j < self.max_samples:
                store[j] = value
                times[j] = now_s

    def _oldest(self, now_s: float) -> int:
        """The index of the oldest bucket that overlaps (now − window, now]."""
        return math.floor((now_s - self.window_s) / self.bucket_s)

    def figures(self, now_s: float) -> WindowFigures:
        start = now_s - self.window_s  # the window is (start, now_s]
        oldest = self._oldest(now_s)
        live = [b for b in self._buckets if b.index >= oldest]
        partial = live[0] if live and live[0].index * self.bucket_s <= start else None
        whole = [b for b in live if b is not partial]
        ok = sum(b.ok for b in whole)
        errors = sum(b.errors for b in whole)
        out_tokens = sum(b.output_tokens for b in whole)
        in_tokens = sum(b.input_tokens for b in whole)
        kinds: dict[str, int] = {}
        for b in whole:
            for k, n in b.error_kinds.items():
                kinds[k] = kinds.get(k, 0) + n
        covered_from = start
        if partial is not None and not partial.events_complete:  # too many probes kept to split it: count it whole
            whole.append(partial)
            ok, errors = ok + partial.ok, errors + partial.errors
            out_tokens, in_tokens = out_tokens + partial.output_tokens, in_tokens + partial.input_tokens
            for k, n in partial.error_kinds.items():
                kinds[k] = kinds.get(k, 0) + n
            covered_from = partial.index * self.bucket_s
            partial = None
        elif partial is not None:
            for end, good, out_n, in_n, kind in partial.events:
                if end > start:
                    ok, errors = ok + good, errors + (not good)
                    out_tokens, in_tokens = out_tokens + out_n, in_tokens + in_n
                    if kind is not None:
                        kinds[kind] = kinds.get(kind, 0) + 1
        span = max(now_s - max(covered_from, self.started_s), 1e-9)
        dists = {}
        for metric in WINDOW_METRICS:
            arrays = [np.frombuffer(b.values[metric], dtype=np.float64) for b in whole if metric in b.values]
            if partial is not None and metric in partial.values:
                values = np.frombuffer(partial.values[metric], dtype=np.float64)
                times = np.frombuffer(partial.times[metric], dtype=np.float64)
                arrays.append(values[times > start])
            joined = np.concatenate(arrays) if arrays else np.empty(0)
            dists[metric] = distribution(joined)
        done = ok + errors
        return WindowFigures(
            span_s=span,
            completed=ok,
            errored=errors,
            dists=dists,
            error_rate=errors / done if done else None,
            requests_per_s=ok / span if done else None,
            output_tokens_per_s=out_tokens / span if done else None,
            total_tokens_per_s=(out_tokens + in_tokens) / span if done else None,
            error_kinds=kinds,
        )

    def stored_samples(self) -> int:
        """How many values the ring holds now (for the memory-bound test)."""
        return sum(len(a) for b in self._buckets for a in b.values.values())

    @property
    def bucket_count(self) -> int:
        return len(self._buckets)


def _per_request(r: RequestRecord) -> dict[str, list[float]]:
    """A completed record's values: ms for times, tokens/s for decode; metrics that do not apply are absent."""
    out: dict[str, list[float]] = {}
    ttft = ttft_ns(r)
    if ttft is not None:
        out["ttft"] = [ttft / NS_PER_MS]
    e2e = e2e_ns(r)
    if e2e is not None:
        out["e2e"] = [e2e / NS_PER_MS]
    tpot = tpot_ns(r)
    if tpot is not None:
        out["tpot"] = [tpot / NS_PER_MS]
    decode = decode_tokens_per_s(r)
    if decode is not None:
        out["decode"] = [decode]
    itl = itl_values_ns(r)
    if itl.size:
        out["itl"] = (itl / NS_PER_MS).tolist()
    return out
