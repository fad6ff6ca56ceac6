"""How a number looks in every text report: `—` for none, thousands separated from 1,000, else `digits` decimals."""

from __future__ import annotations


def fmt(value: float | None, digits: int = 2) -> str:
    """`value` for a table cell: `—` when None, `12,345` from 1,000 up, else with `digits` decimals."""
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"
