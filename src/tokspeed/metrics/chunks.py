"""Chunk timing pooled over many requests, vectorised: chunk gaps and per-token ITL.

A run may hold 10^5 requests of hundreds of chunks each, so the chunk lists are
flattened into int64 arrays (in batches, to bound memory) and every gap is
computed by numpy; Python never loops over tokens.

Formulas, per request, with g_i = chunk_ns[i] − chunk_ns[i−1] for i ≥ 1:

* chunk gap: g_i
* ITL, chunk_tokens known: g_i / k_i repeated k_i times, k_i = chunk_tokens[i]
  (chunks with k_i ≤ 0 are dropped first, so their time joins the next gap);
* ITL, chunk_tokens unknown or not one per chunk: one value g_i / k per gap,
  k = output_tokens / C (C chunks; k = 1 when output_tokens is unknown or < 1).
* max ITL: the largest of the request's ITL values (NaN below 2 chunks).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from tokspeed.records import RequestRecord

# chunks flattened per batch: bounds the temporary arrays to a few tens of MB
_BATCH_CHUNKS = 1 << 20


@dataclass(frozen=True, slots=True)
class ChunkTiming:
    """Pooled chunk timing of a sequence of records.

    `gaps_ns` (int64) and `itl_ns` (float64) pool all records; `max_itl_ns`
    (float64, NaN where not applicable) has one entry per record, in order.
    """

    gaps_ns: np.ndarray
    itl_ns: np.ndarray
    max_itl_ns: np.ndarray


def chunk_timing(records: Sequence[RequestRecord]) -> ChunkTiming:
    """Chunk gaps, per-token ITL values and per-request max ITL for `records`."""
    parts = [_batch_timing(batch) for batch in _batches(records)]
    if not parts:
        empty = np.empty(0)
        return ChunkTiming(np.empty(0, dtype=np.int64), empty, empty)
    return ChunkTiming(
        gaps_ns=np.concatenate([p.gaps_ns for p in parts]),
        itl_ns=np.concatenate([p.itl_ns for p in parts]),
        max_itl_ns=np.concatenate([p.max_itl_ns for p in parts]),
    )


def _batches(records: Sequence[RequestRecord]) -> Iterator[Sequence[RequestRecord]]:
    """Consecutive slices of `records` holding about _BATCH_CHUNKS chunks each."""
    start, chunks = 0, 0
    for i, r in enumerate(records):
        chunks += len(r.chunk_ns)
        if chunks >= _BATCH_CHUNKS:
            yield records[start : i + 1]
            start, chunks = i + 1, 0
    if start < len(records):
        yield records[start:]


def _batch_timing(records: Sequence[RequestRecord]) -> ChunkTiming:
    """Flatten one batch's chunks; `owner` maps each chunk to its record's position."""
    n = len(records)
    lengths = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=n)
    total = int(lengths.sum())
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in records), np.int64, total)
    owner = np.repeat(np.arange(n), lengths)
    gaps = np.diff(times)[owner[1:] == owner[:-1]]  # never across two records

    weight, copies = _chunk_weights(records, lengths, total)
    keep = weight > 0
    if not keep.all():
        times, owner, weight, copies = times[keep], owner[keep], weight[keep], copies[keep]
    same = owner[1:] == owner[:-1]
    per_gap = np.diff(times)[same] / weight[1:][same]
    return ChunkTiming(
        gaps_ns=gaps,
        itl_ns=np.repeat(per_gap, copies[1:][same]),
        max_itl_ns=_max_per_owner(per_gap, owner[1:][same], n),
    )


def _known_tokens(r: RequestRecord) -> bool:
    return r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns)


def _chunk_weights(
    records: Sequence[RequestRecord], lengths: np.ndarray, total: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk: the tokens its gap is divided by, and how many ITL values it yields."""
    known = np.fromiter((_known_tokens(r) for r in records), dtype=bool, count=len(records))
    spread = np.fromiter((_even_share(r) for r in records), np.float64, len(records))
    weight = np.repeat(spread, lengths)
    copies = np.ones(total, dtype=np.int64)
    if known.any():
        tokens = np.fromiter(
            chain.from_iterable(
                r.chunk_tokens if k else repeat(0, len(r.chunk_ns))  # type: ignore[misc]
                for r, k in zip(records, known)
            ),
            np.int64,
            total,
        )
        by_chunk = np.repeat(known, lengths)
        weight = np.where(by_chunk, tokens, weight)
        copies = np.where(by_chunk, np.maximum(tokens, 0), copies)
    return weight, copies


def _even_share(r: RequestRecord) -> float:
    """Tokens per chunk when they are not known per chunk: output_tokens / C."""
    chunks = len(r.chunk_ns)
    if chunks == 0 or r.output_tokens is None or r.output_tokens < 1:
        return 1.0
    return r.output_tokens / chunks


def _max_per_owner(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Max of `values` per owner index (owner sorted ascending); NaN for owners without any."""
    out = np.full(n, np.nan)
    if values.size:
        starts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
        out[owner[starts]] = np.maximum.reduceat(values, starts)
    return out
