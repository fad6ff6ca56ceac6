"""Regression gates: `--fail-if` expressions judged against a run (and optionally a baseline).

Grammar: `NAME OP VALUE`, NAME a `Summary.flat()` name (`ttft_p99_ms`,
`output_tokens_per_s`, `error_rate`), OP one of `>`, `>=`, `<`, `<=`:

* absolute: `error_rate>0.01` fails when the run's value is above 0.01;
* relative: a VALUE ending in `%` (`ttft_p99_ms>+10%`, `output_tokens_per_s<-5%`)
  compares against the baseline: threshold = base × (1 + VALUE/100), so the
  gate fails when the run's value is above 110% (below 95%) of the baseline's.

A gate whose value (or baseline value) is missing fails, with the reason: a
CI gate that cannot be checked must not pass silently.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tokspeed.errors import ConfigError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_GATE_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<)\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")
EXAMPLES = "'ttft_p99_ms>+10%' (relative to the baseline), 'error_rate>0.01' (absolute)"


@dataclass(frozen=True, slots=True)
class Gate:
    """`metric OP value`; `relative` when value is a percentage of the baseline."""

    metric: str
    op: str
    value: float
    relative: bool
    text: str

    def threshold(self, base: float | None) -> float | None:
        """The limit the run's value is held to (None: relative without a baseline value)."""
        if not self.relative:
            return self.value
        return None if base is None else base * (1.0 + self.value / 100.0)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate judged on one benchmark of one run."""

    gate: Gate
    run: str
    benchmark: str
    observed: float | None
    baseline: float | None
    threshold: float | None
    breached: bool
    reason: str


def parse_gate(text: str, known: Iterable[str], allow_relative: bool = True) -> Gate:
    """Parse one `--fail-if` expression; ConfigError (exit 2) with a hint when it is wrong."""
    m = _GATE_RE.match(text)
    if not m:
        raise ConfigError(f"cannot parse --fail-if {text!r}", hint=f"write NAME OP VALUE, e.g. {EXAMPLES}")
    name, op, raw, percent = m.groups()
    names = set(known)
    if name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=3)
        suggestion = f"did you mean {', '.join(close)}?" if close else "names are as in run.json, e.g. ttft_p99_ms, output_tokens_per_s, error_rate"
        raise ConfigError(f"--fail-if {text!r}: unknown metric {name!r}", hint=suggestion)
    if percent and not allow_relative:
        raise ConfigError(
            f"--fail-if {text!r} is relative, and a single run has no baseline",
            hint=f"use an absolute limit here (e.g. '{name}{op}500'), or `tokspeed compare BASE RUN --fail-if {text!r}`",
        )
    return Gate(metric=name, op=op, value=float(raw), relative=bool(percent), text=text.strip())


def judge(gate: Gate, observed: float | None, baseline: float | None, run: str, benchmark: str) -> GateResult:
    """Whether `observed` (and, for relative gates, `baseline`) breaches the gate."""
    limit = gate.threshold(baseline)
    if observed is None:
        return GateResult(gate, run, benchmark, observed, baseline, limit, True, f"{gate.metric} was not measured")
    if limit is None:
        return GateResult(gate, run, benchmark, observed, baseline, limit, True, f"the baseline has no {gate.metric}")
    breached = _OPS[gate.op](observed, limit)
    return GateResult(gate, run, benchmark, observed, baseline, limit, breached, describe(gate, observed, baseline, limit))


def describe(gate: Gate, observed: float, baseline: float | None, limit: float) -> str:
    """`61.2 vs base 50.1 (+22.2%); fails if > 55.11`."""
    if gate.relative and baseline is not None:
        change = f" ({(observed / baseline - 1) * 100:+.1f}%)" if baseline else ""
        return f"{_num(observed)} vs base {_num(baseline)}{change}; fails if {gate.op} {_num(limit)}"
    return f"{_num(observed)}; fails if {gate.op} {_num(limit)}"


def _num(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return f"{value:.3g}"
