"""The point rules, checks and cold-start figures read records as a stream, once, into bounded state."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from diagnosis_builders import T0, bench, failed, many, point, rec, result
from tokspeed.config import RunConfig
from tokspeed.diagnosis.digest import (
    MAX_CAUSES,
    MAX_LABELS,
    LineFitter,
    PointDigest,
    digest_point,
)
from tokspeed.diagnosis.errors import errors
from tokspeed.diagnosis.rules import diagnose, diagnose_point
from tokspeed.diagnosis.stability import cold_start
from tokspeed.diagnosis.thresholds import DEFAULT, Thresholds
from tokspeed.metrics.buffered import FLUSH_AT, BufferedSample
from tokspeed.metrics.cold_start import ColdStartTally, cold_start_figures
from tokspeed.metrics.fit import fit_line
from tokspeed.records import ErrorKind, RequestRecord, TokenSource
from tokspeed.runner.checks import measurement_warnings
from tokspeed.stats.median import sample_median
from tokspeed.stats.sketch import BoundedSample

MS = 1_000_000


class Once:
    """An iterable that may be read only once, counting the records it hands out."""

    def __init__(self, records: list[RequestRecord]) -> None:
        self._records = records
        self.read = 0
        self._used = False

    def __iter__(self) -> Iterator[RequestRecord]:
        assert not self._used, "read twice"
        self._used = True
        for r in self._records:
            self.read += 1
            yield r


def _mixed(n: int, seed: int = 1) -> list[RequestRecord]:
    """Warm-up, slow first requests, early stops, chunk counts, retries, connects and failures of several causes."""
    rng = random.Random(seed)
    records = [rec(i, warmup=True, ttft_ms=300.0 if i == 0 else 20.0) for i in range(3)]
    for i in range(3, n):
        if rng.random() < 0.1:
            records.append(failed(i, ErrorKind.HTTP, f"HTTP 503: busy {i}", 503))
            continue
        r = rec(i, ttft_ms=400.0 if i == 3 else rng.uniform(5, 50), tokens=rng.choice([8, 16]),
                finish=rng.choice(["length", "stop"]), input_tokens=rng.choice([100, 400, 1600]),
                source=rng.choice([TokenSource.USAGE, TokenSource.CHUNKS]), iteration=rng.choice([1, 2]))
        r.retries = rng.choice([0, 0, 0, 1])
        r.connect_duration_ns = rng.choice([None, None, 2 * MS])
        records.append(r)
    return records


def test_a_generator_gives_what_a_list_gives() -> None:
    records = _mixed(300)
    b = bench(records)
    from_list = diagnose_point(0, b, records, {})
    once = Once(records)
    assert diagnose_point(0, b, (r for r in once), {}) == from_list and once.read == len(records)
    assert {f.rule for f in from_list} >= {"errors", "output_length", "token_count", "cold_start", "reconnects"}
    assert measurement_warnings(b, RunConfig(), iter(records)) == measurement_warnings(b, RunConfig(), records)
    began = T0 - 5000 * MS
    assert cold_start_figures({}, iter(records), began) == cold_start_figures({}, records, began)
    res = result(b)
    assert diagnose(res, Once(records)) == diagnose(res, records)


def test_one_digest_serves_the_rules_the_checks_and_cold_start() -> None:
    records = _mixed(200)
    b = bench(records)
    once = Once(records)
    digest = digest_point(once)
    assert once.read == len(records)
    assert diagnose_point(0, b, digest, {}) == diagnose_point(0, b, records, {})
    assert measurement_warnings(b, RunConfig(), digest) == measurement_warnings(b, RunConfig(), records)
    assert cold_start_figures({}, digest.cold, 0) == cold_start_figures({}, records, 0)


def test_the_first_request_is_the_earliest_sent_whatever_the_file_order() -> None:
    records = [rec(i, ttft_ms=10.0 + i % 3) for i in range(1, 10)]
    records.append(rec(0, ttft_ms=200.0))  # sent first, read last
    (f,) = cold_start(point(records), DEFAULT)
    assert f.evidence["first_request_ms"] == 200.0 and f.evidence["median_ms"] == 11.0


def test_a_lower_iteration_read_late_starts_the_first_iteration_over() -> None:
    late = [rec(i, iteration=2, ttft_ms=10.0) for i in range(10)]
    early = [rec(100 + i, iteration=1, ttft_ms=100.0 if i == 0 else 10.0, start_ms=-1e6 + i) for i in range(6)]
    (f,) = [f for f in cold_start(point([*late, *early]), DEFAULT) if "first measured request" in f.title]
    assert f.evidence["first_request_ms"] == 100.0 and f.evidence["median_ms"] == 10.0


def test_failures_beyond_the_tallied_causes_are_still_counted() -> None:
    n = MAX_CAUSES + 40
    records = [failed(i, ErrorKind.HTTP, f"HTTP 500: worker {_word(i)} died", 500) for i in range(n)]
    digest = digest_point(records)
    assert len(digest.causes) == MAX_CAUSES and digest.untallied_failed == 40 and digest.failed == n
    found = errors(point(records), Thresholds(max_error_groups=3))
    total, *by_cause = found  # every request failed, over causes of 1 each: the total finding comes first
    assert total.severity == "critical" and total.evidence["count"] == n and total.evidence["causes"] == MAX_CAUSES + 1
    assert sum(int(f.evidence["count"]) for f in by_cause) == n  # every failure is in some cause's finding
    assert found[-1].evidence["causes"] == MAX_CAUSES - 3 + 1  # the untallied ones: at least one more cause


def _word(i: int) -> str:
    """i in letters (numbers would be normalised away): a distinct error message per i."""
    out = ""
    while True:
        i, digit = divmod(i, 26)
        out += chr(97 + digit)
        if not i:
            return out


def _synthetic(n: int) -> Iterator[RequestRecord]:
    """n records of every kind, each failure a new cause and each anomaly and finish reason a new name."""
    for i in range(n):
        if i % 5 == 0:
            yield failed(i, ErrorKind.STREAM, f"engine error {_word(i)}")
            continue
        r = rec(i, ttft_ms=5.0 + i % 17, tokens=4, max_tokens=16, finish=f"reason-{i}", input_tokens=10 + i % 50,
                anomalies=[f"anomaly-{i}"], warmup=i % 7 == 0)
        r.retries = i % 2
        r.connect_duration_ns = i
        yield r


def _containers(obj: Any, seen: set[int] | None = None) -> dict[str, int]:
    """Size of every list, dict, Counter and array inside the digest (by attribute path); fails on a kept record."""
    seen = seen if seen is not None else set()
    sizes: dict[str, int] = {}

    def walk(value: Any, path: str) -> None:
        assert not isinstance(value, RequestRecord), f"{path} keeps a record"
        if id(value) in seen or isinstance(value, (str, int, float, type(None), np.ndarray)):
            return
        seen.add(id(value))
        if isinstance(value, dict):
            sizes[path] = len(value)
            for k, v in value.items():
                walk(k, f"{path}.key")
                walk(v, f"{path}[]")
        elif isinstance(value, (list, tuple)) or type(value).__name__ == "array":
            sizes[path] = len(value)
            for v in value:
                walk(v, f"{path}[]")
        elif is_dataclass(value):
            for f in fields(value):
                walk(getattr(value, f.name), f"{path}.{f.name}")
        elif hasattr(value, "__slots__"):
            for name in value.__slots__:
                if hasattr(value, name) and not callable(getattr(value, name)):
                    walk(getattr(value, name), f"{path}.{name}")

    walk(obj, "digest")
    return sizes


def test_the_digest_does_not_grow_with_the_records() -> None:
    small, large = digest_point(_synthetic(1_000)), digest_point(_synthetic(10_000))
    assert large.measured > 8_000 and large.failed == 2_000 and large.asked > 6_000
    assert len(large.causes) == MAX_CAUSES and large.untallied_failed == 2_000 - MAX_CAUSES
    for counts in (large.anomalies, large.short_reasons):
        assert len(counts) == MAX_LABELS + 1  # the first MAX_LABELS names, then "other"
    assert large.measured_latency.pending < FLUSH_AT and large.first_iteration_latency.rest.pending < FLUSH_AT
    sizes_small, sizes_large = _containers(small), _containers(large)
    assert all(n < FLUSH_AT for p, n in sizes_large.items() if p.endswith("._pending"))
    # what grows is only inside the bounded samples (exact up to their limit), the line's points (up to its
    # limit) and the batches waiting for a sample (below BATCH)
    bounded = ("_sample", "prefill._x", "prefill._y", "._pending")
    grew = {p: (sizes_small.get(p), n) for p, n in sizes_large.items() if n > sizes_small.get(p, 0)
            and not any(b in p for b in bounded)}
    assert grew == {"digest.causes": (200, MAX_CAUSES)}  # 200 causes among 1000 records, capped at MAX_CAUSES
    assert large.prefill.kept <= large.prefill.limit


def test_the_line_fitter_beyond_its_limit_matches_the_exact_fit() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(10, 4000, 5_000).astype(float)
    y = 20.0 + 0.05 * x + rng.normal(0, 3, x.size)
    exact, bounded = LineFitter(), LineFitter(limit=100)
    for a, b in zip(x.tolist(), y.tolist(), strict=True):
        exact.add(a, b)
        bounded.add(a, b)
    assert exact.fit() == fit_line(x, y) and bounded.kept == 0
    want, got = fit_line(x, y), bounded.fit()
    assert got.points == want.points == 5_000
    for name in ("slope_ms_per_1k_tokens", "intercept_ms", "r2"):
        assert abs(getattr(got, name) - getattr(want, name)) <= 1e-9 * max(1.0, abs(getattr(want, name)))
    flat = LineFitter(limit=1)
    for v in (5.0, 5.0, 5.0):
        flat.add(100.0, v)
    assert flat.fit().slope_ms_per_1k_tokens is None


def test_the_median_is_statistics_median_while_exact() -> None:
    rng = random.Random(5)
    for n in (1, 2, 7, 10, FLUSH_AT + 3):
        values = [rng.uniform(0.001, 0.3) for _ in range(n)]
        sample = BufferedSample()
        for v in values:
            sample.append(v)
        assert sample_median(sample.read()) == statistics.median(values) and sample.read().count == n
    pair = BoundedSample()
    pair.add(np.array([0.0005662177447909664, 0.0044426199863949155]))  # np.percentile's p50 differs in the last bit
    assert pair.distribution().p50 != statistics.median(pair.values().tolist())
    assert sample_median(pair) == statistics.median(pair.values().tolist())
    assert sample_median(BoundedSample()) is None
    many_values = np.random.default_rng(2).lognormal(3.0, 1.0, 5_001)
    folded = BoundedSample(limit=100)
    folded.add(many_values)
    assert not folded.exact  # beyond its limit: the histogram's p50, within its relative accuracy
    assert abs((sample_median(folded) or 0) / float(np.median(many_values)) - 1) <= 2 * folded.accuracy


def test_cold_start_tally_keeps_the_earliest_apart() -> None:
    tally = ColdStartTally()
    for r in [rec(5, ttft_ms=10.0), rec(6, ttft_ms=30.0), rec(1, ttft_ms=500.0)]:  # the last read is the first sent
        tally.add(r)
    assert tally.first is not None and tally.first.index == 1
    assert tally.warm_requests == 2 and sample_median(tally.warm_ttft.read()) == 0.02
    assert isinstance(PointDigest().cold, ColdStartTally)


def test_point_data_still_takes_a_list() -> None:
    records = many(12)
    assert point(records).digest.measured == 12


def test_a_failure_while_reading_the_records_becomes_a_finding() -> None:
    records = many(5)

    def broken() -> Iterator[RequestRecord]:
        yield records[0]
        raise OSError("requests.jsonl vanished")

    (f,) = diagnose_point(0, bench(records), broken(), {})
    assert f.rule == "diagnosis_error" and f.evidence == {"failed_rule": "point"} and "OSError" in f.title
