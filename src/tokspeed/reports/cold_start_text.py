"""The cold-start lines of the console and the text report (in-process targets: target.extra.cold_start).

    start_line(cold) -> "Cold start  model load 1.23 s + engine warm-up 0.05 s + other 0.01 s = 1.29 s"
    cold_start_lines(target) -> that line, then the first request against the warm ones
"""

from __future__ import annotations

from typing import Any


def _s(value: Any) -> str:
    return "—" if value is None else f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def _ms(value: Any) -> str:
    return "—" if value is None else f"{value * 1000:.1f} ms"


def cold_of(target: dict[str, Any] | None) -> dict[str, Any] | None:
    """target.extra.cold_start, when the target recorded one."""
    extra = (target or {}).get("extra")
    cold = extra.get("cold_start") if isinstance(extra, dict) else None
    return cold if isinstance(cold, dict) else None


def start_line(cold: dict[str, Any]) -> str:
    """How the start divided: loading, the engine's warm-up, the rest."""
    warm = f" + engine warm-up {_s(cold.get('warmup_s'))}" if cold.get("warmup_s") is not None else ""
    return (f"Cold start  model load {_s(cold.get('load_s'))}{warm} + imports and start-up {_s(cold.get('other_s'))} "
            f"= {_s(cold.get('start_s'))} before the first request could be sent")


def first_line(cold: dict[str, Any]) -> str | None:
    """The first request after the load against the warm requests (None before any request)."""
    first, warm = cold.get("first_request"), cold.get("warm") or {}
    if not isinstance(first, dict):
        return None
    which = "a warm-up request" if first.get("warmup") else "a measured request"
    after = f"; first token {_s(cold['first_token_after_s'])} after the load began" if cold.get("first_token_after_s") is not None else ""
    return (f"            first request ({which}) TTFT {_ms(first.get('ttft_s'))}, E2E {_ms(first.get('e2e_s'))} · "
            f"warm p50 TTFT {_ms(warm.get('ttft_p50_s'))}, E2E {_ms(warm.get('e2e_p50_s'))} "
            f"({warm.get('requests', 0)} requests){after}")


def cold_start_lines(target: dict[str, Any] | None) -> list[str]:
    """Both lines for the text report; none for a target without cold-start figures (HTTP servers)."""
    cold = cold_of(target)
    if cold is None:
        return []
    first = first_line(cold)
    return [start_line(cold)] + ([first] if first else [])
