"""Console text for multi-turn and shared-prefix runs: the per-turn table, conversation and prefix-cache lines."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.metrics.conversations import (
    ConversationStats,
    PrefixCacheStats,
    TTFTGroup,
    TurnStats,
)
from tokspeed.metrics.schema import Summary
from tokspeed.stats.distribution import Distribution


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def conversation_parts(summary: Summary) -> list[RenderableType]:
    """What a summary with turns, conversations or a prefix cache adds to the printout (nothing otherwise)."""
    parts: list[RenderableType] = []
    if summary.by_turn:
        parts.append(turn_table(summary.by_turn))
    if summary.conversations is not None:
        parts.append(Text(conversation_line(summary.conversations)))
    if summary.prefix_cache is not None:
        parts += [Text(line) for line in prefix_cache_lines(summary.prefix_cache)]
    return parts


def turn_table(turns: list[TurnStats]) -> Table:
    """TTFT and E2E per turn index: later turns' lower TTFT is prefix caching at work."""
    table = Table(title="By turn (each turn sends the whole history)", title_justify="left")
    for name in ("turn", "requests", "input tok mean", "cached tok mean", "TTFT mean ms", "TTFT p50 ms",
                 "TTFT p99 ms", "E2E mean ms", "E2E p99 ms"):
        table.add_column(name, justify="right")
    for t in turns:
        table.add_row(
            str(t.turn), str(t.requests), _f(t.input_tokens.mean, 1), _f(t.cached_tokens.mean, 1),
            _f(t.ttft_ms.mean), _f(t.ttft_ms.p50), _f(t.ttft_ms.p99), _f(t.e2e_ms.mean), _f(t.e2e_ms.p99),
        )
    return table


def conversation_line(c: ConversationStats) -> str:
    return (
        f"Conversations  {c.conversations} ({c.completed} with every turn completed) · "
        f"mean {_f(c.turns.mean, 1)} turns · duration mean {_f(c.duration_s.mean)} s, p99 {_f(c.duration_s.p99)} s "
        f"(think time included) · waiting for answers mean {_f(c.latency_s.mean)} s · "
        f"input mean {_f(c.input_tokens.mean, 0)} tok, output mean {_f(c.output_tokens.mean, 0)} tok"
    )


def prefix_cache_lines(p: PrefixCacheStats) -> list[str]:
    lines = []
    if p.shared is not None or p.unique is not None:
        lines.append(f"Prefixes  shared: {_group(p.shared)} · unique: {_group(p.unique)}")
    if p.cached is not None or p.uncached is not None:
        saved = f" · TTFT saved {_f(p.ttft_saved_ms)} ms" if p.ttft_saved_ms is not None else ""
        hit = f"{_f((p.hit_rate or 0) * 100, 1)}%" if p.hit_rate is not None else "—"
        lines.append(
            f"Prefix cache (server-reported)  hits: {_group(p.cached)} · misses: {_group(p.uncached)} · "
            f"cached tokens mean {_f(_mean(p.cached_tokens), 1)} · hit rate {hit} of prompt tokens{saved}"
        )
    return lines


def _group(g: TTFTGroup | None) -> str:
    if g is None:
        return "none"
    return f"{g.requests} requests, TTFT mean {_f(g.ttft_ms.mean)} ms, p99 {_f(g.ttft_ms.p99)} ms"


def _mean(d: Distribution) -> float | None:
    return d.mean
