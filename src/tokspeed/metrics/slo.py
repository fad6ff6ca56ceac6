"""Service-level objectives: parsing `ttft_p99_ms<=500` and judging requests against them.

An SLO is a metric name, an operator and a value. Names follow
`<metric>_<stat>_<unit>`:

* with a stat (`ttft_p99_ms<=500`) it is a *percentile SLO*, held by the run's
  distribution (what capacity search holds); any percentile may be named (`itl_p75_ms`,
  `e2e_p9999_ms`): the summary then computes it, as if given to --percentiles;
* without one (`ttft_ms<=500`) it is a *per-request SLO*, applied to each
  request; goodput counts completed requests that meet every per-request
  threshold. A percentile SLO implies its per-request threshold for goodput
  (`SLO.per_request_form`): any stat but `stdev` (a spread, not a level) does,
  so `ttft_p99_ms<=500` makes goodput count requests with `ttft_ms<=500`.

Run-level names without a per-request form (`error_rate`, `output_tokens_per_s`,
`requests_per_s`) are only judged on the summary.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tokspeed.errors import ConfigError
from tokspeed.metrics.table import PER_REQUEST_SLOS
from tokspeed.stats.distribution import quantile_of_name

STATS = ("mean", "stdev", "min", "p50", "p90", "p95", "p99", "p999", "max")
# per-request metric name -> unit suffix (the metric table's, in its order); the open-loop ones count from the
# scheduled arrival (--rate only), so client-side waiting counts
PER_REQUEST: dict[str, str] = {m.name: m.unit for m in PER_REQUEST_SLOS}
FROM_SCHEDULE: tuple[str, ...] = tuple(m.name for m in PER_REQUEST_SLOS if m.open_loop)
RUN_LEVEL = ("error_rate", "requests_per_s", "output_tokens_per_s", "total_tokens_per_s")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
_SLO_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True, slots=True)
class SLO:
    """`metric` is the base name (`ttft`), `stat` None for per-request, `unit` the suffix."""

    metric: str
    stat: str | None
    unit: str
    op: str
    value: float

    @property
    def name(self) -> str:
        """The summary key this SLO reads, e.g. `ttft_p99_ms` or `error_rate`."""
        if self.metric in RUN_LEVEL:
            return self.metric
        parts = [self.metric] + ([self.stat] if self.stat else []) + [self.unit]
        return "_".join(parts)

    @property
    def per_request(self) -> bool:
        """True when the metric has a per-request value (`ttft`, ...), whatever the stat."""
        return self.metric in PER_REQUEST

    @property
    def kind(self) -> Literal["run", "percentile", "per_request"]:
        """`run` (error_rate, ...), `percentile` (has a stat) or `per_request` (no stat)."""
        if not self.per_request:
            return "run"
        return "per_request" if self.stat is None else "percentile"

    @property
    def quantile(self) -> float | None:
        """The percentile of a percentile SLO's stat (99.0 for `p99`, 75.0 for `p75`); None otherwise."""
        return quantile_of_name(self.stat) if self.stat else None

    def per_request_form(self) -> SLO | None:
        """The per-request threshold this SLO implies for goodput, or None.

        A per-request SLO is its own form; `ttft_p99_ms<=500` implies
        `ttft_ms<=500`; `stdev` SLOs and run-level SLOs imply none.
        """
        if not self.per_request or self.stat == "stdev":
            return None
        if self.stat is None:
            return self
        return SLO(metric=self.metric, stat=None, unit=self.unit, op=self.op, value=self.value)

    @property
    def compare(self) -> Callable[[Any, Any], Any]:
        """The operator as a function `(observed, threshold)`; elementwise on numpy arrays."""
        return _OPS[self.op]

    def holds(self, observed: float | None) -> bool:
        """True when `observed` meets the objective; a missing value never does."""
        return observed is not None and _OPS[self.op](observed, self.value)

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value:g}"


def parse_slo(text: str) -> SLO:
    """Parse `ttft_p99_ms<=500`, `tpot_ms<=50`, `error_rate<=0.01`, `decode_p50_tokens_per_s>=20`."""
    m = _SLO_RE.match(text)
    if not m:
        raise ConfigError(
            f"cannot parse SLO {text!r}",
            hint="write NAME OP VALUE, e.g. --slo 'ttft_p99_ms<=500' or --slo 'tpot_ms<=50'",
        )
    name, op, raw = m.groups()
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"SLO {text!r}: {raw!r} is not a number") from exc
    if name in RUN_LEVEL:
        return SLO(metric=name, stat=None, unit="", op=op, value=value)
    for metric, unit in PER_REQUEST.items():
        prefix, suffix = metric + "_", "_" + unit
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        middle = name[len(prefix) : len(name) - len(suffix)]
        if middle == "" and name == f"{metric}_{unit}":
            return SLO(metric=metric, stat=None, unit=unit, op=op, value=value)
        if middle in STATS or quantile_of_name(middle) is not None:
            return SLO(metric=metric, stat=middle, unit=unit, op=op, value=value)
    known = ", ".join(f"{m}[_STAT]_{u}" for m, u in PER_REQUEST.items())
    raise ConfigError(
        f"unknown SLO metric {name!r}",
        hint=f"use one of {known} (STAT in {', '.join(STATS)}, or any percentile: p75, p9999) or {', '.join(RUN_LEVEL)}",
    )
