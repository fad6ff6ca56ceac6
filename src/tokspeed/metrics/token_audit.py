"""Token audit: how output tokens were counted, how far the counts disagree, and which requests stopped early.

Over the completed, measured (non-warm-up) records of one load point:

* `sources`: requests per output-token source (`usage`, `tokenizer`, `chunks`, ...);
* usage vs tokenizer: for each request whose count came from the server's usage
  and whose text was kept (`tokspeed run --token-audit`), d = tokenizer(text) − usage.
  Reported: compared (n), exact (d = 0), mean d, mean |d|, max |d|, and
  relative = Σ|d| / Σ usage (a fraction). A reasoning model's usage counts
  reasoning tokens the content text does not hold, so d < 0 there is expected;
* per-chunk tokens: histogram {tokens in one chunk: chunks} from `chunk_tokens`
  (known only when the server sent usage on every chunk), and the distribution of
  output_tokens / token-bearing chunks per request (always available);
* early stops: requests that asked for `max_tokens` and got fewer (EOS, a stop
  string: finish_reason is usually `stop`), by finish_reason; and requests that got
  more than they asked for (the server ignored max_tokens). A request that ended with
  finish_reason `length` but whose count (one per chunk, no usage) is below max_tokens
  is not short: its chunks carried several tokens each (`undercounted`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from tokspeed.records import RequestRecord, Status, TokenSource
from tokspeed.stats.distribution import Distribution, distribution
from tokspeed.workload.tokens import TokenCounter

EXAMPLES = 10  # request indices listed per finding


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class CountDiscrepancy(_Frozen):
    """Tokenizer count − usage count over the requests that have both."""

    compared: int
    exact: int
    mean: float
    mean_abs: float
    max_abs: int
    relative: float | None = Field(description="Σ|tokenizer − usage| / Σ usage (None when Σ usage is 0)")
    worst: list[int] = Field(default_factory=list, description="request indices with the largest |difference|")


class EarlyStops(_Frozen):
    """Requests whose output length differs from the max_tokens they asked for."""

    asked: int = Field(description="completed requests that gave max_tokens and have a token count")
    short: int = Field(description="fewer tokens than asked (EOS or a stop string stopped them)")
    short_fraction: float | None
    short_by_finish_reason: dict[str, int] = Field(default_factory=dict)
    over: int = Field(0, description="more tokens than asked: the server ignored max_tokens")
    examples: list[int] = Field(default_factory=list, description="indices of the first short requests")
    undercounted: int = Field(0, description="finish_reason 'length' yet fewer tokens than asked, counted by chunks: "
                              "the chunks carried several tokens each (the count is low), not an early stop")


class TokenAudit(_Frozen):
    """The token audit of one load point (see the module docstring for the formulas)."""

    requests: int
    sources: dict[str, int]
    tokenizer: bool = Field(description="whether a tokenizer counted the kept texts")
    texts: int = Field(description="requests whose output text was kept")
    discrepancy: CountDiscrepancy | None = None
    chunk_tokens_histogram: dict[str, int] = Field(default_factory=dict)
    chunks_with_known_tokens: int = 0
    tokens_per_chunk: Distribution = Distribution()
    early_stops: EarlyStops


def audit_tokens(records: Iterable[RequestRecord], counter: TokenCounter | None = None) -> TokenAudit:
    """The token audit of the completed, measured `records`; `counter` counts kept texts when given."""
    ok = [r for r in records if not r.warmup and r.status is Status.OK]
    sources = Counter("unknown" if r.output_tokens_source is None else r.output_tokens_source.value for r in ok)
    texts = [r for r in ok if r.output_text is not None]
    histogram, known = chunk_histogram(ok)
    return TokenAudit(
        requests=len(ok),
        sources=dict(sorted(sources.items())),
        tokenizer=counter is not None,
        texts=len(texts),
        discrepancy=discrepancy(texts, counter) if counter is not None else None,
        chunk_tokens_histogram=histogram,
        chunks_with_known_tokens=known,
        tokens_per_chunk=distribution([r.output_tokens / len(r.chunk_ns) for r in ok
                                       if r.output_tokens is not None and len(r.chunk_ns) > 0]),
        early_stops=early_stops(ok),
    )


def discrepancy(records: Sequence[RequestRecord], counter: TokenCounter) -> CountDiscrepancy | None:
    """tokenizer(output_text) − usage over the records counted by usage that kept their text; None if none."""
    pairs = [(r.index, counter.count(r.output_text), r.output_tokens) for r in records
             if r.output_text is not None and r.output_tokens is not None
             and r.output_tokens_source is TokenSource.USAGE]
    if not pairs:
        return None
    diffs = [(tok - use, index) for index, tok, use in pairs]
    total_usage = sum(use for _, _, use in pairs)
    abs_sum = sum(abs(d) for d, _ in diffs)
    worst = sorted((d for d in diffs if d[0] != 0), key=lambda d: (-abs(d[0]), d[1]))[:EXAMPLES]
    return CountDiscrepancy(
        compared=len(pairs),
        exact=sum(1 for d, _ in diffs if d == 0),
        mean=sum(d for d, _ in diffs) / len(diffs),
        mean_abs=abs_sum / len(diffs),
        max_abs=max(abs(d) for d, _ in diffs),
        relative=abs_sum / total_usage if total_usage else None,
        worst=[index for _, index in worst],
    )


def chunk_histogram(records: Iterable[RequestRecord]) -> tuple[dict[str, int], int]:
    """{tokens in one chunk: number of chunks} over records with per-chunk counts, and how many chunks that is.

    Keys are strings (JSON), in ascending numeric order.
    """
    counts: Counter[int] = Counter()
    for r in records:
        if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
            counts.update(r.chunk_tokens)
    return {str(k): counts[k] for k in sorted(counts)}, sum(counts.values())


def early_stops(ok: Sequence[RequestRecord]) -> EarlyStops:
    """Completed requests with output_tokens < max_tokens (by finish_reason), and > max_tokens."""
    asked = [r for r in ok if r.max_tokens is not None and r.output_tokens is not None]
    pairs = [(r, r.output_tokens or 0, r.max_tokens or 0) for r in asked]
    below = [r for r, got, wanted in pairs if got < wanted]
    short = [r for r in below if not _undercounted(r)]
    over = sum(1 for _, got, wanted in pairs if got > wanted)
    reasons = Counter(r.finish_reason or "none" for r in short)
    return EarlyStops(
        asked=len(asked),
        short=len(short),
        short_fraction=len(short) / len(asked) if asked else None,
        short_by_finish_reason=dict(sorted(reasons.items())),
        over=over,
        examples=sorted(r.index for r in short)[:EXAMPLES],
        undercounted=len(below) - len(short),
    )


def _undercounted(r: RequestRecord) -> bool:
    """Stopped at max_tokens ('length') but counted one token per chunk: multi-token chunks, not an early stop."""
    return r.finish_reason == "length" and r.output_tokens_source is TokenSource.CHUNKS
