"""The run's end-of-point warnings: a chunk count under max_tokens with finish_reason "length" is no early stop."""

from __future__ import annotations

from tokspeed.config import RunConfig
from tokspeed.records import RequestRecord, TokenSource
from tokspeed.results import build_benchmark
from tokspeed.runner.checks import measurement_warnings


def _record(i: int, out: int, finish: str) -> RequestRecord:
    sent = 1_000_000 * i
    chunks = [sent + 10_000_000 + k * 1_000_000 for k in range(out // 4)]  # 4 tokens a chunk, no usage
    return RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent,
                         first_token_ns=chunks[0], first_content_ns=chunks[0], end_ns=chunks[-1], chunk_ns=chunks,
                         output_tokens=out, output_tokens_source=TokenSource.CHUNKS, max_tokens=64,
                         finish_reason=finish, input_tokens=10)


def _warnings(records: list[RequestRecord]) -> list[str]:
    bench = build_benchmark("p", {"kind": "concurrency", "concurrency": 4}, records, [])
    return [text for _, text in measurement_warnings(bench, RunConfig(), records)]


def test_length_stops_counted_by_chunks_are_not_early_stops() -> None:
    records = [_record(i, 16, "length") for i in range(20)]  # 16 chunks seen of 64 tokens asked
    assert not [w for w in _warnings(records) if "stopped before max_tokens" in w]


def test_real_early_stops_still_warn() -> None:
    records = [_record(i, 16, "stop") for i in range(20)]
    assert [w for w in _warnings(records) if "stopped before max_tokens" in w]


def test_one_bad_usage_value_is_one_warning_and_the_finding_covers_it() -> None:
    """Issue 24: one wrong usage was warned twice here (an anomaly, and 'no usage' — false) beside its finding."""
    from tokspeed.records import Anomaly

    records = [_record(i, 16, "length") for i in range(4)]
    for r in records[1:]:
        r.output_tokens_source = TokenSource.USAGE
    records[0].anomalies = [Anomaly.USAGE_BELOW_CHUNKS.value]  # usage given, below its chunks: counted by chunks
    bench = build_benchmark("p", {"kind": "concurrency", "concurrency": 4}, records, [])
    tagged = measurement_warnings(bench, RunConfig(), records)
    assert [rule for rule, text in tagged if "usage" in text] == ["token_count"]
    assert not [text for _, text in tagged if "had no usage" in text]
