"""Mooncake hash blocks under a real tokenizer: each block is BLOCK_TOKENS of the model's tokens.

Found against vLLM: with --tokenizer, a row of 1,100 tokens with three hash ids reached
the server as 1,214 tokens (blocks were 512 *words*, ~560 tokens), so the replay sent
more prefill than the trace and shared prefixes longer than the trace's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokspeed.records import TokenSource
from tokspeed.workload.trace_formats import TraceRow
from tokspeed.workload.trace_source import BLOCK_TOKENS, trace_workload

tokenizers = pytest.importorskip("tokenizers")  # tokenizer_file (conftest) is trained with it


def _ids(path: Path, text: str) -> list[int]:
    return list(tokenizers.Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)


def test_hash_blocks_are_exact_in_tokens_and_shared_prefixes_are_whole_blocks(tokenizer_file: Path) -> None:
    rows = (
        TraceRow(0.0, 1100, 4, hash_ids=(10, 11, 12)),
        TraceRow(0.1, 1100, 4, hash_ids=(10, 11, 13)),
        TraceRow(0.2, 700, 4, hash_ids=(10, 14)),
        TraceRow(0.3, 1300, 4, hash_ids=(20,)),  # more input than blocks: padded
        TraceRow(0.4, 300, 4, hash_ids=(10, 11)),  # less input than its first block
    )
    w = trace_workload(rows, "mc", "completions", str(tokenizer_file), 0)
    specs = [w.request(i) for i in range(len(rows))]
    ids = [_ids(tokenizer_file, s.prompt or "") for s in specs]
    for row, spec, got in zip(rows, specs, ids):
        assert spec.input_tokens_source is TokenSource.TOKENIZER
        assert spec.input_tokens == len(got)  # the count is the tokenizer's own
        assert abs(len(got) - row.input_tokens) <= 1, (row, len(got))  # a cut word may re-tokenize by one
    a, b, c, d, e = ids
    shared = 2 * BLOCK_TOKENS
    assert a[: shared - 1] == b[: shared - 1] and a[shared + 8 : 1090] != b[shared + 8 : 1090]
    assert a[: BLOCK_TOKENS - 1] == c[: BLOCK_TOKENS - 1] and a[BLOCK_TOKENS + 8 : 690] != c[BLOCK_TOKENS + 8 : 690]
    assert a[:8] != d[:8]  # another first block: nothing shared
    assert e[:290] == a[:290]
    assert (specs[0].prompt or "").startswith((specs[1].prompt or "")[: len(specs[1].prompt or "") // 2])
