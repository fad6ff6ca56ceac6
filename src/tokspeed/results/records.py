"""Which records of a saved run belong to which of its benchmarks (load points).

Records carry the position of their benchmark (`benchmark`). Files written
before that field existed hold only benchmark 0; for them: requests.jsonl holds the records of every benchmark in the order they
finished, and benchmarks run one after another. A benchmark's measured
(non-warm-up) records are therefore the next `summary.requests.total` measured
records in file order; a warm-up record goes with the benchmark whose
measured records follow it. With one benchmark every record is its own.
When the counts do not add up (a hand-edited or truncated file), the split is
refused (None) rather than guessed, and callers fall back to summaries alone.
"""

from __future__ import annotations

from tokspeed.records import RequestRecord
from tokspeed.results.run_json import Benchmark


def records_by_benchmark(
    benchmarks: list[Benchmark], records: list[RequestRecord]
) -> list[list[RequestRecord]] | None:
    """One list of records per benchmark, in order; None when they cannot be attributed."""
    if not benchmarks:
        return None
    if len(benchmarks) == 1:
        return [list(records)]
    if any(r.benchmark for r in records):
        groups_by_field: list[list[RequestRecord]] = [[] for _ in benchmarks]
        for r in records:
            if not 0 <= r.benchmark < len(benchmarks):
                return None
            groups_by_field[r.benchmark].append(r)
        return groups_by_field
    wanted = [b.summary.requests.total for b in benchmarks]
    if sum(wanted) != sum(1 for r in records if not r.warmup):
        return None
    groups: list[list[RequestRecord]] = [[] for _ in benchmarks]
    current, taken = 0, 0
    for r in records:
        while current < len(wanted) - 1 and taken >= wanted[current]:
            current, taken = current + 1, 0
        groups[current].append(r)
        if not r.warmup:
            taken += 1
    return groups
